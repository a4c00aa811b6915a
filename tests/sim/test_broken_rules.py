"""The simulator catches deliberately broken protocol rules within a bounded number of seeds.

Each test monkeypatches one real pure rule for that test only (pytest's
monkeypatch undoes it), runs seeds in order and expects a violation the
known-bug table does not explain. A test that never sees its violation fails,
so a simulator that has gone blind is noticed.
"""

from __future__ import annotations

from qjournal.errors import EpochError
from qjournal.protocol import jn_rules, recovery
from qjournal.sim.faults import FaultConfig
from qjournal.sim.workload import (SimOptions, minimise, replay_command, run_section_2_10_6_scenario,
                                   run_seed)

#: the bound: a broken rule must show within this many seeds
MAX_SEEDS = 40
#: writers taken over right after they start a segment, and crashing: segments written by two
#: epochs with the same start (seed 000 §2.10.6) become common enough to search for
SEGMENT_START_TAKEOVERS = FaultConfig.parse("takeover_at_segment_start=0.5,writer_crash=0.1")
MAX_SEEDS_RECOVERY = 100


def _first_violation(rules: set[str], faults: FaultConfig = FaultConfig(), max_seeds: int = MAX_SEEDS,
                     nodes: int | None = None):
    for seed in range(max_seeds):
        n = nodes or (5 if seed % 4 == 3 else 3)
        r = run_seed(SimOptions(seed=seed, steps=150, nodes=n, faults=faults))
        hits = [v for v in r.unexplained if v.rule in rules]
        if hits:
            print(f"caught at seed {seed}: {hits[0]}\nreplay: {replay_command(r.options)}")
            small = minimise(r.options, r, budget=8)
            # the minimised run still shows a violation and is no longer than the original
            assert small.unexplained and small.options.steps <= r.options.steps
            print(f"smallest failing run: {replay_command(small.options)}")
            return seed, hits
    return None, []


def test_journalnode_promising_an_epoch_equal_to_its_promise_is_caught(monkeypatch):
    def broken_check_new_epoch(jid: str, last_promised_epoch: int, epoch: int) -> None:
        if epoch < last_promised_epoch:  # BROKEN: the real rule refuses epoch == promise too
            raise EpochError(f"journal {jid}: Proposed epoch {epoch} < last promise "
                             f"{last_promised_epoch}", jid=jid)
    monkeypatch.setattr(jn_rules, "check_new_epoch", broken_check_new_epoch)
    seed, hits = _first_violation({"epoch_reused", "two_writers", "acked_lost", "read_lost",
                                   "finalize_disagree", "finalized_vs_log", "failure"})
    assert seed is not None, f"a JournalNode promising equal epochs went unnoticed in {MAX_SEEDS} seeds"


def _broken_compare(real):
    def broken_compare(a, b) -> int:
        sa, sb = a.segment_state, b.segment_state
        if sa is not None and sb is not None and sa.in_progress and sb.in_progress:
            # BROKEN (seed 000 §2.10.6): ignore max(accepted epoch, last writer epoch)
            return (sa.end_txid > sb.end_txid) - (sa.end_txid < sb.end_txid)
        return real(a, b)
    return broken_compare


def test_section_2_10_6_scenario_passes_with_the_real_rule_and_fails_with_longest_log(monkeypatch):
    ok = run_section_2_10_6_scenario(0)
    assert ok.violations == [], ok.explain()
    monkeypatch.setattr(recovery, "compare_recovery_responses",
                        _broken_compare(recovery.compare_recovery_responses))
    bad = run_section_2_10_6_scenario(0)
    assert [v.rule for v in bad.unexplained] == ["acked_lost"], bad.explain()
    assert "txid 4 acked to writer w2" in bad.unexplained[0].message


def test_recovery_choosing_the_longest_log_regardless_of_epochs_is_caught(monkeypatch):
    monkeypatch.setattr(recovery, "compare_recovery_responses",
                        _broken_compare(recovery.compare_recovery_responses))
    seed, hits = _first_violation({"acked_lost", "read_lost", "read_disagree", "invented",
                                   "finalize_disagree", "finalized_vs_log", "failure"},
                                  SEGMENT_START_TAKEOVERS, MAX_SEEDS_RECOVERY, nodes=3)
    assert seed is not None, f"longest-log recovery went unnoticed in {MAX_SEEDS_RECOVERY} seeds"


def test_a_syncer_that_skips_what_it_should_copy_is_caught(monkeypatch):
    """Issue 12: the end-of-run check (after two syncer rounds on the healed cluster, every known
    committed finalized segment is on every node) fails when the rule that picks what to copy is
    broken."""
    from qjournal.protocol import sync_rules
    real = sync_rules.plan_sync

    def broken_plan_sync(local, peer):
        plan = real(local, peer)
        return sync_rules.SyncPlan((), plan.conflicts, plan.skipped)   # BROKEN: copies nothing
    monkeypatch.setattr(sync_rules, "plan_sync", broken_plan_sync)
    seed, hits = _first_violation({"failure"})
    assert seed is not None, f"a syncer that copies nothing went unnoticed in {MAX_SEEDS} seeds"
    assert "NotHealed" in str(hits[0])


def test_a_journalnode_that_retries_a_failed_fsync_is_caught(monkeypatch):
    """PostgreSQL's fsync lesson (issue 28): after an fsync fails, the bytes it covered may be gone from the
    page cache's dirty set, so retrying it "succeeds" without writing them. A JournalNode storage that
    retries and goes on (acknowledging, finalizing) must be caught: the simulated disk drops those bytes
    (qjournal.sim.disk, "Failures") and a crash then loses them."""
    from qjournal.sim import disk
    sync = disk.SimJournalStorage.sync

    def retrying(self, name):
        try:
            sync(self, name)
        except OSError:
            sync(self, name)
    monkeypatch.setattr(disk.SimJournalStorage, "sync", retrying)
    faults = FaultConfig.parse("fsync_eio=0.2,jn_crash=0.1")
    for seed in range(MAX_SEEDS):
        r = run_seed(SimOptions(seed=seed, steps=150, nodes=3, faults=faults, disk_faults=True))
        if r.unexplained:
            print(f"caught at seed {seed}: {r.unexplained[0]}\nreplay: {replay_command(r.options)}")
            break
    else:
        raise AssertionError(f"a storage retrying failed fsyncs went unnoticed in {MAX_SEEDS} seeds")
    monkeypatch.undo()
    fixed = run_seed(r.options)
    assert not fixed.violations, fixed.explain()
