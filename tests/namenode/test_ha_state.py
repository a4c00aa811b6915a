"""HA state machine: every (state, target, source, automatic) combination and every (state, category).

The observer rows (HDFS-12943): standby <-> observer only; an observer never becomes active, an active
never becomes an observer; user requests for observer transitions need no --forcemanual."""

import itertools

import pytest

from qjournal.errors import ServiceFailedError, StandbyError
from qjournal.namenode.ha_state import (HAState, OpCategory, Transition, check_operation,
                                        check_transition)

I, S, A, O, X = HAState.INITIALIZING, HAState.STANDBY, HAState.ACTIVE, HAState.OBSERVER, HAState.STOPPING
# (current, target) -> expected outcome for a zkfc / forced / non-automatic user request
TABLE = {
    (I, I): "refuse", (I, S): "do", (I, A): "do", (I, O): "refuse", (I, X): "do",
    (S, I): "refuse", (S, S): "noop", (S, A): "do", (S, O): "do", (S, X): "do",
    (A, I): "refuse", (A, S): "do", (A, A): "noop", (A, O): "refuse", (A, X): "do",
    (O, I): "refuse", (O, S): "do", (O, A): "refuse", (O, O): "noop", (O, X): "do",
    (X, I): "refuse", (X, S): "refuse", (X, A): "refuse", (X, O): "refuse", (X, X): "refuse",
}


def _manual_refused(cur, target, source, auto):
    """Invariant 3: under automatic failover a plain user request may not make a NameNode active, nor
    standby unless it is an observer (the ZKFC keeps observers out of the election)."""
    return auto and source == "user" and (target == A or (target == S and cur != O))


@pytest.mark.parametrize("cur,target,source,auto",
                         list(itertools.product(list(HAState), list(HAState),
                                                ["user", "zkfc", "user_forced"], [False, True])))
def test_transition_table(cur, target, source, auto):
    want = TABLE[(cur, target)]
    manual_refused = _manual_refused(cur, target, source, auto)
    if want == "refuse" or manual_refused:
        with pytest.raises(ServiceFailedError) as ei:
            check_transition(cur, target, source, auto)
        if manual_refused:
            assert "automatic HA is enabled" in str(ei.value)
    else:
        got = check_transition(cur, target, source, auto)
        assert got == (Transition.DO if want == "do" else Transition.NOOP)


def test_unknown_source_refused():
    with pytest.raises(ServiceFailedError, match="unknown request source"):
        check_transition(S, A, "martian")


@pytest.mark.parametrize("cur,target,needle", [(O, A, "make the observer standby first"),
                                               (A, O, "an active NameNode cannot become an observer")])
def test_observer_refusals_say_why(cur, target, needle):
    for source in ("user", "zkfc", "user_forced"):
        with pytest.raises(ServiceFailedError, match=needle):
            check_transition(cur, target, source, automatic_failover=False)


def test_observer_transitions_need_no_forcemanual():
    assert check_transition(S, O, "user", automatic_failover=True) == Transition.DO
    assert check_transition(O, S, "user", automatic_failover=True) == Transition.DO


@pytest.mark.parametrize("state,cat,stale", list(itertools.product(list(HAState), list(OpCategory),
                                                                  [False, True])))
def test_operation_table(state, cat, stale):
    served = (cat == OpCategory.UNCHECKED or state == A
              or (state == O and cat == OpCategory.READ)
              or (state == S and cat == OpCategory.READ and stale))
    if served:
        check_operation(state, cat, stale)
    else:
        with pytest.raises(StandbyError) as ei:
            check_operation(state, cat, stale, method="mkdirs")
        assert f"not supported in state {state.value}" in str(ei.value)
        assert "(mkdirs)" in str(ei.value)
