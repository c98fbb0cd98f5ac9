"""Trace loaders, replay windows and block ids against token-model.md §1.2 and the raw files.

Every expectation comes from the shipped excerpts' raw text (read here with str.split,
regular expressions and the decimal module, not with the csv/json modules the loaders
use) or from the design page worked by hand.
"""

import datetime
import io
import math
import os
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from hypothesis import given, settings, strategies as st

from routesim import grid, traces
from routesim.config import load_sweep
from routesim.traces import TraceError, _azure_time, _count, _int_field, _load_cached, check_fits, lengths_table, load_trace, replay

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
AZURE_CONV = TRACES / "azure-conv.csv"
AZURE_CODE = TRACES / "azure-code.csv"
MOONCAKE = TRACES / "mooncake-conv.jsonl"
KEY_STEP = 0.6180339887498949
BASE = 2**40


# ------------------------------------------------------------------ raw-text parses

_STAMP = re.compile(r"^(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{7})$")


def azure_raw(path):
    """[(date, seconds of day, 7-digit fraction string, P, O)] from str.split and a regex."""
    lines = path.read_text().splitlines()
    assert lines[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    rows = []
    for text in lines[1:]:
        stamp, p, o = text.split(",")
        y, mo, d, h, mi, s, frac = _STAMP.match(stamp).groups()
        day = datetime.date(int(y), int(mo), int(d)).toordinal()
        rows.append((day, int(h) * 3600 + int(mi) * 60 + int(s), frac, int(p), int(o)))
    return rows


def azure_t_float(rows):
    """§1.2 as written, in Python floats: 1000·Δs + 1000·(f_r − f_0)."""
    day0, sec0, frac0 = rows[0][:3]
    f0 = int(frac0) / 10**7
    return [1000 * ((day - day0) * 86400 + sec - sec0) + 1000 * (int(frac) / 10**7 - f0)
            for day, sec, frac, _, _ in rows]


def azure_t_exact(rows):
    """The same times in exact decimal arithmetic."""
    day0, sec0, frac0 = rows[0][:3]
    t0 = Decimal(day0 * 86400 + sec0) + Decimal("0." + frac0)
    return [(Decimal(day * 86400 + sec) + Decimal("0." + frac) - t0) * 1000
            for day, sec, frac, _, _ in rows]


_MOON = re.compile(r'"timestamp": (\d+), "input_length": (\d+), "output_length": (\d+), '
                   r'"hash_ids": \[([\d, ]*)\]')


def mooncake_raw(path):
    """[(timestamp, P, O, [hash ids])] from a regular expression over each line."""
    rows = []
    for text in path.read_text().splitlines():
        ts, p, o, ids = _MOON.search(text).groups()
        rows.append((int(ts), int(p), int(o), [int(x) for x in ids.split(",") if x.strip()]))
    return rows


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


# ------------------------------------------------------------------ loaders on the excerpts

AZURE_ENDS = {
    # first and last data rows, as they read in the files
    AZURE_CONV: (("2023-11-16 18:15:46.6805900", 374, 44), ("2023-11-16 18:22:50.9400470", 424, 96),
                 1000 * 424 + 1000 * (0.9400470 - 0.6805900)),
    AZURE_CODE: (("2023-11-16 18:17:03.9799600", 4808, 10), ("2023-11-16 18:31:17.0593070", 1697, 36),
                 1000 * 854 + 1000 * (0.0593070 - 0.9799600)),
}


@pytest.mark.parametrize("path", [AZURE_CONV, AZURE_CODE], ids=["conv", "code"])
def test_azure_excerpt(path):
    tr = load_trace(path, "azure")
    raw = azure_raw(path)
    assert len(raw) == 2000 and len(tr) == 2000
    first, last, t_last = AZURE_ENDS[path]
    assert path.read_text().splitlines()[1] == ",".join(map(str, first))
    assert path.read_text().splitlines()[-1] == ",".join(map(str, last))
    assert (tr.prompt[0], tr.output[0]) == first[1:]
    assert (tr.prompt[-1], tr.output[-1]) == last[1:]
    assert tr.t_ms[0] == 0.0
    assert tr.t_ms[-1] == t_last
    assert int(tr.prompt.sum()) == sum(r[3] for r in raw)
    assert int(tr.output.sum()) == sum(r[4] for r in raw)
    # every time, to the bit, against the formula evaluated here; and close to exact
    assert tr.t_ms.tolist() == azure_t_float(raw)
    exact = azure_t_exact(raw)
    assert max(abs(Decimal(t) - e) for t, e in zip(tr.t_ms.tolist(), exact)) < Decimal("1e-9")
    assert tr.hash_block_tokens is None and tr.hash_ids.size == 0
    assert tr.hash_offsets.tolist() == [0] * 2001
    assert tr.line[0] == 2 and tr.line[-1] == 2001
    P, O = lengths_table(tr)
    assert P.tolist() == [r[3] for r in raw] and O.tolist() == [r[4] for r in raw]


def test_mooncake_excerpt():
    tr = load_trace(MOONCAKE, "mooncake")
    raw = mooncake_raw(MOONCAKE)
    assert len(raw) == 2000 and len(tr) == 2000
    assert raw[0] == (0, 6758, 500, list(range(14)))
    assert raw[-1] == (669000, 1504, 462, [0, 36636, 38787])
    assert (tr.t_ms[0], tr.prompt[0], tr.output[0]) == (0.0, 6758, 500)
    assert (tr.t_ms[-1], tr.prompt[-1], tr.output[-1]) == (669000.0, 1504, 462)
    assert tr.hash_ids[tr.hash_offsets[0]:tr.hash_offsets[1]].tolist() == list(range(14))
    assert tr.hash_ids[tr.hash_offsets[-2]:].tolist() == [0, 36636, 38787]
    assert tr.t_ms.tolist() == [float(r[0]) for r in raw]
    assert int(tr.prompt.sum()) == sum(r[1] for r in raw)
    assert int(tr.output.sum()) == sum(r[2] for r in raw)
    assert tr.hash_ids.tolist() == [h for r in raw for h in r[3]]
    assert np.diff(tr.hash_offsets).tolist() == [len(r[3]) for r in raw]
    assert tr.hash_block_tokens == 512
    assert tr.line[0] == 1 and tr.line[-1] == 2000


def test_parsed_arrays_are_cached_and_read_only(tmp_path):
    assert load_trace(MOONCAKE, "mooncake") is load_trace(str(MOONCAKE), "mooncake")
    tr = load_trace(MOONCAKE, "mooncake")
    with pytest.raises(ValueError):
        tr.prompt[0] = 1
    p = write(tmp_path, "t.csv", "arrival_ms,prompt_tokens,output_tokens\n0,10,2\n")
    assert load_trace(p, "csv").prompt.tolist() == [10]
    p.write_text("arrival_ms,prompt_tokens,output_tokens\n0,10,2\n5,300,4\n")
    os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    assert load_trace(p, "csv").prompt.tolist() == [10, 300]


# ------------------------------------------------------------------ the 7-digit rule

def test_azure_seven_digits_by_hand(tmp_path):
    p = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
              "2023-11-16 23:59:59.9999999,10,1\r\n"
              "2023-11-17 00:00:00.0000001,20,2\r\n"
              "2023-11-17 00:00:00.0000009,30,3\r\n"
              "2023-11-17 00:01:02.5000000,40,4")
    t = load_trace(p, "azure").t_ms.tolist()
    # Δs = 0, 1, 1, 63 whole seconds (across midnight); f_0 = 0.9999999
    assert t[0] == 0.0
    assert t[1] == 1000 * 1 + 1000 * (0.0000001 - 0.9999999)
    assert t[2] == 1000 * 1 + 1000 * (0.0000009 - 0.9999999)
    assert t[3] == 1000 * 63 + 1000 * (0.5 - 0.9999999)
    # the seventh digit counts: 0.0002 ms and 0.001 ms after the first row
    assert abs(t[1] - 0.0002) < 1e-9 and abs(t[2] - 0.001) < 1e-9
    assert abs(t[3] - 62500.0001) < 1e-9


