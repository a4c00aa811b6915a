"""What every seeded simulator run shares: its execution, its record of faults, its checked result, its replay line.

Why: the journal's configuration (:mod:`qjournal.sim.workload`) and the whole cluster's
(:mod:`qjournal.sim.ha_workload`) differ in what they run, not in how a run is driven and
judged. Both start from a seed on the virtual-time loop, count and record each fault the
same way (``fault:<kind>`` in the soak's counts, a ``Fault`` event in the history), inject
the same disk faults into their JournalNodes' simulated disks, are judged by the one checker
(:func:`qjournal.sim.checker.check`, then the known bugs' attribution), and print one
command that replays them. That is written here once; a new fault kind or a new count is
added once for both.

* :class:`Recorder`: the history, the counts, ``fault`` and ``later`` of every fault schedule
  (the real-process chaos sessions' too).
* :class:`SeededRun`: the base of a run (the loop's generator, the history, the stats,
  ``fault``, a heal scheduled ``later``, the disk faults of a director step).
* :func:`execute`: run a :class:`SeededRun` to its end on a fresh loop, turn a stalled,
  runaway or broken simulation into a ``Failure`` of the run, check the history.
* :class:`RunResult`: the outcome (violations, unexplained ones, counts, explanation).
* :func:`replay_command`: the one-line command of a run's options.

Invariants:

1. The disk faults draw from a generator of their own, seeded by the run's seed
   (:func:`disk_fault_rng`), never from the loop's, and only half the runs have them
   (:func:`disk_faults_of`): a run in which no disk fault fires draws from the loop's
   generator exactly what it drew before the disk faults existed (earlier regression
   seeds replay the same story).
2. ``execute`` never raises for what the simulated world did: a stall, a limit, an
   ``InvariantViolation`` escaping the run or a fatal task are ``Failure`` events the
   checker reports.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from qjournal.errors import InvariantViolation
from qjournal.sim.checker import check
from qjournal.sim.faults import DISK_KINDS, FaultWeights
from qjournal.sim.history import Failure, Fault, History, Violation
from qjournal.sim.known_bugs import attribute
from qjournal.sim.loop import SimulationLimitExceeded, SimulationStalled, run_simulation
from qjournal.util.tasks import set_fatal_handler

__all__ = ["Recorder", "SeededRun", "RunResult", "execute", "replay_command", "disk_fault_rng", "disk_faults_of",
           "DISK_FAULT_RUN_SHARE"]

#: the share of runs whose JournalNodes' disks fail (invariant 1: the others draw what they drew before)
DISK_FAULT_RUN_SHARE = 0.5


def disk_faults_of(seed: int, override: bool | None) -> bool:
    """Whether a run's disks fail: ``override`` when given, else drawn from the seed by a generator of its own."""
    if override is not None:
        return override
    return random.Random(f"qjournal-sim-disk-run:{seed}").random() < DISK_FAULT_RUN_SHARE


def disk_fault_rng(seed: int) -> random.Random:
    """The generator of a run's disk faults (invariant 1); a string seed is the same in every process."""
    return random.Random(f"qjournal-sim-disk:{seed}")


def replay_command(subcommand: str, flags: Iterable[tuple[str, Any]], faults: FaultWeights) -> str:
    """``python -m qjournal.sim [subcommand] --flag value ... [--faults k=v,...]``.

    Args:
        subcommand: "" for the journal's configuration, ``cluster`` for the whole cluster's.
        flags: ``(flag, value)`` in order; a value of None is left out (the seed chooses it).
        faults: the run's fault table; only what differs from the defaults is named.
    """
    cmd = "python -m qjournal.sim" + (f" {subcommand}" if subcommand else "")
    for flag, value in flags:
        if value is not None:
            cmd += f" --{flag} {value}"
    changed = faults.changed()
    if changed:
        cmd += " --faults " + ",".join(changed)
    return cmd


