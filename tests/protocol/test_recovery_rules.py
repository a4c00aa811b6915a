"""Table tests of the recovery decisions (protocol/recovery.py): comparator, source choice,
committed-txid sanity check, next epoch. Rows follow seed 000 §2.9 and reference §4.5."""

from dataclasses import dataclass

import pytest

from qjournal.errors import InvariantViolation, QuorumError
from qjournal.protocol.recovery import (check_committed_not_lost, choose_recovery_source,
                                        compare_recovery_responses, max_seen_epoch, next_epoch,
                                        segment_to_recover)
from qjournal.protocol.segment import INVALID_TXID


@dataclass(frozen=True)
class Seg:
    start_txid: int
    end_txid: int
    in_progress: bool
    digest: int | None = None


@dataclass(frozen=True)
class R:
    segment_state: Seg | None
    accepted_in_epoch: int | None = None
    last_writer_epoch: int = 1
    last_committed_txid: int | None = None


def ip(end, writer=1, accepted=None, committed=None, start=101):
    return R(Seg(start, end, True), accepted, writer, committed)


def fin(end, writer=1, start=101, committed=None):
    return R(Seg(start, end, False), None, writer, committed)


NONE = R(None)

# (a, b, expected compare(a, b)) -- each row names the rule it exercises
COMPARATOR_TABLE = [
    ("rule1: both without segment", NONE, NONE, 0),
    ("rule1: segment beats none", ip(150), NONE, 1),
    ("rule1: none loses to segment", NONE, fin(150), -1),
    ("rule2: finalized beats longer in-progress", fin(150), ip(153), 1),
    ("rule2: finalized beats in-progress with higher epochs", fin(150, writer=1), ip(160, writer=5, accepted=6), 1),
    ("rule2: in-progress loses to finalized", ip(153), fin(150), -1),
    ("rule2: equal finalized", fin(150), fin(150), 0),
    ("rule3b: higher writer epoch beats longer log", ip(151, writer=2), ip(153, writer=1), 1),
    ("rule3b: accepted epoch counts as seen", ip(150, writer=1, accepted=2), ip(153, writer=1), 1),
    ("rule3b: newer writer beats stale accepted", ip(150, writer=3), ip(101, writer=1, accepted=2), 1),
    ("rule3c: same epoch, longer wins", ip(153), ip(150), 1),
    ("rule3c: same epoch, shorter loses", ip(125), ip(150), -1),
    ("rule3c: same epoch and length tie", ip(153), ip(153), 0),
    ("rule3a: accepted below writer epoch uses writer epoch", ip(150, writer=3, accepted=2), ip(153, writer=3), -1),
]


@pytest.mark.parametrize("name,a,b,expected", COMPARATOR_TABLE, ids=[r[0] for r in COMPARATOR_TABLE])
def test_comparator_table(name, a, b, expected):
    assert compare_recovery_responses(a, b) == expected
    assert compare_recovery_responses(b, a) == -expected  # antisymmetric


def test_comparator_refuses_different_starts():
    with pytest.raises(InvariantViolation, match="different segments"):
        compare_recovery_responses(ip(150, start=101), ip(150, start=151))


def test_comparator_refuses_finalized_of_different_lengths():
    with pytest.raises(InvariantViolation, match="different lengths"):
        compare_recovery_responses(fin(150), fin(151))


def test_max_seen_epoch():
    assert max_seen_epoch(ip(1, writer=3)) == 3
    assert max_seen_epoch(ip(1, writer=3, accepted=5)) == 5
    assert max_seen_epoch(ip(1, writer=3, accepted=2)) == 3