# ------------------------------------------------------------------ replay

def test_replay_window_and_time_scale():
    tr = load_trace(MOONCAKE, "mooncake")
    raw = mooncake_raw(MOONCAKE)
    kept = [j for j, r in enumerate(raw) if 30000 <= r[0] < 90000]
    rep = replay(tr, block_tokens=16, start_s=30, duration_s=60, time_scale=2.0)
    assert rep.row.tolist() == kept
    assert rep.a_ms.tolist() == [(raw[j][0] - 30000) / 2.0 for j in kept]
    assert rep.prompt.tolist() == [raw[j][1] for j in kept]
    assert rep.output.tolist() == [raw[j][2] for j in kept]
    assert rep.line.tolist() == [j + 1 for j in kept]
    assert rep.key.tolist() == [math.fmod(r * KEY_STEP, 1.0) for r in range(len(kept))]
    # the horizon drops arrivals at or after it (in replayed time)
    cut = replay(tr, block_tokens=16, start_s=30, duration_s=60, time_scale=2.0, horizon_ms=15000)
    assert cut.a_ms.tolist() == [a for a in rep.a_ms.tolist() if a < 15000]
    assert 0 < len(cut) < len(rep)
    n = len(cut)
    assert cut.block_ids.tolist() == rep.block_ids[:rep.block_offsets[n]].tolist()
    # the whole file by default
    full = replay(tr, block_tokens=16)
    assert len(full) == 2000 and full.a_ms.tolist() == [float(r[0]) for r in raw]


