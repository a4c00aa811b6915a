"""Table tests of the quorum math (protocol/quorum.py)."""

import pytest

from qjournal.errors import InvariantViolation
from qjournal.protocol.quorum import (Outcome, WaitRule, all_rule, majority, majority_rule,
                                      quorum_outcome, quorum_string)

P, W, L = Outcome.PENDING, Outcome.WON, Outcome.LOST


@pytest.mark.parametrize("n,expected", [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)])
def test_majority(n, expected):
    assert majority(n) == expected


def test_majority_of_zero_is_a_bug():
    with pytest.raises(InvariantViolation):
        majority(0)


def test_quorum_string():
    assert quorum_string(3) == "2/3"
    assert quorum_string(5) == "3/5"


# (n, successes, failures, outcome) for the majority rule
MAJORITY_TABLE = [
    (3, 0, 0, P), (3, 1, 0, P), (3, 2, 0, W), (3, 3, 0, W),
    (3, 0, 1, P), (3, 1, 1, P), (3, 2, 1, W),
    (3, 0, 2, L), (3, 1, 2, L), (3, 0, 3, L),
    (5, 2, 2, P), (5, 3, 0, W), (5, 2, 3, L), (5, 0, 2, P), (5, 0, 3, L),
    (1, 0, 0, P), (1, 1, 0, W), (1, 0, 1, L),
    (2, 1, 0, P), (2, 2, 0, W), (2, 1, 1, L),
]


@pytest.mark.parametrize("n,s,f,out", MAJORITY_TABLE)
def test_majority_rule_table(n, s, f, out):
    assert quorum_outcome(s, f, majority_rule(n)) is out


ALL_TABLE = [
    (3, 0, 0, P), (3, 2, 0, P), (3, 3, 0, W), (3, 2, 1, L), (3, 0, 1, P), (3, 0, 3, L), (1, 1, 0, W),
]


@pytest.mark.parametrize("n,s,f,out", ALL_TABLE)
def test_all_rule_table(n, s, f, out):
    assert quorum_outcome(s, f, all_rule(n)) is out


def test_wait_for_all_with_majority_successes():
    rule = WaitRule("majority-after-all", 3, 2, True)
    assert quorum_outcome(2, 0, rule) is P
    assert quorum_outcome(2, 1, rule) is W
    assert quorum_outcome(1, 2, rule) is L


@pytest.mark.parametrize("s,f", [(-1, 0), (0, -1), (2, 2), (4, 0)])
def test_impossible_counts_are_invariant_violations(s, f):
    with pytest.raises(InvariantViolation):
        quorum_outcome(s, f, majority_rule(3))


def test_bad_rules():
    with pytest.raises(InvariantViolation):
        WaitRule("x", 3, 4)
    with pytest.raises(InvariantViolation):
        WaitRule("x", 0, 0)


def test_never_lost_while_win_possible_exhaustive():
    for n in range(1, 8):
        rule = majority_rule(n)
        for s in range(n + 1):
            for f in range(n + 1 - s):
                out = quorum_outcome(s, f, rule)
                win_possible = s + (n - s - f) >= rule.min_successes
                if out is L:
                    assert not win_possible
                if out is W:
                    assert s >= rule.min_successes
                if out is P:
                    assert win_possible and s < rule.min_successes


def test_public_api():
    import qjournal.client as client
    import qjournal.protocol.quorum as quorum
    import qjournal.protocol.recovery as recovery
    assert sorted(client.__all__) == ["AsyncLogger", "AsyncLoggerSet", "QJMSettings", "QuorumCall",
                                      "QuorumJournalManager", "QuorumOutputStream", "parse_qjournal_uri"]
    for mod in (client, quorum, recovery):
        for name in mod.__all__:
            assert hasattr(mod, name), f"{mod.__name__}.{name}"
