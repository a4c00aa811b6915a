"""Bugs the simulator found in other parts, pinned until they are fixed.

Each test searches a bounded window of seeds for a run showing the bug (the
attribution rules are in qjournal.sim.known_bugs) and asserts that none does.
They are strict xfails: today each bug shows, so the test xfails and prints
the replay command; once the owner fixes the bug, the assertion holds, the
xfail turns into a failure (XPASS strict), and the entry in known_bugs.py and
here should be deleted, which makes tests/sim/test_simulation.py judge those
runs strictly again.
"""

from __future__ import annotations

import pytest

from qjournal.sim.faults import FaultConfig
from qjournal.sim.known_bugs import KNOWN_BUGS
from qjournal.sim.workload import SimOptions, replay_command, run_seed

TAKEOVER_HEAVY = FaultConfig.parse("writer_takeover=0.2,isolate_old_writer=1.0,jn_crash_point=0.02,"
                                   "disk_full=0.01,read=0.02")


def _search(bug: str, seeds: range, faults: FaultConfig = FaultConfig()) -> str | None:
    for seed in seeds:
        r = run_seed(SimOptions(seed=seed, steps=150, nodes=5 if seed % 4 == 3 else 3, faults=faults))
        if r.known.get(bug):
            return f"{bug} ({KNOWN_BUGS[bug]}) shows at: {replay_command(r.options)}\n{r.explain(context=10)}"
    return None


@pytest.mark.xfail(strict=True, reason="KB1: finalize/accept over unsynced lagging batches "
                                       "(journalnode/journal.py)")
def test_kb1_finalize_of_unsynced_lagging_batches():
    found = _search("KB1", range(0, 60))
    print(found)
    assert found is None


@pytest.mark.xfail(strict=True, reason="KB2: accept_recovery compares a newer segment's committed "
                                       "txid with the old segment (journalnode/journal.py)")
def test_kb2_late_accept_recovery_committed_check():
    found = _search("KB2", range(40, 160))
    print(found)
    assert found is None


@pytest.mark.xfail(strict=True, reason="KB3: accept_recovery keeps a same-length copy with other "
                                       "contents (journalnode/journal.py, protocol SegmentState)")
def test_kb3_accept_recovery_keeps_same_length_copy():
    found = _search("KB3", range(45, 165), TAKEOVER_HEAVY)
    print(found)
    assert found is None