def test_mooncake_block_ids_by_hand():
    tr = load_trace(MOONCAKE, "mooncake")
    rep = replay(tr, block_tokens=16)   # H = 512, b = 16: 32 KV ids per hash id
    off = rep.block_offsets
    # row 0: P = 6758 -> 422 blocks; hash_ids 0..13, so id(q) = (q // 32)·32 + q % 32 = q
    assert off[1] - off[0] == 6758 // 16 == 422
    assert rep.block_ids[off[0]:off[1]].tolist() == list(range(422))
    # row 1: P = 7322 -> 457 blocks; hash_ids [0, 14, 15, ..., 27]
    b1 = rep.block_ids[off[1]:off[2]].tolist()
    assert len(b1) == 457
    assert b1[:32] == list(range(32))                      # hash id 0 -> 0 … 31
    assert b1[32:34] == [14 * 32, 14 * 32 + 1]             # hash id 14 -> 448, 449
    assert b1[456] == 27 * 32 + 8 == 872                   # q = 456: hash block 14 (id 27)
    # last row: P = 1504 -> 94 blocks; hash_ids [0, 36636, 38787]
    bl = rep.block_ids[off[-2]:].tolist()
    assert bl == ([q for q in range(32)] + [36636 * 32 + j for j in range(32)]
                  + [38787 * 32 + j for j in range(30)])
    # b = 64: 8 KV ids per hash id; b = 512: the hash ids themselves
    rep64 = replay(tr, block_tokens=64)
    assert rep64.block_ids[rep64.block_offsets[1]:rep64.block_offsets[1] + 10].tolist() == \
        [0, 1, 2, 3, 4, 5, 6, 7, 14 * 8, 14 * 8 + 1]
    rep512 = replay(tr, block_tokens=512)
    assert rep512.block_ids[rep512.block_offsets[1]:rep512.block_offsets[2]].tolist() == \
        [0] + list(range(14, 28))[:7322 // 512 - 1]


def test_unique_ids_without_ids_and_past_the_last_id(tmp_path):
    tr = load_trace(AZURE_CONV, "azure")
    raw = azure_raw(AZURE_CONV)
    t = azure_t_float(raw)
    kept = [j for j in range(len(raw)) if 100000 <= t[j] < 110000]
    rep = replay(tr, block_tokens=16, start_s=100, duration_s=10)
    assert rep.row.tolist() == kept
    expect = [BASE + r * 2**16 + q for r, j in enumerate(kept) for q in range(raw[j][3] // 16)]
    assert rep.block_ids.tolist() == expect
    # a Mooncake row whose ids stop early: P = 2048 -> 128 blocks, one hash id of 512
    p = write(tmp_path, "m.jsonl",
              '{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [9]}\n'
              '{"timestamp": 4, "input_length": 2048, "output_length": 5, "hash_ids": [5]}\n'
              '{"timestamp": 7, "input_length": 40, "output_length": 2}\n')
    rep = replay(load_trace(p, "mooncake"), block_tokens=16)
    assert rep.block_offsets.tolist() == [0, 6, 134, 136]
    assert rep.block_ids[:6].tolist() == [9 * 32 + q for q in range(6)]
    assert rep.block_ids[6:134].tolist() == ([5 * 32 + q for q in range(32)]
                                            + [BASE + 1 * 2**16 + q for q in range(32, 128)])
    assert rep.block_ids[134:].tolist() == [BASE + 2 * 2**16 + 0, BASE + 2 * 2**16 + 1]


def test_plain_csv_ids_are_kv_ids(tmp_path):
    p = write(tmp_path, "c.csv", "arrival_ms,prompt_tokens,output_tokens,block_ids\n"
              "0.5,40,3,7 8\n"
              "2,33,1,\n"
              "2,70,9,7 8 11 12 13 14\n")
    tr = load_trace(p, "csv")
    assert tr.t_ms.tolist() == [0.5, 2.0, 2.0]
    rep = replay(tr, block_tokens=16, time_scale=0.5)
    assert rep.a_ms.tolist() == [1.0, 4.0, 4.0]
    assert rep.block_offsets.tolist() == [0, 2, 4, 8]
    assert rep.block_ids.tolist() == [7, 8, BASE + 2**16, BASE + 2**16 + 1, 7, 8, 11, 12]
    # hash_block_tokens overrides H: ids of 32-token blocks, b = 16 -> 2 KV ids each
    rep = replay(tr, block_tokens=16, hash_block_tokens=32)
    assert rep.block_ids[:2].tolist() == [14, 15]


def _csv_rows_from_mooncake(raw):
    """A plain CSV carrying the Mooncake rows, ids expanded by hand to 16-token KV ids."""
    out = ["arrival_ms,prompt_tokens,output_tokens,block_ids"]
    for ts, p, o, ids in raw:
        kv = " ".join(str(h * 32 + j) for h in ids for j in range(32))
        out.append(f"{ts},{p},{o},{kv}")
    return "\n".join(out) + "\n"


def test_replay_equals_plain_csv_with_the_same_rows(tmp_path):
    raw = mooncake_raw(MOONCAKE)
    p = write(tmp_path, "moon.csv", _csv_rows_from_mooncake(raw))
    kw = dict(block_tokens=16, start_s=100, duration_s=200, time_scale=1.0, horizon_ms=150000)
    a = replay(load_trace(MOONCAKE, "mooncake"), **kw)
    b = replay(load_trace(p, "csv"), **kw)
    assert len(a) > 100
    for name in ("a_ms", "prompt", "output", "key", "block_ids", "block_offsets", "row"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name

    raw = azure_raw(AZURE_CONV)
    t = azure_t_float(raw)
    text = "arrival_ms,prompt_tokens,output_tokens\n" + "".join(
        f"{tj!r},{r[3]},{r[4]}\n" for tj, r in zip(t, raw))
    p = write(tmp_path, "conv.csv", text)
    kw = dict(block_tokens=16, start_s=60, duration_s=120, time_scale=1.0)
    a = replay(load_trace(AZURE_CONV, "azure"), **kw)
    b = replay(load_trace(p, "csv"), **kw)
    assert len(a) > 100
    for name in ("a_ms", "prompt", "output", "key", "block_ids", "block_offsets", "row"):
        assert getattr(a, name).tolist() == getattr(b, name).tolist(), name


# ------------------------------------------------------------------ errors

CSV_HEAD = "arrival_ms,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("fmt,text,line,words", [
    ("csv", CSV_HEAD + "0,10,2\n1,ten,2\n", 3, "prompt_tokens"),
    ("csv", CSV_HEAD + "0,10,2\n1,10\n", 3, "fields"),
    ("csv", CSV_HEAD + "0,10,2\nsoon,10,2\n", 3, "arrival_ms"),
    ("csv", CSV_HEAD + "0,10,2\n5,10,2\n4,10,2\n", 4, "backwards"),
    ("csv", CSV_HEAD + "0,10,2\n5,-10,2\n", 3, "negative"),
    ("csv", CSV_HEAD + "0,10,-2\n", 2, "negative"),
    ("csv", "time,prompt,output\n0,10,2\n", 1, "header"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
              "2023-11-16 18:15:4x.9951690,396,109\r\n", 3, "TIMESTAMP"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n"
              "2023-11-16 18:15:46.6805899,396,109\r\n", 3, "backwards"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                 '{"timestamp": 3, "input_length": 10, "output_length": 1, "hash_ids": [0]\n', 2, "JSON"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                 '{"timestamp": 3, "output_length": 1, "hash_ids": [0]}\n', 2, "input_length"),
    ("mooncake", '{"timestamp": 9, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n'
                 '{"timestamp": 3, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n', 2,
     "backwards"),
], ids=["csv-token", "csv-fields", "csv-time", "csv-backwards", "csv-negative-prompt",
        "csv-negative-output", "csv-header", "azure-stamp", "azure-backwards", "mooncake-json",
        "mooncake-missing", "mooncake-backwards"])
def test_malformed_rows_are_named(tmp_path, fmt, text, line, words):
    p = write(tmp_path, "bad." + fmt, text)
    with pytest.raises(TraceError) as e:
        load_trace(p, fmt)
    assert e.value.line == line
    assert words in e.value.message
    assert e.value.path.endswith("bad." + fmt)
    assert f"line {line}" in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, ValueError)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(TraceError) as e:
        load_trace(tmp_path / "nowhere.csv", "csv")
    assert e.value.line is None and "nowhere.csv" in str(e.value)
    with pytest.raises(TraceError) as e:
        load_trace(AZURE_CONV, "parquet")
    assert e.value.line is None and "parquet" in e.value.message
    p = write(tmp_path, "empty.csv", CSV_HEAD)
    with pytest.raises(TraceError, match="no request"):
        load_trace(p, "csv")


def test_empty_window_and_bad_block_size():
    tr = load_trace(MOONCAKE, "mooncake")
    with pytest.raises(TraceError, match="empty window") as e:
        replay(tr, block_tokens=16, start_s=700, duration_s=60)   # the excerpt ends at 669 s
    assert e.value.line is None and e.value.path.endswith("mooncake-conv.jsonl")
    with pytest.raises(TraceError, match="empty window"):
        replay(tr, block_tokens=16, start_s=1, duration_s=1)      # 0 ms, then 3,000 ms
    with pytest.raises(TraceError, match="empty window"):
        replay(tr, block_tokens=16, start_s=1, duration_s=10, horizon_ms=1000)
    with pytest.raises(TraceError, match="multiple"):
        replay(tr, block_tokens=24)                               # 512 is not a multiple of 24
    with pytest.raises(TraceError, match="multiple"):
        replay(tr, block_tokens=1024)


def test_check_fits_names_the_row(tmp_path):
    p = write(tmp_path, "big.csv", CSV_HEAD + "0,100,28\n1,100,29\n2,200,1\n3,10,10\n")
    tr = load_trace(p, "csv")
    rep = replay(tr, block_tokens=16, start_s=0.001)            # keeps lines 3, 4, 5
    check_fits(rep.prompt, rep.output, 201)                     # 201 = largest P + O: fits
    with pytest.raises(TraceError) as e:
        check_fits(rep.prompt, rep.output, 128, lines=rep.line, path=tr.path)
    assert e.value.line == 3 and "100 prompt + 29 output" in e.value.message
    P, O = lengths_table(tr)
    with pytest.raises(TraceError) as e:
        check_fits(P, O, 128, lines=tr.line, path=tr.path)
    assert e.value.line == 3
    with pytest.raises(TraceError, match="row 2"):
        check_fits(P, O, 128)


# ------------------------------------------------------------------ reading speed, same result

_STAMP_CHARS = "0123456789-: T."


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.datetimes(min_value=datetime.datetime(1000, 1, 1)).map(lambda d: d.strftime("%Y-%m-%d %H:%M:%S")),
    st.text(alphabet=_STAMP_CHARS, max_size=22),
    st.from_regex(r"\A\d{1,4}-\d{1,2}-\d{1,2} \d{1,2}:\d{1,2}:\d{1,2}\Z", fullmatch=True)))
