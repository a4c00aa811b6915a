"""The real-process chaos harness: real JournalNodes and writers under a seeded fault schedule.

Slow (real processes, ~30-60 s). The session is bounded, checks the history
with the same checker as the simulator, and must leave nothing behind.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from qjournal.chaos.harness import run_chaos
from qjournal.sim.history import Acked, FinalLog, NodeSegment


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chaos_session_holds_every_rule_and_cleans_up(tmp_path):
    r = asyncio.run(run_chaos(duration_s=10.0, seed=11, nodes=3, workdir=str(tmp_path)))
    print(r.summary())
    for n in r.notes:
        print("note:", n)
    assert r.violations == [], "\n".join(str(v) for v in r.violations) + "\n" + r.history.format(limit=60)
    # not vacuous: writes were acknowledged, the final read saw them, disks were inspected
    acks = r.history.of(Acked)
    assert acks, "no write was acknowledged during the chaos session"
    [final] = r.history.of(FinalLog)
    assert final.first_txid + len(final.records) - 1 >= max(a.txid for a in acks)
    assert r.history.of(NodeSegment)
    assert sum(v for k, v in r.counts.items() if k.startswith("fault:")) > 0
    # clean: no JournalNode or writer process of this session is left, no mount either
    with open("/proc/mounts") as f:
        assert str(tmp_path) not in f.read()
    for line in os.popen("ps -eo args").read().splitlines():
        assert str(tmp_path) not in line, f"left running: {line}"
