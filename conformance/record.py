"""Record vLLM's own schedules of the conformance cases, in one command (issue 22).

    tools/vllm-env                      # once: the vLLM environment (.vllm-venv)
    python -m conformance.record        # generate the cases, run vLLM, write the file
    python -m conformance.record --async    # the same cases under vLLM's default loop
    python -m conformance.record --conversations [--async]   # conversation cases (issue 40 item 4)
    python -m conformance.record --timeouts [--async]   # cases with a timeout: vLLM's aborts (VLLM-MODE.md 18, 31)
    python -m conformance.record --decode   # a decode-side replica with a KV connector (issue 42 item 5)

Runs under any Python 3 (routesim's venv is fine; no vLLM import here): it generates
the cases with conformance/cases.py, runs conformance/vllm_driver.py under the vLLM
environment's python as a subprocess, and writes ``conformance/recorded/vllm-0.30.0.json.gz``
(deterministic gzip): a header (the vLLM and torch versions, the exact command, the
environment recipe and its requirements' sha256, the generator's seed and count), the
cases, and vLLM's results case by case (VLLM-SCHEDULER.md §5).
"""

import argparse
import gzip
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from conformance import cases as case_gen  # noqa: E402

DRIVER = HERE / "vllm_driver.py"
REQUIREMENTS = HERE / "vllm-requirements.txt"
RECORDED = HERE / "recorded" / "vllm-0.30.0.json.gz"
RECORDED_ASYNC = HERE / "recorded" / "vllm-0.30.0-async.json.gz"   # the same cases, vLLM's default loop
RECORDED_CONV = HERE / "recorded" / "vllm-0.30.0-conversations.json.gz"   # follow-ups reusing responses
RECORDED_CONV_ASYNC = HERE / "recorded" / "vllm-0.30.0-conversations-async.json.gz"
RECORDED_TIMEOUTS = HERE / "recorded" / "vllm-0.30.0-timeouts.json.gz"   # aborts at a timeout
RECORDED_TIMEOUTS_ASYNC = HERE / "recorded" / "vllm-0.30.0-timeouts-async.json.gz"
RECORDED_DECODE = HERE / "recorded" / "vllm-0.30.0-decode.json.gz"   # remote prefill: WAITING_FOR_REMOTE_KVS
ENV_RECIPE = ("tools/vllm-env [VENV_DIR] (default .vllm-venv): a venv of its own with "
              "conformance/vllm-requirements.txt installed by `pip install --no-deps -r`")


def default_venv():
    return Path(os.environ.get("VLLM_VENV", REPO / ".vllm-venv"))


def venv_python(venv=None):
    return Path(venv or default_venv()) / "bin" / "python"