def test_azure_whole_seconds_read_as_strptime_reads_them(whole):
    """The fast path (zero-padded stamps through datetime.fromisoformat) gives strptime's
    datetime, or strptime's refusal, for every string."""
    try:
        want = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    except ValueError:
        want = None
    assert _azure_time(whole) == want


def test_a_stage_over_many_trace_files_reads_each_once(tmp_path):
    """A stage's files are read by its checks and its memory estimate (and its build), in
    passes over all of them: each is parsed once however many there are (a cache of 16
    files parsed each of 20 files twice here)."""
    names = []
    for k in range(20):
        names.append(f"t{k:02d}.csv")
        write(tmp_path, names[-1], "TIMESTAMP,ContextTokens,GeneratedTokens\n"
              f"2023-11-16 18:15:{k:02d}.5,{10 + k},2\n2023-11-16 18:15:59.25,20,3\n")
    files = ", ".join(f'"{n}"' for n in names)
    sweep = write(tmp_path, "files.toml", f"""name = "files"
[replica]
kind = "batching"
[simulation]
warmup_s = 1
measure_s = 60
[workload]
source = "trace"
trace = {{ path = "t00.csv", format = "azure" }}
[cluster.heterogeneity]
uniform = [1]
[grid]
heterogeneity = ["uniform"]
scenario = ["steady"]
[[stages]]
name = "s"
policy = "round_robin"
seeds = {{ first = 1, count = 1 }}
workload = {{ trace = {{ path = [{files}] }} }}
""")
    before = _load_cached.cache_info().misses
    sw = load_sweep(sweep)                                   # the checks read every file
    assert _load_cached.cache_info().misses - before == 20
    grid.estimate_bytes(sw, sw.stages[0], 4096)              # the memory estimate reads them again
    assert _load_cached.cache_info().misses - before == 20


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(0, 10**16).map(str), st.text(alphabet="0123456789+- ٣x", max_size=17),
                 st.from_regex(r"\A0*\d{13,16}\Z", fullmatch=True)))
