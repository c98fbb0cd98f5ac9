"""The compiled link model of prefill/decode disaggregation (routesim/batching/pd.py,
docs/model.md "The transfer and the link model"): hand-worked cases (one transfer,
transfers sharing a link, the latency, the missing max-min redistribution, a stopped
transfer, the window's counts and utilisation), each expected value derived in the
docstring from the page's definitions; then the compiled links against the reference's
``Links`` (tests/token_reference.py) on random sequences of starts, stops and advances,
bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from routesim.batching import pd
from token_reference import Links

GB_S = 1e6
"""1 GB/s in bytes/ms."""


class Compiled:
    """pd.py's links behind the reference's interface: ``start``, ``advance`` (the keys
    ended), ``abort``, ``ended`` ((key, end, bytes) in end order), ``moved_out``/``in``."""

    def __init__(self, bandwidth, latency, window=(0.0, 0.0), replicas=8, capacity=64):
        self.L = pd.new_nb(replicas, capacity, float(bandwidth), float(latency), float(window[0]), float(window[1]))
        self.out = np.zeros(capacity, np.int64)
        self.out_t = np.zeros(capacity, np.float64)
        self.bytes = {}
        self.ended = []

    def start(self, key, t, src, dst, nbytes):
        assert self.advance(t) == []
        self.bytes[key] = float(nbytes)
        pd.start_nb(self.L, key, t, src, dst, float(nbytes))

    def advance(self, t):
        m = pd.advance_nb(self.L, t, self.out, self.out_t)
        keys = [int(k) for k in self.out[:m]]
        self.ended += [(k, float(e), self.bytes[k]) for k, e in zip(keys, self.out_t[:m])]
        return keys

    def abort(self, key, t):
        out = self.advance(t)
        assert pd.remove_nb(self.L, key)
        return out

    def rates(self, t):
        assert self.advance(t) == []
        pd.rates_nb(self.L)
        n = self.L.head[0]["n"]
        return {int(self.L.tr[j]["key"]): float(self.L.rate[j]) for j in range(n) if self.L.rate[j] >= 0}


def test_one_transfer_is_latency_plus_bytes_over_bandwidth():
    """The issue's formula: 1,000 tokens of 131,072 KV bytes over 50 GB/s (5e7
    bytes/ms) after 1 ms, started at 10: ends at 10 + 1 + 2.62144 = 13.62144 ms, not
    before."""
    links = Compiled(50 * GB_S, 1.0)
    links.start(7, 10.0, 0, 1, 1000 * 131072)
    assert links.advance(13.6) == []
    assert links.advance(20.0) == [7]
    (key, end, nbytes), = links.ended
    assert (key, nbytes) == (7, 131072000.0)
    assert end == pytest.approx(13.62144, rel=1e-15, abs=0)


def test_two_transfers_out_of_one_replica_share_its_link():
    """B = 100 bytes/ms, no latency; A (1,000 bytes, 0 → 1) at 0, B (1,000, 0 → 2) at
    4. A alone until 4 (400 flowed), then n_out(0) = 2, each at 50: A's 600 take 12 ms,
    A ends at 16 with B at 600 flowed; B's 400 alone at 100 end at 20."""
    links = Compiled(100.0, 0.0)
    links.start(1, 0.0, 0, 1, 1000)
    links.start(2, 4.0, 0, 2, 1000)
    assert links.rates(4.0) == {1: 50.0, 2: 50.0}
    links.advance(100.0)
    assert links.ended == [(1, 16.0, 1000.0), (2, 20.0, 1000.0)]


def test_the_latency_uses_no_bandwidth_and_ends_at_one_time_keep_start_order():
    """B = 100, latency 2; A (0 → 2) and B (1 → 2), 1,000 bytes each, both at 0: no
    rate before 2; from 2, n_in(2) = 2, each at 50: both end at 22, A first (started
    first, though its key is larger)."""
    links = Compiled(100.0, 2.0)
    links.start(9, 0.0, 0, 2, 1000)
    links.start(3, 0.0, 1, 2, 1000)
    assert links.rates(1.0) == {}
    assert links.rates(2.0) == {9: 50.0, 3: 50.0}
    assert links.advance(21.0) == []
    assert links.advance(22.0) == [9, 3]
    assert [e for _k, e, _b in links.ended] == [22.0, 22.0]


def test_a_share_one_end_cannot_use_is_not_handed_on():
    """No max-min fairness: B = 120; A (0 → 1), X (0 → 3), Y (4 → 3), Z (5 → 3), 1,200
    bytes each at 0. n_out(0) = 2, n_in(3) = 3: A at min(60, 120) = 60, X, Y, Z at 40.
    A ends at 20; X, Y, Z at 30 (A's end frees replica 0's link, but X stays bound by
    replica 3's three)."""
    links = Compiled(120.0, 0.0)
    for key, src, dst in ((1, 0, 1), (2, 0, 3), (3, 4, 3), (4, 5, 3)):
        links.start(key, 0.0, src, dst, 1200)
    assert links.rates(0.0) == {1: 60.0, 2: 40.0, 3: 40.0, 4: 40.0}
    links.advance(100.0)
    assert links.ended == [(1, 20.0, 1200.0), (2, 30.0, 1200.0), (3, 30.0, 1200.0), (4, 30.0, 1200.0)]


