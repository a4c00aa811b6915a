"""The linearizability checker catches the known whole-cluster bugs of docs/testing.md, replayed.

Each test breaks one thing as ``test_cluster_sim.py`` does (the fix reverted through the same switch) and
runs the seed that showed it; the search for a linearization alone must fail (whatever the rules say),
and the same seed with the real code is linearizable. C3 (the stuck controller) and C7 (a spinning
shutdown) are liveness bugs, C4 and C5 end in a NameNode's ``InvariantViolation`` before any client sees
a wrong answer: no history of client operations can show them; the rules ``controller_out``,
``no_progress`` and ``failure`` do.
"""

from __future__ import annotations

import pytest

from qjournal.namenode import client_protocol
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.observer_rules import ReadDecision
from qjournal.namenode.retry_cache import RetryCache
from qjournal.sim.faults import HAFaults
from qjournal.sim.ha_workload import HAOptions, ha_replay_command, run_ha_seed
from qjournal.sim.linearizability import check_linearizable

STEPS = 40
#: the barrier-less run of test_cluster_sim (pauses, client partitions and shell fencing weighed up)
NO_BARRIER = HAOptions(seed=94, steps=STEPS, fencing="shell", observer=False,
                       faults=HAFaults.parse("nn_pause=3,pair_pause=2,client_nn_partition=2,nn_crash=0.2"))


def _caught(opts: HAOptions) -> None:
    r = run_ha_seed(opts)
    lin = check_linearizable(r.history)
    assert lin.verdict == "not_linearizable", f"replay: {ha_replay_command(opts)}: {lin.verdict}"
    print(f"caught: {ha_replay_command(opts)}\n{lin.failed[0].explain()}")


def _clean(opts: HAOptions) -> None:
    r = run_ha_seed(opts)
    assert check_linearizable(r.history).verdict == "linearizable", ha_replay_command(opts)


def test_c1_c2_reads_without_the_read_barrier(monkeypatch):
    async def no_barrier(self):
        return None
    monkeypatch.setattr(FSEditLog, "read_barrier", no_barrier)
    _caught(NO_BARRIER)
    monkeypatch.undo()
    _clean(NO_BARRIER)


def test_a_retry_cache_that_forgets(monkeypatch):
    """A retried write applied twice (the retry cache's bug class; test_cluster_sim's not_once seed)."""
    opts = HAOptions(seed=4, steps=STEPS)
    monkeypatch.setattr(RetryCache, "lookup_key", lambda self, *a, **k: (False, None))
    _caught(opts)
    monkeypatch.undo()
    _clean(opts)


@pytest.mark.parametrize("seed", [0, 2], ids=["msync-each-read", "session-only"])
def test_an_observer_that_ignores_the_client_state_id(monkeypatch, seed):
    """Issue 13's broken observer read rule, in both msync modes (seed 0: an msync before every read, so
    every read is linearizable; seed 2: only the session binds, and the client's own create is missing)."""
    opts = HAOptions(seed=seed, steps=STEPS, observer=True)
    monkeypatch.setattr(client_protocol, "observer_read_decision", lambda *a, **k: ReadDecision.SERVE)
    _caught(opts)
    monkeypatch.undo()
    _clean(opts)