def test_a_token_count_read_at_once_is_the_checked_reading(value):
    """_count's shortcut gives _int_field's value, or its refusal with the same words."""
    def reading(read):
        try:
            return read(value, "t.csv", 7, "ContextTokens")
        except TraceError as e:
            return str(e)
    assert reading(_count) == reading(_int_field)


_AZURE_LINE = st.one_of(
    st.tuples(st.datetimes(min_value=datetime.datetime(2023, 11, 16), max_value=datetime.datetime(2023, 11, 18)),
              st.integers(0, 4), st.integers(0, 3000), st.integers(0, 3000)).map(
        lambda r: f"{r[0]:%Y-%m-%d %H:%M:%S}" + (f".{r[0].microsecond:06d}"[:r[1] + 1] if r[1] else "")
        + f",{r[2]},{r[3]}"),
    st.sampled_from(["", "\r", " ", "0000-01-01 00:00:00.5,1,1", "2023-11-16 24:00:00,1,1",
                     "2023-11-16 23:59:60,1,1", "2023-02-29 00:00:00,1,1", "2024-02-29 00:00:00,1,1",
                     "2023-11-16 18:15:46.,1,1", "2023-11-16 18:15:46,01,1", " 2023-11-16 18:15:46,1,1",
                     "2023-11-16 18:15:46,1, 1", "2023-11-16 18:15:46,-1,1", "2023-11-16 18:15:46,1,1,",
                     '"2023-11-16 18:15:46",1,1', "2023-11-16 18:15:46,1\r,1", "2023-11-16 18:15:46,1,1\x0c",
                     "2023-11-16 18:15:46,١,1", "2023-11-16 18:15:46,99999999999999,1",
                     "2023-11-16 18:15:46,999999999999999,1"]))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["TIMESTAMP,ContextTokens,GeneratedTokens", " TIMESTAMP, ContextTokens,GeneratedTokens",
                        "TIMESTAMP,ContextTokens", ""]),
       st.lists(_AZURE_LINE, max_size=8), st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_an_azure_file_read_at_once_is_the_checked_reading(header, rows, end, last):
    """Whenever _azure_at_once reads a file, the row-by-row reading accepts it and gives the
    same columns (values, types and line numbers); stamps out of order, blank lines, CRLF,
    and the rows either reading refuses are drawn among the rest."""
    text = end.join([header, *rows]) + end * last
    fast = traces._azure_at_once(text)
    if fast is None:
        return
    checked = traces._parse_azure_checked(io.StringIO(text, newline=""), "t.csv")
    assert np.array_equal(fast[0], checked[0]) and fast[0].dtype == checked[0].dtype
    assert fast[1:] == checked[1:]