# Source choice: (name, {node: answer}, expected end or None, expected sources, reason)
CHOICE_TABLE = [
    ("2.10.1 majority wrote 153", {"jn1": ip(150), "jn2": ip(153), "jn3": ip(153)}, 153, ("jn2", "jn3"), "longest-log"),
    ("2.10.2 seen jn1+jn2", {"jn1": ip(150), "jn2": ip(153)}, 153, ("jn2",), "longest-log"),
    ("2.10.2 seen jn1+jn3", {"jn1": ip(150), "jn3": ip(125)}, 150, ("jn1",), "longest-log"),
    ("2.10.2 seen jn2+jn3", {"jn2": ip(153), "jn3": ip(125)}, 153, ("jn2",), "longest-log"),
    ("2.10.3 finalized on majority", {"jn1": fin(150), "jn2": fin(150), "jn3": ip(145)}, 150, ("jn1", "jn2"), "already-finalized"),
    ("2.10.4 finalized on jn1 only, seen", {"jn1": fin(150), "jn3": ip(125)}, 150, ("jn1",), "already-finalized"),
    ("2.10.4 finalized on jn1 only, unseen", {"jn2": ip(150), "jn3": ip(125)}, 150, ("jn2",), "longest-log"),
    ("2.10.5 empty segment absent everywhere", {"jn2": NONE, "jn3": NONE}, None, (), "no-segment"),
    ("2.10.6 newer writer wins over longer log",
     {"jn1": ip(153, writer=1, start=151), "jn2": ip(151, writer=2, start=151), "jn3": ip(151, writer=2, start=151)},
     151, ("jn2", "jn3"), "longest-log"),
    ("2.10.7 accepted value wins over longer log",
     {"jn1": ip(150, writer=1, accepted=2), "jn2": ip(153, writer=1)}, 150, ("jn1",), "already-accepted"),
    ("all equal: every node is a source", {"jn3": ip(150), "jn1": ip(150), "jn2": ip(150)}, 150, ("jn1", "jn2", "jn3"), "longest-log"),
    ("missing segment never a source", {"jn1": NONE, "jn2": ip(140)}, 140, ("jn2",), "longest-log"),
]


@pytest.mark.parametrize("name,resps,end,sources,reason", CHOICE_TABLE, ids=[r[0] for r in CHOICE_TABLE])
def test_choose_recovery_source_table(name, resps, end, sources, reason):
    seg = next((r.segment_state.start_txid for r in resps.values() if r.segment_state), 101)
    d = choose_recovery_source(seg, resps)
    assert (d.state.end_txid if d.state else None) == end
    assert d.sources == sources
    assert d.reason == reason


def test_choice_does_not_depend_on_answer_order():
    a = {"jn1": ip(150), "jn2": ip(153), "jn3": ip(153)}
    b = dict(reversed(list(a.items())))
    assert choose_recovery_source(101, a) == choose_recovery_source(101, b)


def test_choice_checks_segment_txid():
    with pytest.raises(InvariantViolation):
        choose_recovery_source(151, {"jn1": ip(150, start=101)})


COMMITTED_TABLE = [
    ("committed below end", {"jn1": ip(153, committed=150), "jn2": ip(150, committed=150)}, False),
    ("committed equal end", {"jn1": ip(153, committed=153)}, False),
    ("unknown committed", {"jn1": ip(153, committed=INVALID_TXID), "jn2": ip(150)}, False),
    ("committed beyond chosen end", {"jn1": ip(150, writer=2), "jn2": ip(153, committed=152)}, True),
]


@pytest.mark.parametrize("name,resps,bad", COMMITTED_TABLE, ids=[r[0] for r in COMMITTED_TABLE])
def test_committed_sanity_check(name, resps, bad):
    d = choose_recovery_source(101, resps)
    if bad:
        with pytest.raises(InvariantViolation, match="had seen txid"):
            check_committed_not_lost(d, resps)
    else:
        check_committed_not_lost(d, resps)


def test_committed_check_when_nobody_has_the_segment():
    d = choose_recovery_source(151, {"jn1": R(None, last_committed_txid=150)})
    check_committed_not_lost(d, {"jn1": R(None, last_committed_txid=150)})
    with pytest.raises(InvariantViolation):
        check_committed_not_lost(d, {"jn1": R(None, last_committed_txid=151)})


@pytest.mark.parametrize("promised,expected", [([0, 0, 0], 1), ([3, 1], 4), ([7], 8), ([2, 5, 4], 6)])
def test_next_epoch(promised, expected):
    assert next_epoch(promised) == expected


def test_next_epoch_needs_answers():
    with pytest.raises(QuorumError):
        next_epoch([])
    with pytest.raises(InvariantViolation):
        next_epoch([-1])


@pytest.mark.parametrize("txids,expected", [([None, None], None), ([101, None, 151], 151), ([INVALID_TXID], None), ([], None)])
def test_segment_to_recover(txids, expected):
    assert segment_to_recover(txids) == expected


def test_tied_sources_with_different_digests_are_an_invariant_violation():
    a = R(Seg(101, 150, True, 0xAAAA))
    b = R(Seg(101, 150, True, 0xBBBB))
    with pytest.raises(InvariantViolation, match="different contents"):
        choose_recovery_source(101, {"jn1": a, "jn2": b})
    same = choose_recovery_source(101, {"jn1": a, "jn2": R(Seg(101, 150, True, 0xAAAA)), "jn3": R(Seg(101, 150, True))})
    assert same.sources == ("jn1", "jn2", "jn3")
