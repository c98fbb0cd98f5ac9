"""The reference's KV-transfer link model (tests/token_reference.py ``Links``) on
hand-worked cases (docs/model.md "Prefill/decode disaggregation", "The transfer and the
link model"). Every expected time is derived below from the page's definitions:
a transfer waits the latency using no bandwidth, then flows at
min(B / n_out(src), B / n_in(dst)), rates changing only when a transfer starts or ends
flowing. The byte counts and bandwidths are chosen so that the times are exact in
binary floating point where the test asks for equality."""

import pytest

from token_reference import Links

GB_S = 1e6
"""1 GB/s in bytes/ms."""


def test_one_transfer_is_latency_plus_bytes_over_bandwidth():
    """The issue's formula on the defaults: a 1,000-token prompt of Llama-3.1-8B
    (131,072 KV bytes a token: 2 · 32 layers · 8 KV heads · 128 · 2 bytes) over a
    50 GB/s link after 1 ms: 1 + 131,072,000 / 5e7 = 1 + 2.62144 = 3.62144 ms."""
    links = Links(50 * GB_S, 1.0)
    links.start("r", 10.0, 0, 1, 1000 * 131072)
    assert links.advance(13.6) == []
    assert links.advance(20.0) == ["r"]
    (key, end, nbytes), = links.ended
    assert (key, nbytes) == ("r", 131072000.0)
    assert end == pytest.approx(10.0 + 3.62144, rel=1e-15, abs=0)


def test_two_transfers_out_of_one_prefill_replica_share_its_link():
    """B = 100 bytes/ms, no latency; A (1,000 bytes, replica 0 → 1) starts at 0 and B
    (1,000 bytes, 0 → 2) at 4. Until 4, A alone at 100: 400 flowed, 600 left. From 4
    both leave replica 0: n_out = 2, each at min(100/2, 100/1) = 50. A's 600 take 12 ms:
    A ends at 16, when B has 12 · 50 = 600 flowed; B's 400 left alone at 100: 4 ms,
    ends at 20."""
    links = Links(100.0, 0.0)
    links.start("A", 0.0, 0, 1, 1000)
    links.start("B", 4.0, 0, 2, 1000)
    links.advance(100.0)
    assert links.ended == [("A", 16.0, 1000.0), ("B", 20.0, 1000.0)]


def test_two_transfers_into_one_decode_replica_after_the_latency():
    """B = 100, latency 2; A (0 → 2) and B (1 → 2), 1,000 bytes each, both start at 0:
    neither flows before 2 (the latency uses no bandwidth); from 2 both enter replica 2,
    n_in = 2, each at 50: both end at 2 + 1000/50 = 22, in start order."""
    links = Links(100.0, 2.0)
    links.start("A", 0.0, 0, 2, 1000)
    links.start("B", 0.0, 1, 2, 1000)
    assert links.rates(1.0) == {}
    assert links.rates(2.0) == {"A": 50.0, "B": 50.0}
    assert links.advance(21.0) == []
    assert links.advance(22.0) == ["A", "B"]
    assert links.ended == [("A", 22.0, 1000.0), ("B", 22.0, 1000.0)]


def test_a_share_one_end_cannot_use_is_not_handed_on():
    """No max-min fairness (the page leaves it out): B = 120; A (0 → 1, 1,200 bytes),
    and three into replica 3 — X (0 → 3), Y (4 → 3), Z (5 → 3), 1,200 bytes each — all
    at 0, no latency. n_out(0) = 2, n_in(3) = 3: A flows at min(60, 120) = 60 (not the
    80 that max-min fairness would give it once X is held to 40 by replica 3), X at
    min(60, 40) = 40, Y and Z at 40. Everything ends at 1200/60 = 20 for A and
    1200/40 = 30 for X, Y, Z (A's end changes none of their rates: X stays bound by
    replica 3's three)."""
    links = Links(120.0, 0.0)
    for key, src, dst in (("A", 0, 1), ("X", 0, 3), ("Y", 4, 3), ("Z", 5, 3)):
        links.start(key, 0.0, src, dst, 1200)
    assert links.rates(0.0) == {"A": 60.0, "X": 40.0, "Y": 40.0, "Z": 40.0}
    links.advance(100.0)
    assert links.ended == [("A", 20.0, 1200.0), ("X", 30.0, 1200.0), ("Y", 30.0, 1200.0), ("Z", 30.0, 1200.0)]


def test_an_aborted_transfer_gives_its_share_back():
    """B = 100, no latency; A and B (1,000 bytes each) leave replica 0 at 0, each at 50.
    B is aborted at 4 (a crash of its decode replica): A has 200 flowed, 800 left, alone
    at 100 from then: ends at 12. B never ends."""
    links = Links(100.0, 0.0)
    links.start("A", 0.0, 0, 1, 1000)
    links.start("B", 0.0, 0, 2, 1000)
    links.abort("B", 4.0)
    links.advance(100.0)
    assert links.ended == [("A", 12.0, 1000.0)]


def test_back_to_back_transfers_do_not_overlap():
    """B = 100, latency 1; A (500 bytes) from 0 ends at 1 + 5 = 6; B (500 bytes, same
    replicas) starts at 6, flows from 7 alone: ends at 12."""
    links = Links(100.0, 1.0)
    links.start("A", 0.0, 0, 1, 500)
    assert links.advance(6.0) == ["A"]
    links.start("B", 6.0, 0, 1, 500)
    assert links.next_time() == 7.0
    links.advance(100.0)
    assert links.ended == [("A", 6.0, 500.0), ("B", 12.0, 500.0)]