def test_a_stopped_transfer_hands_its_share_back_and_never_ends():
    """B = 100, no latency; A and B (0 → 1 and 0 → 2, 1,000 bytes) at 0, each at 50.
    B stops at 10 (a crash): A has 500 flowed and takes the link alone, its 500 left at
    100: it ends at 15; B never ends. in_progress counts started transfers (latency
    included) out of a source and into a destination."""
    links = Compiled(100.0, 0.0)
    links.start(1, 0.0, 0, 1, 1000)
    links.start(2, 0.0, 0, 2, 1000)
    assert pd.in_progress_nb(links.L, 0, 2) == (2, 1)
    assert links.abort(2, 10.0) == []
    assert pd.in_progress_nb(links.L, 0, 2) == (1, 0)
    assert not pd.remove_nb(links.L, 2)
    links.advance(100.0)
    assert links.ended == [(1, 15.0, 1000.0)]


def test_the_window_counts_ends_in_it_and_the_bytes_that_flow_in_it():
    """Window (10, 30], B = 100, no latency, one replica pair 0 → 1. A (1,000 bytes)
    at 0 ends at 10: outside the window (it is open at 10), but none of its bytes flow
    in it either. B (2,000 bytes) at 20 flows 1,000 bytes in (20, 30] and ends at 40,
    outside. C (500 bytes, 2 → 3) at 25 ends at 30, inside: one transfer, 500 bytes.
    Utilisation of replica 0: (1,000 out + 0 in) / (2 · 100 · 20) = 0.25; of replica
    1: 1,000 in / 4,000 = 0.25; of replica 2: 500 / 4,000 = 0.125."""
    links = Compiled(100.0, 0.0, window=(10.0, 30.0))
    links.start(1, 0.0, 0, 1, 1000)
    assert links.advance(20.0) == [1]
    links.start(2, 20.0, 0, 1, 2000)
    links.start(3, 25.0, 2, 3, 500)
    links.advance(100.0)
    assert links.ended == [(1, 10.0, 1000.0), (3, 30.0, 500.0), (2, 40.0, 2000.0)]
    head = links.L.head[0]
    assert (head["ended"], head["ended_bytes"]) == (1, 500.0)
    assert [pd.utilization_nb(links.L, i) for i in range(4)] == [0.25, 0.25, 0.125, 0.125]


# ---------------------------------------------------------------- against the reference
OPS = st.lists(
    st.tuples(st.sampled_from(["start", "start", "start", "abort", "advance"]),
              st.floats(0.0, 30.0, allow_nan=False).map(lambda x: round(x, 3)),   # time step (ms)
              st.integers(0, 3), st.integers(4, 7),                               # src, dst
              st.integers(1, 40_000)),                                            # bytes
    min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(ops=OPS, bandwidth=st.sampled_from([100.0, 333.0, 50 * GB_S / 1e4]),
       latency=st.sampled_from([0.0, 1.0, 2.5]), window=st.sampled_from([(0.0, 50.0), (20.0, 200.0)]))
def test_the_compiled_links_are_the_reference_bit_for_bit(ops, bandwidth, latency, window):
    """Random starts, stops and advances: the same ends at the same times in the same
    order, the same bytes left on every transfer in progress, the same bytes per
    replica in the window and the same count and bytes of the transfers ended in it."""
    ref, got = Links(bandwidth, latency, window=window), Compiled(bandwidth, latency, window=window)
    t, key = 0.0, 0
    for op, dt, src, dst, nbytes in ops:
        t += dt
        if op == "start":
            assert got.advance(t) == ref.advance(t)
            ref.start(key, t, src, dst, nbytes)
            got.start(key, t, src, dst, nbytes)
            key += 1
        else:
            assert got.advance(t) == ref.advance(t)
            if op == "abort" and ref.transfers:   # one still in progress at t stops
                victim = list(ref.transfers)[nbytes % len(ref.transfers)]
                assert got.abort(victim, t) == ref.abort(victim, t) == []
        head, tr = got.L.head[0], got.L.tr
        assert head["now"] == ref.now
        assert [(int(x["key"]), float(x["left"])) for x in tr[:head["n"]]] == \
            [(k, x["left"]) for k, x in ref.transfers.items()]
    assert got.advance(t + 1e6) == ref.advance(t + 1e6)
    assert got.ended == ref.ended
    W, H = window
    inside = [nb for _k, e, nb in ref.ended if W < e <= H]
    head = got.L.head[0]
    assert (head["ended"], head["ended_bytes"]) == (len(inside), sum(inside))
    for i in range(8):
        assert got.L.moved[i, 0] == ref.moved_out.get(i, 0.0)
        assert got.L.moved[i, 1] == ref.moved_in.get(i, 0.0)


def test_the_records_are_aligned_structs():
    from routesim.batching.dtypes import LINKS, TRANSFER
    assert TRANSFER.isalignedstruct and LINKS.isalignedstruct
