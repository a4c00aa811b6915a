"""The whole HA cluster in the deterministic simulator: a bounded slice of seeds, replay, and proof
that the checker is not blind (issue 11), with and without the observer NameNode (issue 13).

A failing seed prints its replay command: ``python -m qjournal.sim cluster --seed N --steps 40``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from qjournal.ha.elector import ActiveStandbyElector
from qjournal.ha.health_monitor import HealthMonitor
from qjournal.namenode import client_protocol
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.observer_rules import ReadDecision
from qjournal.namenode.retry_cache import RetryCache
from qjournal.sim.history import Fault, NamespaceState, NsRead
from qjournal.sim.faults import HAFaults
from qjournal.sim.ha_workload import HAOptions, ha_replay_command, observer_setup, run_ha_seed

STEPS = 40
#: the slice of make test (the soak runs 10,000: make soak); 120 since the suite neared its 10-minute budget
#: (9 min 13-38 s of tests on 2026-11-26; this slice took 49 s of it at 200 seeds, 44 s at 150; 193 s on the
#: 2-core CI; 52 s and 119 s here on 2026-11-28 after the per-seed cuts of docs/testing.md, load average 2-7
#: and 5-6 from other sessions)
SLICE_SEEDS = 120
#: a deliberately broken rule must show within this many seeds
MAX_SEEDS_BROKEN = 40
#: seeds the 10,000-seed soak once failed on, kept as regressions (docs/testing.md, bugs C4-C6)
REGRESSION_SEEDS = {
    529: "C4: a stale in-progress copy read past the new writer's segment start",
    4090: "C5: an image saved while leaving active, labelled with a txid older than its contents",
    2156: "C6: a deposed active refused a rename from its stale namespace, without the read barrier",
}
#: observer runs kept as regressions: both msync modes, every read wait, faults on the observer; 1711: a
#: read the observer answered through the client's failover path was judged as an active's read. (6 took
#: 3's place when the NameNode began sending a batch from the caller's step: 3's interleavings no longer
#: had the observer refuse a read after its wait.)
OBSERVER_SEEDS = (0, 1, 6, 1711)
#: a broken observer read rule must show within this many seeds, in both msync modes (seeds 0 and 2)
MAX_SEEDS_OBSERVER_BROKEN = 5


@pytest.mark.timeout(900)   # the bound of its own soak command below, not pytest's default 300 s: the slice's
# CPU work is fixed, and in a parallel run on a shared machine the two cores are shared with the other workers
def test_whole_cluster_seeds_hold_every_rule(tmp_path):
    """The slice, through the soak command itself: two fresh worker processes (both cores, and none of
    the test process's accumulated heap for the collector to walk), each seed under the soak's
    wall-clock watchdog; a failing seed is printed with its replay command."""
    report = tmp_path / "slice.json"
    r = subprocess.run([sys.executable, "-m", "qjournal.sim", "cluster-soak", "--seeds", str(SLICE_SEEDS),
                        "--steps", str(STEPS), "--jobs", "2", "--report", str(report)],
                       capture_output=True, text=True, timeout=900)
    summary = json.loads(report.read_text())
    assert summary["seeds_run"] == SLICE_SEEDS and not summary["partial"], r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0 and summary["failing_seeds"] == [], r.stdout[-6000:] + r.stderr[-2000:]
    assert summary["counts"]["op_acked"] > 1000   # not vacuous: the clients did work


@pytest.mark.parametrize("seed", sorted(REGRESSION_SEEDS), ids=lambda s: f"{s}-{REGRESSION_SEEDS[s][:2]}")
def test_soak_regression_seeds_hold_every_rule(seed):
    # without the observer: the run the soak found the bug in (observers came later)
    r = run_ha_seed(HAOptions(seed=seed, steps=STEPS, observer=False))
    assert not r.violations, (f"{REGRESSION_SEEDS[seed]}\n{r.summary()}\n  replay: {ha_replay_command(r.options)}\n  "
                              + "\n  ".join(str(v) for v in r.violations[:3]))


def test_a_seed_replays_exactly():
    a = run_ha_seed(HAOptions(seed=3, steps=20))
    b = run_ha_seed(HAOptions(seed=3, steps=20))
    assert a.history.format() == b.history.format()
    assert len(a.history) > 100


def _first_caught(rules: set[str], *, known: tuple[int, ...] = (), **opts) -> tuple[int | None, list]:
    """The first seed whose run breaks one of ``rules``: the ``known`` seeds first (the ones that
    caught it last time we looked; a change of interleavings moves them), then 0, 1, 2, ... up to
    :data:`MAX_SEEDS_BROKEN`."""
    for seed in dict.fromkeys([*known, *range(MAX_SEEDS_BROKEN)]):
        r = run_ha_seed(HAOptions(seed=seed, steps=STEPS, **opts))
        hits = [v for v in r.violations if v.rule in rules]
        if hits:
            print(f"caught at seed {seed}: {hits[0]}\nreplay: {ha_replay_command(r.options)}")
            return seed, hits
    return None, []


def test_reads_without_the_read_barrier_are_caught(monkeypatch):
    async def no_barrier(self):
        return None
    monkeypatch.setattr(FSEditLog, "read_barrier", no_barrier)
    # A stale read needs a deposed active that still answers (it was paused, or cut off, through
    # the takeover; shell fencing leaves it running) and a client sent to it after a write on the
    # new active: rare under the default mix (2 of 60 seeds before the edit caches, fewer after),
    # so this run weighs those faults up (then 2 of seeds 40-239 after the NameNode began sending a
    # batch from the caller's step, which moved the interleavings: seed 7 caught it before).
    seed, _ = _first_caught({"read_lost", "read_stale"}, known=(94, 104), fencing="shell", observer=False, faults=HAFaults.parse(
        "nn_pause=3,pair_pause=2,client_nn_partition=2,nn_crash=0.2"))
    assert seed is not None, f"reads of unsynced state / of a fenced active went unnoticed in {MAX_SEEDS_BROKEN} seeds"


def test_a_retry_cache_that_forgets_is_caught(monkeypatch):
    monkeypatch.setattr(RetryCache, "lookup_key", lambda self, *a, **k: (False, None))  # what lookup calls too
    seed, _ = _first_caught({"not_once"}, known=(4,))
    assert seed is not None, f"retries applied twice went unnoticed in {MAX_SEEDS_BROKEN} seeds"


def test_the_stuck_controller_before_the_fix_is_caught(monkeypatch):
    """Issue 11's stuck controller, reproduced from a seed: the elector's old quit_election (a
    ZooKeeper error escapes it) and the health monitor's old unwatched task. The controller of a
    healthy NameNode stays out of the election for ever. (With only the old quit_election, the
    watched task turns the error into a failed controller that its supervisor restarts: no
    violation; with the fix, the error never escapes.)"""
    async def old_release_or_defer(self, delete_breadcrumb):
        await self._release(delete_breadcrumb=delete_breadcrumb)

    def old_start(self):
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"health-{self.name}")
    monkeypatch.setattr(ActiveStandbyElector, "_release_or_defer", old_release_or_defer)
    monkeypatch.setattr(HealthMonitor, "start", old_start)
    seed, hits = _first_caught({"controller_out", "no_progress"}, known=(29,))
    assert seed is not None, f"the stuck controller went unnoticed in {MAX_SEEDS_BROKEN} seeds"
    monkeypatch.undo()
    fixed = run_ha_seed(HAOptions(seed=seed, steps=STEPS))
    assert fixed.violations == [], fixed.explain()


def test_observer_seeds_hold_every_rule():
    """Runs with the observer nn3 hold every rule, and the observer took part: it answered reads and
    refused some after its bounded wait (the client then read from the active), every fault kind that
    reaches it did (crash, pause, cut from the journal, cut from a client), and its final namespace was
    judged as a standby's. The seeds cover both msync modes and every read wait."""
    setups = [observer_setup(HAOptions(seed=s, observer=True)) for s in OBSERVER_SEEDS]
    assert {x.msync_each_read for x in setups} == {True, False}
    assert len({x.read_wait_ms for x in setups}) == 3
    kinds_on_observer = set()
    for seed in OBSERVER_SEEDS:
        # the stories these seeds were chosen for (disk failures would change them: they have their own seeds)
        r = run_ha_seed(HAOptions(seed=seed, steps=STEPS, observer=True, disk_faults=False))
        assert not r.violations, f"replay: {ha_replay_command(r.options)}\n" + r.explain()
        reads = r.history.of(NsRead)
        assert r.stats["reads_by_observer"] > 0 and any(e.nn == "nn3" for e in reads), r.summary()
        assert r.stats["observer_retries"] > 0 and any(e.nn != "nn3" for e in reads), r.summary()
        assert any(e.nn == "nn3" and e.role == "observer" for e in r.history.of(NamespaceState)), r.summary()
        assert r.stats["observer_transitions"] >= 1
        kinds_on_observer |= {f.kind for f in r.history.of(Fault) if "nn3" in f.detail}
    # (the wall-clock jumps of issue 28 reach the observer's machine too, in the runs drawn to have them)
    assert kinds_on_observer - {"clock_jump"} == {"nn_crash", "nn_pause", "nn_jn_partition", "client_nn_partition"}


def test_an_observer_that_ignores_the_client_state_id_is_caught(monkeypatch):
    """The observer read rule broken: every read served at once, whatever the client's state id
    (an observer behind the client's own write answers it). The checker must see read_stale in both
    msync modes (seed 0 msyncs before every read, seed 2 only before the first: then the client's own
    create binds the read), and the same seeds pass with the real rule."""
    monkeypatch.setattr(client_protocol, "observer_read_decision", lambda *a, **k: ReadDecision.SERVE)
    caught: dict[bool, int] = {}   # msync_each_read -> the first seed that showed it
    for seed in range(MAX_SEEDS_OBSERVER_BROKEN):
        opts = HAOptions(seed=seed, steps=STEPS, observer=True)
        mode = observer_setup(opts).msync_each_read
        if mode in caught:
            continue
        r = run_ha_seed(opts)
        hits = [v for v in r.violations if v.rule == "read_stale"]
        if hits:
            print(f"caught at seed {seed} (msync each read: {mode}): {hits[0]}\nreplay: {ha_replay_command(opts)}")
            caught[mode] = seed
        if len(caught) == 2:
            break
    assert sorted(caught) == [False, True], (f"an observer ignoring state ids went unnoticed in "
                                             f"{MAX_SEEDS_OBSERVER_BROKEN} seeds: caught only {caught}")
    monkeypatch.undo()
    for seed in sorted(caught.values()):
        fixed = run_ha_seed(HAOptions(seed=seed, steps=STEPS, observer=True))
        assert fixed.violations == [], fixed.explain()