class Recorder:
    """What every fault schedule keeps, simulated or real (:class:`SeededRun`,
    :class:`qjournal.chaos.driver.ChaosSession`): the history, the counts, each fault counted and recorded
    the same way, and the heals scheduled for later.

    Args:
        history: where the run's events go (its clock is the run's).
    """

    def __init__(self, history: History) -> None:
        self.history = history
        #: counts by key (``fault:<kind>``, ...), and a few labels (the soak keeps the numbers)
        self.stats: dict[str, Any] = {}
        #: scheduled heals (an end phase cancels them and heals everything itself)
        self.tasks: list[asyncio.Task] = []

    def stat(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    def fault(self, kind: str, detail: str = "") -> None:
        """Count a fault (``fault:<kind>`` in the soak's counts) and record it in the history."""
        self.stat(f"fault:{kind}")
        self.history.add(Fault(kind, detail))

    def later(self, delay_s: float, fn: Callable[[], Any]) -> None:
        """Call ``fn`` (a plain or a coroutine function) ``delay_s`` seconds from now (the loop's): a heal."""
        async def run() -> None:
            await asyncio.sleep(delay_s)
            r = fn()
            if asyncio.iscoroutine(r):
                await r
        self.tasks.append(asyncio.ensure_future(run()))

    async def cancel_scheduled(self) -> None:
        """Cancel every heal not yet run."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks = []


class SeededRun(Recorder):
    """The base of one run on the virtual-time loop (module docstring).

    Subclasses define ``async main()`` and record their story in :attr:`history`.
    """

    def __init__(self, seed: int, disk_faults: FaultWeights | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self.rng: random.Random = self.loop.rng
        super().__init__(History(clock=self.loop.time))
        #: ``(kind, probability per director step)`` of the disk faults; their own generator (invariant 1)
        self.disk_faults = [(k, getattr(disk_faults, k, 0.0)) for k in DISK_KINDS] if disk_faults else []
        self.disk_rng = disk_fault_rng(seed)

    def inject_disk_faults(self, disks: dict[str, Any]) -> None:
        """One director step's disk faults: each kind, with its probability, arms one failure on the
        simulated disk of a node drawn from ``disks`` (name -> :class:`~qjournal.sim.disk.SimFS`), at its
        next or one of its next few passes through the operation (:meth:`SimFS.fail`)."""
        r = self.disk_rng
        names = sorted(disks)
        for kind, p in self.disk_faults:
            if p > 0 and names and r.random() < p:
                name = r.choice(names)
                after = r.randrange(3)
                disks[name].fail(kind, after)
                self.fault(kind, f"{name} after {after}")


@dataclass
class RunResult:
    """The outcome of one run; :meth:`summary` is the configuration's (a subclass's)."""

    options: Any
    history: History
    violations: list[Violation]
    stats: dict[str, Any]
    virtual_s: float = 0.0
    unexplained: list[Violation] = field(default_factory=list)
    known: dict[str, int] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """Whether the run shows a violation not attributed to a known bug."""
        return bool(self.unexplained)

    def counts(self) -> dict[str, int]:
        """Faults injected by kind plus run statistics (for soak totals; numbers only)."""
        out = {k: v for k, v in self.stats.items() if isinstance(v, int)}
        out["runs"] = 1
        out["violations"] = len(self.violations)
        out["violations_unexplained"] = len(self.unexplained)
        out["runs_with_violations"] = 1 if self.violations else 0
        out["runs_with_unexplained_violations"] = 1 if self.unexplained else 0
        for bug, n in self.known.items():
            out[f"known_bug:{bug}"] = n
            out[f"runs_with_known_bug:{bug}"] = 1
        return out

    def summary(self) -> str:
        raise NotImplementedError

    def explain(self, context: int = 40) -> str:
        """The violations and the part of the history that shows them (faults, each violation's events,
        and ``context`` events before the last one)."""
        lines = [self.summary(), f"replay: {self.options.replay_command()}"]
        for v in self.violations:
            lines.append(f"{'VIOLATION' if v in self.unexplained else 'KNOWN-BUG'} {v}")
        seqs = [s for v in self.violations for s in v.seqs]
        if seqs:
            last = max(seqs)
            shown = sorted(set(range(max(0, last - context), last + 1)) | set(seqs)
                           | {e.seq for e in self.history.of(Fault) if e.seq <= last})
            lines.append(f"history (faults, the events of each violation, and the {context} events before "
                         f"the last one):")
            lines.append(self.history.format(only=shown))
        return "\n".join(lines)


def execute(seed: int, make_run: Callable[[], SeededRun], *, max_virtual_time_s: float,
            max_callbacks: int | None = None) -> tuple[History, dict[str, Any], list[Violation], list[Violation],
                                                       dict[str, int], float]:
    """Run ``make_run()``'s ``main()`` on a fresh loop seeded with ``seed`` and check its history.

    The daemons' logs go nowhere (the history is the run's record; a captured log record with its
    traceback would also keep the simulated world alive after the run). The world is garbage once the
    run is dropped: it is collected here, once, not wherever the collector runs next (see
    :func:`qjournal.sim.loop.run_simulation`), and that collection walks the run's objects only (what
    was alive before the run is frozen meanwhile, ``gc.freeze``).

    Returns:
        ``(history, stats, violations, unexplained, known bug counts, virtual seconds)``;
        ``stats["wall_ms"]`` is the run's wall time.
    """
    holder: dict[str, SeededRun] = {}

    async def main() -> None:
        run = make_run()
        holder["run"] = run
        await run.main()

    def fatal_in_a_process(message: str, exc: BaseException) -> None:
        # a simulated daemon met a broken invariant (or a task nobody restarts): a violation of the run
        holder["run"].history.add(Failure("fatal", type(exc).__name__, f"{message}: {exc}"))

    previous = set_fatal_handler(fatal_in_a_process)
    log_level = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    t0 = time.monotonic()
    kwargs: dict[str, Any] = {"max_virtual_time_s": max_virtual_time_s}
    if max_callbacks is not None:
        kwargs["max_callbacks"] = max_callbacks
    # What is alive now outlives the run (modules, caches, the soak's totals): frozen, the collections
    # of the run, the last one included, walk the run's own objects only, not the whole heap again.
    gc.freeze()
    try:
        try:
            run_simulation(main, seed, collect=False, **kwargs)
        except (SimulationStalled, SimulationLimitExceeded, InvariantViolation) as e:
            if "run" not in holder:
                raise
            holder["run"].history.add(Failure("simulator", type(e).__name__, str(e)))
        finally:
            logging.disable(log_level)
            set_fatal_handler(previous)
        run = holder.pop("run")
        history, stats = run.history, run.stats
        history.freeze()
        del run
        # A killed process's coroutines that never ran (a ``wait_for(event.wait())`` built just before the
        # kill) are finalized with the world: that is the kill, not a bug, so their "never awaited" warning
        # is not shown.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="coroutine .* was never awaited", category=RuntimeWarning)
            gc.collect()
    finally:
        gc.unfreeze()
    stats["wall_ms"] = int((time.monotonic() - t0) * 1000)
    violations = check(history)
    unexplained, known = attribute(history, violations)
    events = history.events
    virtual = events[-1].time - events[0].time if events else 0.0
    return history, stats, violations, unexplained, known, virtual
