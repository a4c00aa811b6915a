"""The one driver of every real-process chaos session: a seeded fault schedule, a bounded run, one checked result.

Why one driver: the journal's session (:mod:`qjournal.chaos.harness`: JournalNodes and
``qjournal log`` writers) and the whole cluster's (:mod:`qjournal.chaos.cluster`: ZooKeeper,
JournalNodes, NameNodes, ZKFCs and namespace clients) differ in what they start and which
faults they inject, not in how a session is driven, recorded, judged and reported. That is
written here once; what differs is data (:class:`ChaosProfile`: the fault kinds and their
weights, the pause between steps, the checker's time budget) and the session's own
``setup``, ``step`` and ``end``.

A session (:class:`ChaosSession`): ``setup()`` starts the processes; then, until
``duration_s`` of wall time has passed, the driver waits a drawn pause and calls
``step(kind)`` with a kind drawn by weight (:func:`qjournal.sim.faults.choose`, the one draw
of every fault schedule); ``end()`` heals everything and records the end state;
``cleanup()`` runs in every case. :func:`run_session` checks the history with
:func:`qjournal.sim.checker.check`; :func:`main_session` prints the summary, the notes and
any violation with its events (``python -m qjournal.chaos``).

Invariants:

1. Bounded: the faulty phase stops after ``duration_s``; every wait of a session has a deadline.
2. Clean: ``cleanup()`` runs in ``finally`` (also on Ctrl-C) and a temporary directory the
   driver made is removed.
3. The schedule is drawn from ``random.Random(seed)`` in call order: the same seed draws the
   same kinds and pauses (what the processes do in between is not deterministic).
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from qjournal.sim.checker import check
from qjournal.sim.faults import choose
from qjournal.sim.history import History, Violation
from qjournal.sim.seeded_run import Recorder

__all__ = ["ChaosProfile", "ChaosSession", "ChaosResult", "run_session", "main_session"]


@dataclass(frozen=True)
class ChaosProfile:
    """What differs between the chaos configurations, as data.

    Attributes:
        label: the summary's first words (``chaos``, ``cluster chaos``).
        workdir_prefix: of the temporary directory when none is given.
        weights: ``(kind, weight)`` of the fault schedule, in a fixed order.
        step_s: the pause before each step is drawn uniformly in this range (seconds).
        check_budget_s: wall time the linearizability search may take (None: no bound).
    """

    label: str
    workdir_prefix: str
    weights: tuple[tuple[str, float], ...]
    step_s: tuple[float, float]
    check_budget_s: float | None = None


@dataclass
class ChaosResult:
    """Outcome of a chaos session."""

    profile: ChaosProfile
    seed: int
    duration_s: float
    history: History
    violations: list[Violation]
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: the session's own figures for the summary (``acked_txid``, ``acked_ops``, ...)
    figures: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        faults = {k[len("fault:"):]: v for k, v in sorted(self.counts.items()) if k.startswith("fault:")}
        figures = " ".join(f"{k}={v}" for k, v in self.figures.items())
        return (f"{self.profile.label} seed={self.seed} duration={self.duration_s:.0f}s {figures} "
                f"faults={faults} violations={len(self.violations)}")


class ChaosSession(Recorder):
    """The base of a session (module docstring); subclasses set :attr:`PROFILE` and the hooks. Its counts,
    faults and heals are the simulator's (:class:`~qjournal.sim.seeded_run.Recorder`), on the wall clock."""

    PROFILE: ChaosProfile

    def __init__(self, seed: int, duration_s: float, workdir: str) -> None:
        self.t0 = time.monotonic()
        super().__init__(History(clock=lambda: time.monotonic() - self.t0))
        self.rng = random.Random(seed)
        self.seed = seed
        self.duration_s = duration_s
        self.workdir = workdir
        self.notes: list[str] = []

    async def run(self) -> None:
        """Set up, step through the schedule for ``duration_s``, end (invariants 1 and 3)."""
        await self.setup()
        p = self.PROFILE
        deadline = time.monotonic() + self.duration_s
        while time.monotonic() < deadline:
            await asyncio.sleep(self.rng.uniform(*p.step_s))
            await self.step(choose(self.rng, p.weights))
        await self.end()

    # -- the session's own part ------------------------------------------------------------------
    async def setup(self) -> None:
        raise NotImplementedError

    async def step(self, kind: str) -> None:
        raise NotImplementedError

    async def end(self) -> None:
        raise NotImplementedError

    async def cleanup(self) -> None:
        raise NotImplementedError

    def figures(self) -> dict[str, Any]:
        """The summary's figures of this session."""
        return {}


async def run_session(make: Callable[[str], ChaosSession], profile: ChaosProfile, seed: int, duration_s: float,
                      workdir: str | None = None) -> ChaosResult:
    """Run one session (``make(workdir)``) and check its history.

    Args:
        make: builds the session in its working directory.
        profile: the session's profile (its temporary directory's prefix, its check budget).
        seed, duration_s: the schedule's seed and the faulty phase's length (for the result).
        workdir: keep the files there (default: a temporary directory removed at the end).
    """
    own = workdir is None
    wd = tempfile.mkdtemp(prefix=profile.workdir_prefix) if own else workdir
    os.makedirs(wd, exist_ok=True)
    session = make(wd)
    try:
        await session.run()
    finally:
        await session.cleanup()
        if own:
            shutil.rmtree(wd, ignore_errors=True)
    if profile.check_budget_s is None:
        violations = check(session.history)
    else:
        violations = check(session.history, clock=time.monotonic, budget_s=profile.check_budget_s)
    counts = {k: v for k, v in sorted(session.stats.items()) if isinstance(v, int)}
    return ChaosResult(profile, seed, duration_s, session.history, violations, counts, session.notes,
                       session.figures())


def main_session(result: ChaosResult) -> int:
    """Print the summary, the notes and every violation with its events; 1 if any (the CLI's exit status)."""
    print(result.summary())
    for n in result.notes:
        print(f"note: {n}")
    for v in result.violations:
        print(f"VIOLATION {v}")
    if result.violations:
        seqs = sorted({s for v in result.violations for s in v.seqs})
        print(result.history.format(only=seqs))
    return 1 if result.violations else 0
