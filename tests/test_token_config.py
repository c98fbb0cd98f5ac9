"""The command line on bad batching sweeps (token-interface.md, token-model.md "What a
sweep must satisfy"): exit status 2, exactly one line on stderr naming the file and
the key path, no traceback, nothing written.

Bad files are BASE (a small valid batching sweep that states its keys) with one piece
of text replaced; each expected key path is read off the edited text. Most cases call
``routesim.sweep.main`` in-process; one goes through a real subprocess.
"""

import subprocess
import sys
from pathlib import Path

import pytest

import routesim
from routesim.sweep import main

ROOT = Path(__file__).resolve().parents[1]
STUDY = (ROOT / "sweeps" / "exploration.toml").read_text()  # a queue-model sweep

BASE = """\
name = "tok"

[replica]
kind = "batching"
waiting_cap = 8
max_batch = 16
kv_blocks = 4096
block_tokens = 16
max_batched_tokens = 2048
chunked_prefill = true
step_ms = { base = 6.5, per_prefill_token = 0.0198 }

[simulation]
dt_ms = 0
warmup_s = 1
measure_s = 3

[cluster.heterogeneity]
uniform = [1, 1, 1]

[workload]
p_long = 0.02
chat = { prompt = { median = 200, sigma = 0.5, min = 16, max = 1024 }, output = { median = 20, sigma = 0.5, min = 1, max = 128 } }
long = { prompt = { median = 2000, sigma = 0.5, min = 1024, max = 4096 }, output = { median = 200, sigma = 0.5, min = 64, max = 512 } }
prefix = { probability = 0.5, groups = 4, zipf = 1.1, tokens = 256 }
context_limit = 8192

[policy]
choices = 2
score = "tokens"

[signals]
mode = "fresh"

[scenarios.steady]
events = []
[scenarios.slow]
events = [{ at_s = 2, replica = 1, slowdown = 2.0 }]

[grid]
rate_rps = [3]
heterogeneity = ["uniform"]
scenario = ["steady", "slow"]

[[stages]]
name = "policies"
policy = ["round_robin", "least_tokens", "power_of_d"]
seeds = { first = 1, count = 2 }
"""
"""Largest prompt: prefix 256 + long max 4096 = 4352 < context_limit 8192. Largest
request: min(8192, max(256 + 1024 + 128, 256 + 4096 + 512)) = 4864 tokens, within the
pool of 4096 × 16 tokens (and of 304 × 16 = 4864: the smallest pool that fits)."""

STAGE = 'name = "policies"'
SLOW_EVENT = "{ at_s = 2, replica = 1, slowdown = 2.0 }"


def edit(*changes, text=BASE):
    """The text with each change applied: (old, new) replaces the one `old`."""
    for old, new in changes:
        assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    return text


def bad(id, key, fragment, *changes, text=BASE):
    """A case: the edits, the key path the error must name and a message fragment."""
    return pytest.param(edit(*changes, text=text), key, fragment, id=id)


