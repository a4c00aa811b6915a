"""Regression runs for the bugs the simulator found and their owners fixed (KB1-KB3, and the
tailer's read past an older writer's committed tail, reader invariant 6).

The bugs (docs/testing.md, "Bugs the simulator found") showed mostly under
takeover-heavy faults: every takeover isolates the old writer from a majority,
so segments written by two epochs with the same start, late recovery calls and
lagging nodes are common. These seeds ran into KB1, KB2 or KB3 before the
fixes; now every rule must hold on them.
"""

from __future__ import annotations

import pytest

from qjournal.sim.faults import FaultConfig
from qjournal.sim.workload import SimOptions, minimise, replay_command, run_seed

TAKEOVER_HEAVY = FaultConfig.parse("writer_takeover=0.2,isolate_old_writer=1.0,jn_crash_point=0.02,"
                                   "disk_full=0.01,read=0.02")

#: (seed, faults) that showed a bug before its fix
RUNS = [(3, FaultConfig()), (5, FaultConfig()), (7, FaultConfig()), (44, FaultConfig()),
        (105, FaultConfig()), (0, TAKEOVER_HEAVY), (1, TAKEOVER_HEAVY), (31, TAKEOVER_HEAVY),
        (48, TAKEOVER_HEAVY), (51, TAKEOVER_HEAVY), (91, TAKEOVER_HEAVY), (163, TAKEOVER_HEAVY),
        # the in-progress tailer read an older writer's tail cut at a newer writer's committed txid
        # (client/reader.py invariant 6)
        (1256, FaultConfig()), (1272, FaultConfig())]


@pytest.mark.parametrize("seed,faults", RUNS, ids=[f"{s}-{'heavy' if f is TAKEOVER_HEAVY else 'default'}"
                                                   for s, f in RUNS])
def test_formerly_failing_run_holds_every_rule(seed, faults):
    r = run_seed(SimOptions(seed=seed, steps=150, nodes=5 if seed % 4 == 3 else 3, faults=faults))
    if r.failed:
        small = minimise(r.options, r, budget=10)
        pytest.fail(f"{r.unexplained[0]}\nreplay: {replay_command(r.options)}\n{small.explain(context=25)}")
