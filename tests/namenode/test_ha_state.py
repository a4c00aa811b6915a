"""HA state machine: every (state, target, source, automatic) combination and every (state, category)."""

import itertools

import pytest

from qjournal.errors import ServiceFailedError, StandbyError
from qjournal.namenode.ha_state import (HAState, OpCategory, Transition, check_operation,
                                        check_transition)

I, S, A, X = HAState.INITIALIZING, HAState.STANDBY, HAState.ACTIVE, HAState.STOPPING
# (current, target) -> expected outcome for a zkfc / forced / non-automatic user request
TABLE = {
    (I, I): "refuse", (I, S): "do", (I, A): "do", (I, X): "do",
    (S, I): "refuse", (S, S): "noop", (S, A): "do", (S, X): "do",
    (A, I): "refuse", (A, S): "do", (A, A): "noop", (A, X): "do",
    (X, I): "refuse", (X, S): "refuse", (X, A): "refuse", (X, X): "refuse",
}


@pytest.mark.parametrize("cur,target,source,auto",
                         list(itertools.product(list(HAState), list(HAState),
                                                ["user", "zkfc", "user_forced"], [False, True])))
def test_transition_table(cur, target, source, auto):
    want = TABLE[(cur, target)]
    manual_refused = auto and source == "user" and target in (S, A)
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


@pytest.mark.parametrize("state,cat,stale", list(itertools.product(list(HAState), list(OpCategory),
                                                                  [False, True])))
def test_operation_table(state, cat, stale):
    served = (cat == OpCategory.UNCHECKED or state == A
              or (state == S and cat == OpCategory.READ and stale))
    if served:
        check_operation(state, cat, stale)
    else:
        with pytest.raises(StandbyError) as ei:
            check_operation(state, cat, stale, method="mkdirs")
        assert f"not supported in state {state.value}" in str(ei.value)
        assert "(mkdirs)" in str(ei.value)
