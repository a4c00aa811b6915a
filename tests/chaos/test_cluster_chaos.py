"""Whole-cluster chaos: the real HA cluster's processes under a seeded fault schedule.

Slow (real processes, ~45 s). The session is bounded, judged by the whole-cluster checker
(acked operations kept exactly once, reads never lost or stale, progress within the liveness bound,
every controller of a healthy NameNode in the election), and must leave nothing behind.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from qjournal.chaos.cluster import run_cluster_chaos
from qjournal.sim.history import ControllerState, NamespaceState, NsRead, OpAcked, Progress


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cluster_chaos_session_holds_every_rule_and_cleans_up(tmp_path):
    r = asyncio.run(run_cluster_chaos(duration_s=14.0, seed=5, workdir=str(tmp_path)))
    print(r.summary())
    for n in r.notes:
        print("note:", n)
    assert r.violations == [], "\n".join(str(v) for v in r.violations) + "\n" + r.history.format(limit=80)
    # not vacuous: operations were acknowledged and read, faults happened, the end was observed
    assert len(r.history.of(OpAcked)) > 20 and r.history.of(NsRead)
    assert sum(v for k, v in r.counts.items() if k.startswith("fault:")) > 3
    assert r.history.of(Progress) and r.history.of(NamespaceState)
    assert len(r.history.of(ControllerState)) == 2
    # clean: no process of this session is left, no mount either
    with open("/proc/mounts") as f:
        assert str(tmp_path) not in f.read()
    for line in os.popen("ps -eo args").read().splitlines():
        assert str(tmp_path) not in line, f"left running: {line}"
