"""The JournalNodeSyncer's rules (protocol/sync_rules.py), by table: what a node copies from a peer,
what it skips and why, what it reports as a conflict; and when a node formatted from its peers may
vote again."""

import pytest

from qjournal.protocol.messages import Manifest, SegmentState
from qjournal.protocol.segment import INVALID_TXID
from qjournal.protocol.sync_rules import LocalSegments, plan_sync, rejoin_complete


def fin(s, e, d=None):
    return SegmentState(s, e, False, d)


def ip(s, e):
    return SegmentState(s, e, True)


def local(finalized=(), in_progress=(), open_segment=None, committed=INVALID_TXID, purged=0):
    return LocalSegments({s.start_txid: s for s in finalized}, frozenset(in_progress), open_segment, committed,
                         purged)


# (case, local, peer segments, peer committed, fetched starts, skipped (start, why), conflicting starts)
CASES = [
    ("a missing finalized segment in the middle is copied",
     local([fin(1, 10), fin(21, 30)], committed=35), [fin(1, 10), fin(11, 20), fin(21, 30), ip(31, 35)], 35,
     [11], [], []),
    ("the peer's in-progress segment is never copied",
     local([fin(1, 10)], committed=40), [fin(1, 10), ip(11, 40)], 40, [], [], []),
    ("an empty node copies everything committed",
     local(), [fin(1, 10), fin(11, 20)], 20, [1, 11], [], []),
    ("not known committed by either side: skipped",
     local(committed=INVALID_TXID), [fin(1, 10)], INVALID_TXID, [], [(1, "not known committed")], []),
    ("beyond both committed txids: skipped",
     local(committed=5), [fin(1, 10)], 8, [], [(1, "not known committed")], []),
    ("our own committed txid is enough",
     local(committed=10), [fin(1, 10)], INVALID_TXID, [1], [], []),
    ("purged here: never re-fetched",
     local([fin(21, 30)], committed=30, purged=21), [fin(1, 10), fin(11, 20), fin(21, 30)], 30,
     [], [(1, "purged"), (11, "purged")], []),
    ("a segment ending exactly at the purge bound is kept",
     local(committed=30, purged=10), [fin(1, 10)], 30, [1], [], []),
    ("our open segment is the writer's",
     local([fin(1, 10)], in_progress=[11], open_segment=11, committed=20), [fin(1, 10), fin(11, 20)], 20,
     [], [(11, "in progress here")], []),
    ("our newest in-progress segment is recovery's",
     local([fin(1, 10)], in_progress=[11], committed=20), [fin(1, 10), fin(11, 20)], 20,
     [], [(11, "in progress here")], []),
    ("a stale older in-progress copy is superseded",
     local([fin(21, 30)], in_progress=[11], committed=30), [fin(11, 20), fin(21, 30)], 30, [11], [], []),
    ("finalized at another end: conflict, nothing fetched",
     local([fin(1, 10)], committed=20), [fin(1, 12)], 20, [], [], [1]),
    ("same txids, other digest: conflict",
     local([fin(1, 10, 0xAA)], committed=20), [fin(1, 10, 0xBB)], 20, [], [], [1]),
    ("same txids, same digest: nothing to do",
     local([fin(1, 10, 0xAA)], committed=20), [fin(1, 10, 0xAA)], 20, [], [], []),
    ("a digest known on one side only is no conflict",
     local([fin(1, 10)], committed=20), [fin(1, 10, 0xBB)], 20, [], [], []),
    ("overlapping a finalized segment with another start: conflict",
     local([fin(1, 10)], committed=20), [fin(5, 15)], 20, [], [], [5]),
]


@pytest.mark.parametrize("case,loc,segs,committed,fetch,skipped,conflicts", CASES, ids=[c[0] for c in CASES])
def test_plan_sync(case, loc, segs, committed, fetch, skipped, conflicts):
    plan = plan_sync(loc, Manifest(tuple(segs), committed))
    assert [s.start_txid for s in plan.fetch] == fetch, case
    assert [(s.start_txid, why) for s, why in plan.skipped] == skipped, case
    assert [c.segment.start_txid for c in plan.conflicts] == conflicts, case


REJOIN = [
    ("nothing to cover", [], 0, 1, True),
    ("covered without a gap", [fin(1, 10), fin(11, 20)], 20, 1, True),
    ("covered past the rejoin txid", [fin(1, 10), fin(11, 30)], 20, 1, True),
    ("a gap", [fin(1, 10), fin(21, 30)], 30, 1, False),
    ("not yet through the rejoin txid", [fin(1, 10)], 15, 1, False),
    ("the peers purged below 11", [fin(11, 20)], 20, 11, True),
    ("the first needed segment missing", [fin(11, 20)], 20, 1, False),
]


@pytest.mark.parametrize("case,segs,rejoin_txid,first_needed,ok", REJOIN, ids=[c[0] for c in REJOIN])
def test_rejoin_complete(case, segs, rejoin_txid, first_needed, ok):
    assert rejoin_complete(segs, rejoin_txid, first_needed) is ok, case


def test_finalized_replicas_counts_the_window_every_node_still_covers():
    from qjournal.protocol.sync_rules import finalized_replicas
    a = Manifest((fin(1, 10), fin(11, 20), fin(21, 30), ip(31, 33)))
    b = Manifest((fin(11, 20), fin(21, 30), ip(31, 35)))        # purged 1-10 already
    c = Manifest((fin(11, 20), ip(21, 25)))                       # missed the finalize of 21-30
    assert finalized_replicas([a, b, c]) == {(11, 20): 3, (21, 30): 2}
    assert finalized_replicas([]) == {}
