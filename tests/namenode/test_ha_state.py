"""HA state machine: every (state, target, source, automatic) combination and every (state, category).

The observer rows (HDFS-12943): standby <-> observer only; an observer never becomes active, an active
never becomes an observer; user requests for observer transitions need no --forcemanual."""

import itertools

import pytest

from qjournal.errors import SafeModeError, ServiceFailedError, StandbyError
from qjournal.namenode.ha_state import (SAFE_MODE_REFUSALS, HAState, OpCategory, Transition, check_operation,
                                        check_safe_mode, check_transition)

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


@pytest.mark.parametrize("cur,target,safe_mode,key",
                         list(itertools.product(list(HAState), list(HAState), [False, True], [False, True])))
def test_safe_mode_transition_table(cur, target, safe_mode, key):
    """Invariant 5: with the key, a NameNode in safe mode does not become active or observer (one already
    there stays: a no-op); every other outcome is the table's."""
    want = TABLE[(cur, target)]
    refused = want == "do" and safe_mode and key and target in (A, O)
    if want == "refuse" or refused:
        with pytest.raises(ServiceFailedError) as ei:
            check_transition(cur, target, "zkfc", False, safe_mode, key)
        if refused:
            assert "dfs.ha.nn.not-become-active-in-safemode" in str(ei.value)
            assert "-safemode leave" in str(ei.value)
    else:
        got = check_transition(cur, target, "zkfc", False, safe_mode, key)
        assert got == (Transition.DO if want == "do" else Transition.NOOP)


@pytest.mark.parametrize("safe_mode,cat", list(itertools.product([False, True], list(OpCategory))))
def test_safe_mode_refuses_writes_only(safe_mode, cat):
    """Invariant 4: only WRITE is refused, and only in safe mode."""
    if safe_mode and cat == OpCategory.WRITE:
        with pytest.raises(SafeModeError) as ei:
            check_safe_mode(safe_mode, cat, "mkdirs", "/a/b", "NameNode nn1")
        msg = str(ei.value)
        assert msg.startswith("Cannot create directory /a/b. Name node is in safe mode (NameNode nn1).")
        assert 'Use "qjournal dfsadmin -safemode leave" to turn safe mode off.' in msg
        assert ei.value.fields == {"nn": "NameNode nn1", "method": "mkdirs", "path": "/a/b", "safe_mode": True}
    else:
        check_safe_mode(safe_mode, cat, "mkdirs", "/a/b", "NameNode nn1")


@pytest.mark.parametrize("method", sorted(SAFE_MODE_REFUSALS) + ["frobnicate"])
def test_safe_mode_message_names_the_action(method):
    with pytest.raises(SafeModeError) as ei:
        check_safe_mode(True, OpCategory.WRITE, method, "/p" if method != "roll_edit_log" else "")
    want = SAFE_MODE_REFUSALS.get(method, "Cannot frobnicate")
    assert str(ei.value).startswith(want + (" /p" if method != "roll_edit_log" else "") + ". Name node is in")
