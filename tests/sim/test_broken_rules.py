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
from qjournal.sim.workload import SimOptions, minimise, replay_command, run_seed

#: the bound: a broken rule must show within this many seeds
MAX_SEEDS = 40
#: takeover-heavy faults: every takeover isolates the old writer from a majority, so
#: segments written by two epochs with the same start (seed 000 §2.10.6) are common
TAKEOVER_HEAVY = FaultConfig.parse("writer_takeover=0.2,isolate_old_writer=1.0,jn_crash_point=0.02,"
                                   "disk_full=0.01,read=0.02")


def _first_violation(rules: set[str], faults: FaultConfig = FaultConfig()):
    for seed in range(MAX_SEEDS):
        r = run_seed(SimOptions(seed=seed, steps=150, nodes=5 if seed % 4 == 3 else 3, faults=faults))
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


def test_recovery_choosing_the_longest_log_regardless_of_epochs_is_caught(monkeypatch):
    real = recovery.compare_recovery_responses

    def broken_compare(a, b) -> int:
        sa, sb = a.segment_state, b.segment_state
        if sa is not None and sb is not None and sa.in_progress and sb.in_progress:
            # BROKEN (seed 000 §2.10.6): ignore max(accepted epoch, last writer epoch)
            return (sa.end_txid > sb.end_txid) - (sa.end_txid < sb.end_txid)
        return real(a, b)
    monkeypatch.setattr(recovery, "compare_recovery_responses", broken_compare)
    seed, hits = _first_violation({"acked_lost", "read_lost", "read_disagree", "invented",
                                   "finalize_disagree", "finalized_vs_log", "failure"}, TAKEOVER_HEAVY)
    assert seed is not None, f"longest-log recovery went unnoticed in {MAX_SEEDS} seeds"
