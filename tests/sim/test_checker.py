"""The checker on hand-made histories: each journal rule passes a good history and catches its bad one; the one
entry point applies every rule set a history's events allow."""

from __future__ import annotations

from qjournal.protocol.segment import OP_DATA, encode_header, encode_records
from qjournal.sim.checker import RULES, check
from qjournal.sim.cluster_rules import CLUSTER_RULES
from qjournal.sim.journal_rules import JOURNAL_RULES
from qjournal.sim.linearizability import LIN_RULES
from qjournal.sim.history import (Accepted, Acked, EpochGranted, Failure, FinalLog, Finalized,
                                  History, NamespaceState, NodeSegment, OpAcked, OpCalled, Promise, Read,
                                  Setup, Written, WriterStarted)

NODES = ("jn0", "jn1", "jn2")


def seg(start, bodies):
    return encode_header() + encode_records([(start + i, OP_DATA, b) for i, b in enumerate(bodies)])


def good() -> History:
    h = History()
    h.add(Setup(NODES))
    for n in NODES:
        h.add(Promise(n, 1, "w1"))
    h.add(EpochGranted("w1", 1))
    for t in (1, 2, 3):
        h.add(Written("w1", 1, t, b"a%d" % t))
    for n in NODES[:2]:
        h.add(Accepted(n, 1, 1, 3))
    h.add(Acked("w1", 1, 3))
    h.add(Written("w1", 1, 4, b"lost-ok"))  # never acked: may be lost
    h.add(Read("r1", 2, b"a2"))
    for n in NODES:
        h.add(Finalized(n, 1, 1, 3))
    for n in NODES:
        h.add(NodeSegment(n, 1, 3, False, seg(1, [b"a1", b"a2", b"a3"])))
    h.add(FinalLog(1, (b"a1", b"a2", b"a3")))
    return h


def rules(h: History) -> list[str]:
    return sorted({v.rule for v in check(h)})


def test_good_history_passes():
    assert check(good()) == []


def test_every_rule_is_known():
    assert len(JOURNAL_RULES) == len(set(JOURNAL_RULES)) == 10
    assert set(RULES) == set(JOURNAL_RULES) | set(CLUSTER_RULES) | set(LIN_RULES)


def test_one_entry_judges_every_rule_set_the_history_allows():
    """A history with the journal's events and the clients' is judged by both rule sets and the search for a
    linearization, the journal's violations first; without linearizability, the rules alone."""
    h = good()
    h.add(Acked("w1", 1, 4))                                   # journal: txid 4 acked, not in the final log
    h.add(OpCalled("c1", 0, "create", "/c1/a"))
    h.add(OpAcked("c1", 0, "nn1"))
    h.add(NamespaceState("nn1", "active", 9, ()))              # cluster: the acked create is gone
    assert [v.rule for v in check(h)] == ["acked_lost", "op_lost", "not_linearizable"]
    assert [v.rule for v in check(h, linearizability=False)] == ["acked_lost", "op_lost"]


def test_acked_txid_missing_from_final_log():
    h = good()
    h.events = [e for e in h.events if not isinstance(e, (FinalLog, NodeSegment))]
    h.add(FinalLog(1, (b"a1", b"a2")))
    assert rules(h) == ["acked_lost"]


def test_acked_txid_with_other_bytes():
    h = good()
    h.events = [e for e in h.events if not isinstance(e, (FinalLog, NodeSegment))]
    h.add(Written("w2", 2, 3, b"other"))
    h.add(FinalLog(1, (b"a1", b"a2", b"other")))
    assert rules(h) == ["acked_lost"]


def test_unacked_txid_may_be_kept_or_lost():
    h = good()
    h.events = [e for e in h.events if not isinstance(e, (FinalLog, NodeSegment))]
    h.add(FinalLog(1, (b"a1", b"a2", b"a3", b"lost-ok")))
    assert check(h) == []


def test_read_then_lost():
    h = good()
    h.events = [e for e in h.events if not isinstance(e, FinalLog)]
    h.add(Written("w1", 1, 4, b"seen"))
    h.add(Read("r2", 4, b"seen"))
    h.add(FinalLog(1, (b"a1", b"a2", b"a3")))
    assert rules(h) == ["read_lost"]