BAD = [
    # unknown keys, with the closest valid key
    bad("unknown-replica-key", "replica.kv_block", "did you mean 'kv_blocks'",
        ("kv_blocks = 4096", "kv_block = 10")),
    bad("unknown-replica-key-batch", "replica.max_bacth", "did you mean 'max_batch'",
        ("max_batch = 16", "max_bacth = 16")),
    bad("unknown-step-leaf", "replica.step_ms.bse", "did you mean 'base'",
        ("{ base = 6.5,", "{ bse = 6.5,")),
    bad("unknown-class-leaf", "workload.chat.prompt.medain", "did you mean 'median'",
        ("prompt = { median = 200,", "prompt = { medain = 200,")),
    bad("unknown-class-part", "workload.long.ouput", "did you mean 'output'",
        ("output = { median = 200,", "ouput = { median = 200,")),
    bad("unknown-prefix-leaf", "workload.prefix.probabilty", "did you mean 'probability'",
        ("probability = 0.5", "probabilty = 0.5")),
    bad("unknown-workload-key", "workload.context_limt", "did you mean 'context_limit'",
        ("context_limit = 8192", "context_limt = 8192")),
    bad("unknown-policy-key", "policy.choises", "did you mean 'choices'", ("choices = 2", "choises = 2")),
    bad("unknown-signals-key", "signals.mdoe", "did you mean 'mode'", ('mode = "fresh"', 'mdoe = "fresh"')),
    bad("unknown-stage-key", "stages[0].max_bacth", "did you mean 'max_batch'",
        (STAGE, STAGE + "\nmax_bacth = 8")),
    bad("unknown-stage-workload-leaf", "stages[0].workload.prefix.grups", "did you mean 'groups'",
        (STAGE, STAGE + "\nworkload = { prefix = { grups = 2 } }")),
    # wrong types
    bad("string-for-number", "replica.max_batch", "expected a number, got a string",
        ("max_batch = 16", 'max_batch = "16"')),
    bad("fraction-for-whole-number", "replica.kv_blocks", "whole number", ("kv_blocks = 4096", "kv_blocks = 40.5")),
    bad("bool-for-number", "replica.waiting_cap", "expected a number, got a boolean",
        ("waiting_cap = 8", "waiting_cap = true")),
    bad("number-for-bool", "replica.chunked_prefill", "expected true or false",
        ("chunked_prefill = true", "chunked_prefill = 1")),
    bad("number-for-score", "policy.score", "expected a string", ('score = "tokens"', "score = 3")),
    bad("list-for-class-table", "workload.chat", "expected a table, got a list",
        ("chat = { prompt = { median = 200, sigma = 0.5, min = 16, max = 1024 }, "
         "output = { median = 20, sigma = 0.5, min = 1, max = 128 } }", "chat = [200, 0.5, 16, 1024]")),
    bad("number-for-step-table", "replica.step_ms", "expected a table", (
        "step_ms = { base = 6.5, per_prefill_token = 0.0198 }", "step_ms = 6.5")),
    bad("string-for-step-leaf", "replica.step_ms.base", "expected a number, got a string",
        ("{ base = 6.5,", '{ base = "6.5",')),
    bad("string-in-stage-list", "stages[0].max_batch[1]", "expected a number, got a string",
        (STAGE, STAGE + '\nmax_batch = [4, "8"]')),
    bad("number-for-kind", "replica.kind", "expected a string", ('kind = "batching"', "kind = 2")),
    # negative or zero sizes
    bad("kv-blocks-zero", "replica.kv_blocks", "must be >= 1", ("kv_blocks = 4096", "kv_blocks = 0")),
    bad("kv-blocks-negative", "replica.kv_blocks", "must be >= 1", ("kv_blocks = 4096", "kv_blocks = -4096")),
    bad("block-tokens-zero", "replica.block_tokens", "must be >= 1", ("block_tokens = 16", "block_tokens = 0")),
    bad("max-batch-zero", "replica.max_batch", "must be >= 1", ("max_batch = 16", "max_batch = 0")),
    bad("max-batched-tokens-zero", "replica.max_batched_tokens", "must be >= 1",
        ("max_batched_tokens = 2048", "max_batched_tokens = 0")),
    bad("waiting-cap-zero", "replica.waiting_cap", "must be >= 1", ("waiting_cap = 8", "waiting_cap = 0")),
    bad("waiting-cap-negative", "replica.waiting_cap", "must be >= 1", ("waiting_cap = 8", "waiting_cap = -1")),
    bad("max-batch-zero-in-stage-list", "stages[0].max_batch[1]", "must be >= 1",
        (STAGE, STAGE + "\nmax_batch = [4, 0]")),
    bad("step-base-zero", "replica.step_ms.base", "must be > 0", ("{ base = 6.5,", "{ base = 0,")),
    bad("step-cost-negative", "replica.step_ms.per_prefill_token", "must be >= 0",
        ("per_prefill_token = 0.0198", "per_prefill_token = -0.0198")),
    bad("choices-zero", "policy.choices", "must be >= 1", ("choices = 2", "choices = 0")),
    bad("prefix-tokens-zero", "workload.prefix.tokens", "must be >= 1", ("tokens = 256", "tokens = 0")),
    bad("class-min-zero", "workload.chat.output.min", "must be >= 1", ("min = 1, max = 128", "min = 0, max = 128")),
    # min > max in a class
    bad("chat-prompt-min-above-max", "workload.chat.prompt.min", "min > max",
        ("min = 16, max = 1024", "min = 2000, max = 1024")),
    bad("long-output-min-above-max", "workload.long.output.min", "min > max",
        ("min = 64, max = 512", "min = 600, max = 512")),
    bad("chat-output-min-above-max-in-stage", "stages[0].workload.chat.output.min", "min > max",
        (STAGE, STAGE + "\nworkload = { chat = { output = { min = 200 } } }")),
    bad("long-prompt-max-below-min-in-stage", "stages[0].workload.long.prompt.max", "min > max",
        (STAGE, STAGE + "\nworkload = { long = { prompt = { max = 512 } } }")),
    # probabilities outside [0, 1]
    bad("p-long-above-one", "workload.p_long", "must be >= 0 and <= 1", ("p_long = 0.02", "p_long = 1.5")),
    bad("p-long-negative", "workload.p_long", "must be >= 0 and <= 1", ("p_long = 0.02", "p_long = -0.1")),
    bad("prefix-probability-above-one", "workload.prefix.probability", "must be >= 0 and <= 1",
        ("probability = 0.5", "probability = 1.2")),
    bad("prefix-probability-negative-in-stage", "stages[0].workload.prefix.probability[1]", "must be >= 0 and <= 1",
        (STAGE, STAGE + "\nworkload = { prefix = { probability = [0.5, -0.5] } }")),
    # a request that can never fit in the KV pool (4864 tokens > kv_blocks × 16)
    bad("pool-too-small", "replica.kv_blocks", "could never fit", ("kv_blocks = 4096", "kv_blocks = 200")),
    bad("pool-one-block-short", "replica.kv_blocks", "could never fit", ("kv_blocks = 4096", "kv_blocks = 303")),
    # without a shared prefix and with context_limit 4097: the largest request is
    # min(4097, 4096 + 512) = 4097 tokens, one more than 256 blocks hold
    bad("pool-too-small-for-context-limit", "replica.kv_blocks", "could never fit",
        ("probability = 0.5", "probability = 0"), ("context_limit = 8192", "context_limit = 4097"),
        ("kv_blocks = 4096", "kv_blocks = 256")),
    bad("pool-too-small-in-stage-list", "stages[0].kv_blocks", "could never fit",
        (STAGE, STAGE + "\nkv_blocks = [4096, 100]")),
    # the largest prompt (4352 tokens) at or above context_limit
    bad("context-limit-at-largest-prompt", "workload.context_limit", "context_limit",
        ("context_limit = 8192", "context_limit = 4352")),
    bad("context-limit-below-largest-prompt", "workload.context_limit", "context_limit",
        ("context_limit = 8192", "context_limit = 3000")),
    bad("context-limit-below-largest-prompt-in-stage", "stages[0].workload.context_limit", "context_limit",
        (STAGE, STAGE + "\nworkload = { context_limit = 4000 }")),
    # policies of the queue model in a batching sweep
    bad("adaptive-in-batching", "stages[0].policy[1]", "queue model",
        ('policy = ["round_robin", "least_tokens"', 'policy = ["round_robin", "adaptive"')),
    bad("latency-aware-in-batching", "stages[0].policy[2]", "queue model",
        ('"least_tokens", "power_of_d"]', '"least_tokens", "latency_aware"]')),
    bad("power-of-two-in-batching", "stages[0].policy[0]", "queue model",
        ('policy = ["round_robin",', 'policy = ["power_of_two",')),
    bad("unknown-policy", "stages[0].policy[1]", "did you mean 'least_tokens'",
        ('"least_tokens", "power_of_d"]', '"least_tokns", "power_of_d"]')),
    # dt_ms > 0: exact event time only
    bad("dt-positive", "simulation.dt_ms", "dt_ms must be 0", ("dt_ms = 0\n", "dt_ms = 0.5\n")),
    bad("dt-positive-in-stage-list", "stages[0].dt_ms", "dt_ms must be 0", (STAGE, STAGE + "\ndt_ms = [0, 0.5]")),
    # [replica] kind
    bad("unknown-kind", "replica.kind", "did you mean 'batching'", ('kind = "batching"', 'kind = "batchng"')),
    bad("unknown-kind-far", "replica.kind", "unknown replica model", ('kind = "batching"', 'kind = "tokens"')),
    # score and signal mode values
    bad("unknown-score", "policy.score", "did you mean 'tokens'", ('score = "tokens"', 'score = "token"')),
    bad("unknown-score-far", "policy.score", "unknown value", ('score = "tokens"', 'score = "latency"')),
    bad("unknown-score-in-stage", "stages[0].score[1]", "did you mean 'requests'",
        (STAGE, STAGE + '\nscore = ["kv", "request"]')),
    bad("unknown-signal-mode", "signals.mode", "unknown value", ('mode = "fresh"', 'mode = "stale"')),
    bad("unknown-signal-mode-near", "signals.mode", "did you mean 'periodic'", ('mode = "fresh"', 'mode = "periodc"')),
    # keys of the queue model in a batching sweep
    bad("queue-cap-in-batching", "cluster.queue_cap", "unknown key",
        ("[cluster.heterogeneity]", "[cluster]\nqueue_cap = 8\n[cluster.heterogeneity]")),
    bad("queue-cap-in-batching-stage", "stages[0].queue_cap", "unknown key", (STAGE, STAGE + "\nqueue_cap = 8")),
    bad("demand-in-batching", "workload.demand", "unknown key", ("p_long = 0.02", 'p_long = 0.02\ndemand = "tokens"')),
    bad("prompt-tokens-in-batching", "workload.prompt_tokens", "unknown key",
        ("p_long = 0.02", "p_long = 0.02\nprompt_tokens = { median = 384 }")),
    bad("slo-ms-in-batching", "simulation.slo_ms", "unknown key", ("measure_s = 3", "measure_s = 3\nslo_ms = 50")),
    bad("alpha-in-batching", "policy.alpha", "unknown key", ("choices = 2", "choices = 2\nalpha = 0.15")),
    bad("exploration-in-batching-stage", "stages[0].exploration", "unknown key",
        (STAGE, STAGE + "\nexploration = [0, 0.5]")),
    # ... and the other way round: the queue model refuses the batching keys and policies
    bad("least-tokens-in-queue", "stages[0].policy[0]", "batching model",
        ('policy = ["adaptive"]', 'policy = ["least_tokens"]'), text=STUDY),
    bad("prefix-affinity-in-queue", "stages[1].policy[1]", "batching model",
        ('"round_robin", "least_queue", "latency_aware"', '"round_robin", "prefix_affinity", "latency_aware"'),
        text=STUDY),
    bad("max-batch-in-queue", "replica.max_batch", "unknown key",
        ("[simulation]", "[replica]\nmax_batch = 8\n\n[simulation]"), text=STUDY),
    bad("kv-blocks-in-queue-stage", "stages[0].kv_blocks", "unknown key",
        ('policy = ["adaptive"]', 'policy = ["adaptive"]\nkv_blocks = 64'), text=STUDY),
]