def requirements_sha256():
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def run_driver(cases, venv=None):
    """vLLM's results for ``cases`` (a list), from the driver run in the vLLM venv."""
    py = venv_python(venv)
    if not py.exists():
        raise FileNotFoundError(f"{py}: no vLLM environment (run tools/vllm-env)")
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "cases.json"
        dst = Path(d) / "out.json"
        src.write_text(json.dumps(cases))
        proc = subprocess.run([str(py), str(DRIVER), str(src), str(dst)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"vllm_driver.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return json.loads(dst.read_text())


def load(path=RECORDED):
    with gzip.open(path, "rt") as f:
        return json.load(f)


def write(doc, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    with open(path, "wb") as f:
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as z:
            z.write(raw)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=case_gen.DEFAULT_SEED)
    ap.add_argument("--count", type=int, default=case_gen.DEFAULT_COUNT)
    ap.add_argument("--venv", default=None, help="the vLLM environment (default .vllm-venv or $VLLM_VENV)")
    ap.add_argument("--async", dest="asynchronous", action="store_true",
                    help="asynchronous scheduling (vLLM's default loop: AsyncScheduler, a batch "
                         f"queue of 2); default out {RECORDED_ASYNC.relative_to(REPO)}")
    ap.add_argument("--conversations", action="store_true",
                    help="the conversation cases (cases.make_conversation_case: follow-up turns whose prompts "
                         f"hold the previous responses); default out {RECORDED_CONV.relative_to(REPO)}")
    ap.add_argument("--timeouts", action="store_true",
                    help="cases with a timeout (cases.make_timeout_case: requests aborted at arrival + timeout_ms); "
                         f"default out {RECORDED_TIMEOUTS.relative_to(REPO)}")
    ap.add_argument("--decode", action="store_true",
                    help="decode-side cases (cases.make_decode_case: requests whose prompt KV is read from a "
                         "prefill instance through a KV connector, conformance/decode_connector.py); "
                         f"default out {RECORDED_DECODE.relative_to(REPO)}")
    ap.add_argument("--out", default=None, help=f"default {RECORDED.relative_to(REPO)}")
    a = ap.parse_args(argv)
    start = time.time()
    if a.timeouts and a.conversations:
        ap.error("--timeouts: on the plain cases only, not with --conversations")
    if a.decode and (a.timeouts or a.conversations or a.asynchronous):
        ap.error("--decode: synchronous, on its own cases only (not with --timeouts, --conversations, --async)")
    if a.decode:
        a.seed = a.seed if a.seed != case_gen.DEFAULT_SEED else case_gen.DECODE_SEED
        a.count = a.count if a.count != case_gen.DEFAULT_COUNT else case_gen.DECODE_COUNT
        cases = case_gen.generate_decode(a.seed, a.count)
    elif a.timeouts:
        a.seed = a.seed if a.seed != case_gen.DEFAULT_SEED else case_gen.TIMEOUT_SEED
        a.count = a.count if a.count != case_gen.DEFAULT_COUNT else case_gen.TIMEOUT_COUNT
        cases = case_gen.generate_timeouts(a.seed, a.count)
    elif a.conversations:
        a.seed = a.seed if a.seed != case_gen.DEFAULT_SEED else case_gen.CONVERSATION_SEED
        a.count = a.count if a.count != case_gen.DEFAULT_COUNT else case_gen.CONVERSATION_COUNT
        cases = case_gen.generate_conversations(a.seed, a.count)
    else:
        cases = case_gen.generate(a.seed, a.count)
    if a.asynchronous:
        for case in cases:
            case["replica"]["async_scheduling"] = True
    out = run_driver(cases, a.venv)
    results = out["results"]
    command = "python -m conformance.record"
    if a.decode:
        command += " --decode"
        if a.seed != case_gen.DECODE_SEED or a.count != case_gen.DECODE_COUNT:
            command += f" --seed {a.seed} --count {a.count}"
    elif a.timeouts:
        command += " --timeouts"
        if a.seed != case_gen.TIMEOUT_SEED or a.count != case_gen.TIMEOUT_COUNT:
            command += f" --seed {a.seed} --count {a.count}"
    elif a.conversations:
        command += " --conversations"
        if a.seed != case_gen.CONVERSATION_SEED or a.count != case_gen.CONVERSATION_COUNT:
            command += f" --seed {a.seed} --count {a.count}"
    elif a.seed != case_gen.DEFAULT_SEED or a.count != case_gen.DEFAULT_COUNT:
        command += f" --seed {a.seed} --count {a.count}"
    if a.asynchronous:
        command += " --async"
    doc = {
        "header": {
            "vllm_version": out["vllm_version"],
            "torch_version": out["torch_version"],
            "command": command,
            "environment": ENV_RECIPE,
            "requirements_sha256": requirements_sha256(),
            "generator": {"module": "conformance/cases.py", "seed": a.seed, "count": a.count,
                          "function": ("generate_decode" if a.decode else
                                       "generate_timeouts" if a.timeouts else
                                       "generate_conversations" if a.conversations else "generate")},
            "driver": "conformance/vllm_driver.py",
            "platform": f"{platform.system()} {platform.machine()}",
            "cases": len(cases),
            "steps": sum(len(r["steps"]) for r in results),
        },
        "cases": cases,
        "results": results,
    }
    default = RECORDED_DECODE if a.decode else (RECORDED_TIMEOUTS_ASYNC if a.asynchronous else RECORDED_TIMEOUTS) if a.timeouts else (
        (RECORDED_CONV_ASYNC if a.asynchronous else RECORDED_CONV) if a.conversations
        else (RECORDED_ASYNC if a.asynchronous else RECORDED))
    path = Path(a.out or default)
    write(doc, path)
    h = doc["header"]
    print(f"record: {h['cases']} cases, {h['steps']} steps of vLLM {h['vllm_version']} "
          f"in {time.time() - start:.0f} s -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