def test_readers_disagree():
    h = good()
    h.add(Read("r2", 2, b"zz"))
    assert set(rules(h)) == {"read_disagree", "read_lost"}


def test_invented_bytes():
    h = good()
    h.events = [e for e in h.events if not isinstance(e, (FinalLog, NodeSegment))]
    h.add(FinalLog(1, (b"a1", b"a2", b"a3", b"never-written")))
    assert rules(h) == ["invented"]


def test_racing_writers_may_each_get_a_minority_of_promises_for_one_epoch():
    h = good()
    h.add(Promise("jn0", 2, "w2"))
    h.add(Promise("jn1", 2, "w3"))
    h.add(Promise("jn2", 2, "w3"))
    assert check(h) == []


def test_epoch_held_by_two_writers():
    h = good()
    h.add(Promise("jn0", 2, "w2"))
    h.add(Promise("jn1", 2, "w2"))
    h.add(Promise("jn2", 2, "w3"))
    h.add(Promise("jn1", 3, "w9"))
    h.add(Promise("jn2", 2, "w3"))  # jn2 promising 2 twice is itself a violation
    assert rules(h) == ["epoch_reused"]
    assert len(check(h)) == 1


def test_node_promising_an_epoch_twice():
    h = good()
    h.add(Promise("jn0", 1, "w9"))
    [v] = check(h)
    assert v.rule == "epoch_reused" and "twice" in v.message


def test_epochs_must_increase_for_writers_started_later():
    h = good()
    h.add(EpochGranted("w2", 3))
    h.add(WriterStarted("w3"))
    h.add(EpochGranted("w3", 2))
    assert rules(h) == ["epoch_not_increasing"]


def test_recoveries_may_finish_in_any_order():
    h = good()
    h.add(WriterStarted("w2"))
    h.add(WriterStarted("w3"))
    h.add(EpochGranted("w3", 3))
    h.add(EpochGranted("w2", 2))
    assert check(h) == []


def test_old_writer_accepted_by_quorum_after_new_promise_quorum():
    h = good()
    h.add(Promise("jn0", 2, "w2"))
    h.add(Promise("jn1", 2, "w2"))
    h.add(Accepted("jn0", 1, 4, 4))
    h.add(Accepted("jn1", 1, 4, 4))
    assert rules(h) == ["two_writers"]


def test_old_writer_accept_straddling_the_promise_is_allowed():
    # jn0 accepted before it promised; jn2 accepts after: a quorum, but not all after the moment
    h = good()
    h.add(Accepted("jn0", 1, 4, 4))
    h.add(Promise("jn0", 2, "w2"))
    h.add(Promise("jn1", 2, "w2"))
    h.add(Accepted("jn2", 1, 4, 4))
    assert check(h) == []


def test_finalize_end_disagrees():
    h = good()
    h.add(Finalized("jn2", 1, 1, 2))
    assert rules(h) == ["finalize_disagree"]


def test_finalized_files_differ():
    h = good()
    h.add(NodeSegment("jn9", 1, 3, False, seg(1, [b"a1", b"a2", b"XX"])))
    assert set(rules(h)) == {"finalize_disagree", "finalized_vs_log"}


def test_finalized_segment_corrupt():
    h = good()
    bad = bytearray(seg(1, [b"a1", b"a2", b"a3"]))
    bad[-1] ^= 0xFF
    h.add(NodeSegment("jn9", 1, 3, False, bytes(bad)))
    assert "finalized_vs_log" in rules(h)


def test_in_progress_segments_are_not_judged_as_finalized():
    h = good()
    h.add(NodeSegment("jn2", 4, 4, True, seg(4, [b"lost-ok"])[:-2]))
    assert check(h) == []


def test_failure_event_is_a_violation():
    h = good()
    h.add(Failure("w1", "InvariantViolation", "committed txid went backwards"))
    assert rules(h) == ["failure"]


def test_violation_names_events_and_history_formats():
    h = good()
    h.add(Failure("w1", "InvariantViolation", "boom"))
    [v] = check(h)
    assert v.seqs == (len(h) - 1,)
    assert "InvariantViolation" in h.format(only=list(v.seqs))
    assert h.to_jsonl().count("\n") == len(h) - 1