def assert_refused(rc, out, err, path, key, fragment, out_dir):
    """Exit status 2, one line naming the file and key, no traceback, nothing written."""
    assert rc == 2, err
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert "Traceback" not in err
    assert lines[0].startswith(f"error: {path}: {key}: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert not out_dir.exists()


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capsys):
    """main() in-process, in an empty working folder: (rc, stdout, stderr, out folder)."""
    monkeypatch.chdir(tmp_path)

    def run(path, *extra):
        out_dir = tmp_path / "out"
        rc = main([str(path), "--out", str(out_dir), "--quiet", *extra])
        cap = capsys.readouterr()
        assert not (tmp_path / "results").exists()
        return rc, cap.out, cap.err, out_dir

    return run


@pytest.mark.parametrize("text,key,fragment", BAD)
def test_bad_batching_file(tmp_path, run_cli, text, key, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


INCIDENT_BAD = [
    bad("unknown-signal-mode", "signals.mode", "unknown value 'stale'", ('mode = "fresh"', 'mode = "stale"')),
    bad("negative-period", "signals.period_ms", "must be >= 0",
        ('mode = "fresh"', 'mode = "periodic"\nperiod_ms = -5')),
    bad("no-routers", "signals.routers", "must be >= 1", ('mode = "fresh"', 'mode = "fresh"\nrouters = 0')),
    bad("ejected-fraction", "router.breaker.max_ejected_fraction", "must be >= 0 and <= 1",
        ("[signals]", "[router]\nbreaker = { consecutive = 5, max_ejected_fraction = 1.5 }\n\n[signals]")),
    bad("min-weight", "policy.slow_start_min_weight", "must be > 0 and <= 1",
        ('score = "tokens"', 'score = "tokens"\nslow_start_min_weight = 2')),
    bad("admission-mode", "router.admission.mode", "unknown value 'wait'",
        ("[signals]", '[router]\nadmission = { max_tokens = 5000, mode = "wait" }\n\n[signals]')),
    bad("zero-timeout", "client.timeout_ms", "must be > 0",
        ("[signals]", "[client]\ntimeout_ms = 0\n\n[signals]")),
    bad("zero-backoff", "stages[0].backoff_ms", "must be > 0", (STAGE, STAGE + "\nbackoff_ms = 0")),
    bad("no-attempts", "stages[0].max_attempts", "must be >= 1", (STAGE, STAGE + "\nmax_attempts = 0")),
    bad("zero-cold-tau", "replica.cold_tau_ms", "must be > 0",
        ("chunked_prefill = true", "chunked_prefill = true\ncold_tau_ms = 0")),
    bad("zero-fail-fast", "replica.fail_fast_ms", "must be > 0",
        ("chunked_prefill = true", "chunked_prefill = true\nfail_fast_ms = 0")),
    bad("fail-missing-replica", "scenarios.slow.events[1].replica", "replica 4 does not exist",
        (SLOW_EVENT, SLOW_EVENT + ", { at_s = 2.5, replica = 4, fail = true }")),
    bad("fail-not-true", "scenarios.slow.events[1].fail_fast", "expected true",
        (SLOW_EVENT, SLOW_EVENT + ", { at_s = 2.5, replica = 2, fail_fast = 1 }")),
    bad("start-down-missing-replica", "cluster.start_down[0]", "replica 5 does not exist",
        ("[cluster.heterogeneity]", "[cluster]\nstart_down = [5]\n[cluster.heterogeneity]")),
    bad("start-down-twice", "cluster.start_down", "listed twice",
        ("[cluster.heterogeneity]", "[cluster]\nstart_down = [2, 2]\n[cluster.heterogeneity]")),
]


VLLM_DEFAULTS_BAD = [
    bad("waiting-cap-string-inf", "replica.waiting_cap", "expected a number, got a string",
        ("waiting_cap = 8", 'waiting_cap = "inf"')),
    bad("waiting-cap-minus-inf", "replica.waiting_cap", "expected a whole number",
        ("waiting_cap = 8", "waiting_cap = -inf")),
    bad("waiting-cap-inf-stage-string", "stages[0].waiting_cap", "expected a number",
        (STAGE, STAGE + '\nwaiting_cap = "unbounded"')),
    # the engine loop's timing
    bad("negative-step-cpu", "replica.step_cpu_ms", "must be >= 0",
        ("chunked_prefill = true", "chunked_prefill = true\nstep_cpu_ms = -0.5")),
    bad("string-step-cpu", "replica.step_cpu_ms", "expected a number, got a string",
        ("chunked_prefill = true", 'chunked_prefill = true\nstep_cpu_ms = "1ms"')),
    bad("negative-step-cpu-per-seq", "stages[0].step_cpu_ms_per_seq[1]", "must be >= 0",
        (STAGE, STAGE + "\nstep_cpu_ms_per_seq = [0.01, -0.01]")),
    bad("bool-step-cpu-per-seq", "replica.step_cpu_ms_per_seq", "expected a number, got a boolean",
        ("chunked_prefill = true", "chunked_prefill = true\nstep_cpu_ms_per_seq = true")),
    bad("inf-step-cpu", "replica.step_cpu_ms", "expected a finite number, got inf",
        ("chunked_prefill = true", "chunked_prefill = true\nstep_cpu_ms = inf")),
    bad("step-cpu-in-queue", "stages[0].step_cpu_ms", "unknown key",
        ('policy = ["adaptive"]', 'policy = ["adaptive"]\nstep_cpu_ms = 1'), text=STUDY),
    # ingress: an attempt's way to the scheduler
    bad("negative-ingress", "replica.ingress_ms", "must be >= 0",
        ("chunked_prefill = true", "chunked_prefill = true\ningress_ms = -1")),
    bad("string-ingress", "replica.ingress_ms", "expected a number, got a string",
        ("chunked_prefill = true", 'chunked_prefill = true\ningress_ms = "2ms"')),
    bad("negative-ingress-per-token", "stages[0].ingress_ms_per_token[1]", "must be >= 0",
        (STAGE, STAGE + "\ningress_ms_per_token = [0.01, -0.01]")),
    bad("bool-ingress-per-token", "replica.ingress_ms_per_token", "expected a number, got a boolean",
        ("chunked_prefill = true", "chunked_prefill = true\ningress_ms_per_token = false")),
    bad("nan-ingress", "replica.ingress_ms", "expected a finite number, got nan",
        ("chunked_prefill = true", "chunked_prefill = true\ningress_ms = nan")),
    bad("ingress-in-queue", "stages[0].ingress_ms", "unknown key",
        ('policy = ["adaptive"]', 'policy = ["adaptive"]\ningress_ms = 1'), text=STUDY),
]


@pytest.mark.parametrize("text,key,fragment", VLLM_DEFAULTS_BAD)
def test_bad_vllm_default_keys(tmp_path, run_cli, text, key, fragment):
    """waiting_cap takes a whole number >= 1 or inf, step_cpu_ms, step_cpu_ms_per_seq,
    ingress_ms and ingress_ms_per_token a finite number >= 0, batching only (issue 40):
    anything else is one line naming the file and key, exit 2, nothing written."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


@pytest.mark.parametrize("text,key,fragment", INCIDENT_BAD)
def test_bad_incident_keys(tmp_path, run_cli, text, key, fragment):
    """Bad values of the keys of failures, retries, containment and signals (token-model.md §3, §5, §6)."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


DRAIN_TTFT_EXACT_BAD = [
    # [simulation] drain_s: finite, >= 0
    bad("drain-string", "simulation.drain_s", "expected a number, got a string",
        ("measure_s = 3", 'measure_s = 3\ndrain_s = "long"')),
    bad("drain-bool", "simulation.drain_s", "expected a number, got a boolean",
        ("measure_s = 3", "measure_s = 3\ndrain_s = true")),
    bad("drain-negative", "simulation.drain_s", "must be >= 0", ("measure_s = 3", "measure_s = 3\ndrain_s = -1")),
    bad("drain-inf", "simulation.drain_s", "expected a finite number", ("measure_s = 3", "measure_s = 3\ndrain_s = inf")),
    bad("drain-nan", "simulation.drain_s", "expected a finite number", ("measure_s = 3", "measure_s = 3\ndrain_s = nan")),
    bad("drain-negative-in-stage-list", "stages[0].drain_s[1]", "must be >= 0", (STAGE, STAGE + "\ndrain_s = [0, -5]")),
    # events may fall in the drain, not after it
    bad("event-after-drain", "scenarios.slow.events[0].at_s", "outside the horizon plus the drain",
        (SLOW_EVENT, "{ at_s = 4.5, replica = 1, slowdown = 2.0 }"), ("measure_s = 3", "measure_s = 3\ndrain_s = 0.5")),
    bad("event-at-horizon-without-drain", "scenarios.slow.events[0].at_s", "(4 s)",
        (SLOW_EVENT, "{ at_s = 4, replica = 1, slowdown = 2.0 }"), ("measure_s = 3", "measure_s = 3\ndrain_s = 0")),
    # [client] ttft_timeout_ms: > 0 (inf: none)
    bad("ttft-zero", "client.ttft_timeout_ms", "must be > 0", ("[signals]", "[client]\nttft_timeout_ms = 0\n\n[signals]")),
    bad("ttft-negative", "client.ttft_timeout_ms", "must be > 0",
        ("[signals]", "[client]\nttft_timeout_ms = -5\n\n[signals]")),
    bad("ttft-string", "client.ttft_timeout_ms", "expected a number, got a string",
        ("[signals]", '[client]\nttft_timeout_ms = "fast"\n\n[signals]')),
    bad("ttft-zero-in-stage", "stages[0].ttft_timeout_ms[0]", "must be > 0", (STAGE, STAGE + "\nttft_timeout_ms = [0, 500]")),
    bad("ttft-misspelt", "client.ttft_timeout", "did you mean 'ttft_timeout_ms'",
        ("[signals]", "[client]\nttft_timeout = 500\n\n[signals]")),
    # [policy] allowance_tokens: a whole number >= 0 or "exact"
    bad("exact-misspelt", "policy.allowance_tokens", "did you mean 'exact'",
        ('score = "tokens"', 'score = "tokens"\nallowance_tokens = "exactly"')),
    bad("exact-other-word", "policy.allowance_tokens", "expected a number or 'exact', got 'oracle'",
        ('score = "tokens"', 'score = "tokens"\nallowance_tokens = "oracle"')),
    bad("allowance-negative", "policy.allowance_tokens", "must be >= 0",
        ('score = "tokens"', 'score = "tokens"\nallowance_tokens = -1')),
    bad("allowance-fraction", "policy.allowance_tokens", "whole number",
        ('score = "tokens"', 'score = "tokens"\nallowance_tokens = 12.5')),
    bad("allowance-bool", "policy.allowance_tokens", "expected a number, got a boolean",
        ('score = "tokens"', 'score = "tokens"\nallowance_tokens = true')),
    bad("exact-misspelt-in-stage", "stages[0].allowance_tokens[1]", "did you mean 'exact'",
        (STAGE, STAGE + '\nallowance_tokens = [256, "exakt"]')),
    # the queue model has none of them (batching keys), at the top or in a stage
    bad("drain-in-queue", "simulation.drain_s", "unknown key",
        ("[simulation]", "[simulation]\ndrain_s = 60"), text=STUDY),
    bad("drain-in-queue-stage", "stages[0].drain_s", "unknown key",
        ('policy = ["adaptive"]', 'policy = ["adaptive"]\ndrain_s = 0'), text=STUDY),
    bad("ttft-in-queue", "client", "unknown key",
        ("[simulation]", "[client]\nttft_timeout_ms = 500\n\n[simulation]"), text=STUDY),
    bad("ttft-in-queue-stage", "stages[0].ttft_timeout_ms", "unknown key",
        ('policy = ["adaptive"]', 'policy = ["adaptive"]\nttft_timeout_ms = 500'), text=STUDY),
    bad("exact-in-queue", "policy.allowance_tokens", "unknown key",
        ("alpha = 0.15", 'alpha = 0.15\nallowance_tokens = "exact"'), text=STUDY),
]


@pytest.mark.parametrize("text,key,fragment", DRAIN_TTFT_EXACT_BAD)
def test_bad_drain_ttft_and_exact_keys(tmp_path, run_cli, text, key, fragment):
    """Bad values of drain_s, ttft_timeout_ms and allowance_tokens (token-interface.md),
    and the queue model refusing them: one line naming the file and key, exit 2."""
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


@pytest.mark.parametrize("text", [
    edit(("measure_s = 3", "measure_s = 3\ndrain_s = 0")),
    edit(("measure_s = 3", "measure_s = 3\ndrain_s = 0.5"), (SLOW_EVENT, "{ at_s = 4.4, replica = 1, slowdown = 2.0 }")),
    edit((SLOW_EVENT, "{ at_s = 60, replica = 1, slowdown = 2.0 }")),  # in the default drain of 600 s
    edit(("[signals]", "[client]\nttft_timeout_ms = inf\n\n[signals]")),
    edit(("[signals]", "[client]\nttft_timeout_ms = 0.5\n\n[signals]")),
    edit(('score = "tokens"', 'score = "tokens"\nallowance_tokens = "exact"')),
    edit(('score = "tokens"', 'score = "tokens"\nallowance_tokens = 0')),
    edit((STAGE, STAGE + '\nallowance_tokens = [0, 256, "exact"]\ndrain_s = [0, 30]')),
], ids=["drain-zero", "event-in-drain", "event-in-default-drain", "ttft-inf", "ttft-small", "exact",
        "allowance-zero", "exact-and-drain-axes"])
def test_drain_ttft_and_exact_values_are_accepted(text):
    sweep = routesim.parse_sweep(text, "ok.toml")
    assert sweep.stages[0].values["drain_s"]


def test_incident_features_are_accepted_and_run(tmp_path, run_cli):
    """Every incident key at a non-default value, a recover before any failure (it does
    nothing: docs/model.md) and start_down: the sweep runs."""
    text = edit(
        (SLOW_EVENT, "{ at_s = 1.2, replica = 2, recover = true }, { at_s = 1.5, replica = 1, fail = true }, "
                     "{ at_s = 2, replica = 1, recover = true }, { at_s = 2.2, replica = 2, fail_fast = true }"),
        ("[cluster.heterogeneity]", "[cluster]\nstart_down = [3]\n[cluster.heterogeneity]"),
        ('mode = "fresh"', 'mode = "periodic_local"\nperiod_ms = 25\nrouters = 2'),
        ("[signals]", "[client]\ntimeout_ms = 800\nmax_attempts = 3\nbackoff_ms = 10\n\n"
                      "[router]\nretry_budget = 0.2\nbreaker = { consecutive = 2, eject_ms = 200 }\n"
                      'admission = { max_tokens = 20000, mode = "queue" }\n\n[signals]'),
        ('score = "tokens"', 'score = "tokens"\nslow_start_ms = 500'),
        ("chunked_prefill = true", "chunked_prefill = true\ncold_factor = 3\nready_delay_ms = 50"))
    path = tmp_path / "incident.toml"
    path.write_text(text)
    rc, out, err, out_dir = run_cli(path)
    assert rc == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["policies.nc"]


def test_base_is_valid_and_runs(tmp_path, run_cli):
    """BASE passes every check and runs (so each refusal above comes from its edit)."""
    path = tmp_path / "tok.toml"
    path.write_text(BASE)
    rc, out, err, out_dir = run_cli(path)
    assert rc == 0, err
    assert sorted(p.name for p in out_dir.iterdir()) == ["policies.nc"]


@pytest.mark.parametrize("text", [
    edit(("kv_blocks = 4096", "kv_blocks = 304")),  # 304 × 16 = 4864: the largest request just fits
    edit(("context_limit = 8192", "context_limit = 4353")),  # one above the largest prompt
    # the long class has probability 0: its bounds do not count for the fit rules
    edit(("p_long = 0.02", "p_long = 0"), ("min = 1024, max = 4096", "min = 1024, max = 20000"),
         ("min = 64, max = 512", "min = 64, max = 30000")),
    # no shared prefix: 1024 + 128 tokens is the largest chat request, 4096 + 512 the largest long one
    edit(("probability = 0.5", "probability = 0"), ("context_limit = 8192", "context_limit = 4097"),
         ("kv_blocks = 4096", "kv_blocks = 257")),
    # only long requests: the chat bounds do not count
    edit(("p_long = 0.02", "p_long = 1"), ("min = 16, max = 1024", "min = 16, max = 9000")),
    edit(('policy = ["round_robin",', 'policy = ["least_queue",')),  # least_requests' alias
    edit(("[cluster.heterogeneity]", "[cluster]\nstart_down = []\n[cluster.heterogeneity]")),
], ids=["pool-just-fits", "context-limit-just-above", "long-class-off", "prefix-off", "chat-class-off",
        "least-queue-alias", "start-down-empty"])
def test_boundary_cases_are_accepted(text):
    """The edges of "What a sweep must satisfy", from the page: accepted."""
    routesim.parse_sweep(text, "ok.toml")


def test_subprocess(tmp_path):
    """A real `python -m routesim.sweep` on a bad batching file: status 2, one line, no
    traceback, nothing written."""
    path = tmp_path / "bad.toml"
    path.write_text(edit(("dt_ms = 0\n", "dt_ms = 0.5\n")))
    out_dir = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "routesim.sweep", str(path), "--out", str(out_dir)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert_refused(proc.returncode, proc.stdout, proc.stderr, path, "simulation.dt_ms", "dt_ms must be 0", out_dir)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


# [replica] scheduler and prefix_caching (issue 22, /work/spec22b.md 1-3)
SCHEDULER_BAD = [
    bad("scheduler-unknown", "replica.scheduler", "unknown value 'vLLM'",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vLLM"')),
    bad("scheduler-number", "replica.scheduler", "expected a string",
        ("chunked_prefill = true", "chunked_prefill = true\nscheduler = 1")),
    bad("prefix-caching-number", "replica.prefix_caching", "expected true or false",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nprefix_caching = 0')),
    bad("prefix-caching-off-reserve", "replica.prefix_caching", 'needs scheduler = "vllm"',
        ("chunked_prefill = true", "chunked_prefill = true\nprefix_caching = false")),
    bad("vllm-budget-below-batch", "replica.max_batched_tokens", "max_batched_tokens >= max_batch",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"'),
        ("max_batched_tokens = 2048", "max_batched_tokens = 15")),
    bad("vllm-unchunked-request-over-budget", "replica.max_batched_tokens", "a request of 4864 tokens",
        ("chunked_prefill = true", 'chunked_prefill = false\nscheduler = "vllm"')),
    # [replica] async_scheduling (issue 40)
    bad("async-scheduling-number", "replica.async_scheduling", "expected true or false",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nasync_scheduling = 1')),
    bad("async-scheduling-string", "replica.async_scheduling", "expected true or false",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nasync_scheduling = "true"')),
    bad("async-scheduling-reserve", "replica.async_scheduling", 'async_scheduling = true needs scheduler = "vllm"',
        ("chunked_prefill = true", "chunked_prefill = true\nasync_scheduling = true")),
    bad("step-cpu-async", "replica.step_cpu_ms", "asynchronous loop is not modelled",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nstep_cpu_ms = 1.5')),
    bad("step-cpu-per-seq-async", "replica.step_cpu_ms_per_seq", "asynchronous loop is not modelled",
        ("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nasync_scheduling = [false, true]\nstep_cpu_ms_per_seq = 0.1')),
]


@pytest.mark.parametrize("text,key,fragment", SCHEDULER_BAD)
def test_bad_scheduler_keys(tmp_path, run_cli, text, key, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, key, fragment, tmp_path / "out")


def test_bad_scheduler_trace_request_is_named(tmp_path, run_cli):
    """Unchunked vllm mode on a trace: the first request over the budget is named, with its line."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_ms,prompt_tokens,output_tokens\n0,100,10\n5,3000,100\n")
    text = edit(("chunked_prefill = true", 'chunked_prefill = false\nscheduler = "vllm"'),
                ("[workload]", f'[workload]\nsource = "trace"\ntrace = {{ path = "{trace}", format = "csv" }}'),
                ("rate_rps = [3]\n", ""))
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_refused(*run_cli(path)[:3], path, "replica.max_batched_tokens", "line 3: request 1 has 3100 tokens",
                   tmp_path / "out")


@pytest.mark.parametrize("text", [
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nprefix_caching = false')),
    edit(("chunked_prefill = true", 'chunked_prefill = false\nscheduler = "vllm"'),
         ("max_batched_tokens = 2048", "max_batched_tokens = 4864")),   # the largest request just fits
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"'),
         ("max_batched_tokens = 2048", "max_batched_tokens = 16")),     # = max_batch
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "reserve"\nprefix_caching = true')),
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nasync_scheduling = [false, true]')),
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = ["reserve", "vllm"]\nasync_scheduling = true')),
    edit(("chunked_prefill = true", 'chunked_prefill = true\nasync_scheduling = false')),
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\nasync_scheduling = false\nstep_cpu_ms = 1.5')),
    edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\ningress_ms = 4\ningress_ms_per_token = 0.01')),
], ids=["vllm-no-caching", "vllm-unchunked-just-fits", "vllm-budget-equals-batch", "reserve-explicit",
        "vllm-both-loops", "async-with-some-vllm", "reserve-synchronous", "step-cpu-synchronous",
        "ingress-asynchronous"])
def test_scheduler_values_are_accepted(text):
    routesim.parse_sweep(text, "ok.toml")


def test_async_scheduling_selects_the_scheduler():
    """A run's scheduler code (runs.params_row): vllm with async_scheduling is vLLM's
    asynchronous loop, without it the synchronous one; reserve ignores the key. The
    Dataset records the key only for a stage with a vllm run (params.unused_params)."""
    from routesim.batching import runs as br
    from routesim.batching.dtypes import Scheduler
    from routesim.batching.params import unused_params
    stage = routesim.parse_sweep(edit(("chunked_prefill = true", 'chunked_prefill = true\nscheduler = "vllm"\n'
                                                                  "async_scheduling = [false, true]")),
                                 "ok.toml").stages[0]
    base = {name: values[0] for name, values in stage.values.items()}
    codes = {(s, a): int(br.params_row(dict(base, scheduler=s, async_scheduling=a), "round_robin",
                                        n_replicas=2)["scheduler"])
             for s in ("reserve", "vllm") for a in (False, True)}
    assert codes == {("reserve", False): Scheduler.RESERVE, ("reserve", True): Scheduler.RESERVE,
                     ("vllm", False): Scheduler.VLLM, ("vllm", True): Scheduler.VLLM_ASYNC}
    assert "async_scheduling" not in unused_params(stage.values)
    reserve = routesim.parse_sweep(BASE, "ok.toml").stages[0]
    assert "async_scheduling" in unused_params(reserve.values)