def test_the_shipped_azure_trace_is_read_at_once():
    """The shipped Azure trace takes the reading at once (what makes a grid of its windows
    cheap), and that reading is the checked one."""
    text = (Path(__file__).resolve().parents[1] / "traces" / "azure-conv.csv").read_text(encoding="utf-8-sig")
    fast = traces._azure_at_once(text)
    assert fast is not None
    checked = traces._parse_azure_checked(io.StringIO(text, newline=""), "t.csv")
    assert np.array_equal(fast[0], checked[0]) and fast[1:] == checked[1:]


def test_a_replay_window_is_cut_once_and_shared_read_only(tmp_path):
    """replay() with the same arguments returns the window it cut before, its arrays
    read-only (a caller cannot change what the next one gets); other arguments cut anew."""
    tr = load_trace(write(tmp_path, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                          "2023-11-16 18:15:46.5,40,2\n2023-11-16 18:15:47.25,20,3\n"), "azure")
    a = replay(tr, block_tokens=16)
    assert replay(tr, block_tokens=16, start_s=0.0) is a
    assert replay(tr, block_tokens=8) is not a and len(replay(tr, block_tokens=8).block_ids) == 7
    with pytest.raises(ValueError):
        a.prompt[0] = 1
    assert list(a.prompt) == [40, 20] and list(a.a_ms) == [0.0, 750.0]
