"""The pause monitor of a daemon: how long its event loop stalled, and each pause of the garbage collector.

Why: every RPC a daemon serves waits while its one event loop is held, by the cyclic garbage collector (a
stop-the-world pass over the tracked objects of the generations it collects) or by any long synchronous step.
Hadoop's ``JvmPauseMonitor`` logs such pauses and its ``JvmMetrics`` count the collector's work; this is the
same for a Python daemon, so that an operator (and ``bench/peers/state_bench.py``) sees them:

* the collector: a ``gc.callbacks`` hook times every collection (its generation, its duration, the objects
  it freed) and counts them per generation;
* the loop: a timer armed every ``probe_interval_ms`` measures how late it runs; the lateness is the time the
  loop could not run anything else (a collection, a long callback, the process not scheduled).

A pause at least ``info_threshold_ms`` long is logged (at warning level from ``warn_threshold_ms``), from the
loop, never from inside the collector's callback. The monitor is started by the daemon's command (never in
the simulator: a timer armed for ever would keep its virtual-time loop from idling).

Invariants:

1. The collector's callback only reads the clock and appends to bounded structures: no logging, no I/O,
   no allocation beyond one small tuple per collection.
2. ``recent`` holds at most ``RECENT_MAX`` pauses, newest last.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

#: pauses kept for :attr:`PauseMonitor.recent` (invariant 2)
RECENT_MAX = 1000
#: the loop probe's period: a stall shorter than this may be seen only in part
DEFAULT_PROBE_INTERVAL_MS = 50


class PauseMonitor:
    """The collector's pauses and the event loop's stalls of this process (module docstring).

    Args:
        info_threshold_ms: log a pause at least this long (``jvm.pause.info-threshold.ms``).
        warn_threshold_ms: log it as a warning from this long (``jvm.pause.warn-threshold.ms``).
        probe_interval_ms: the loop probe's period.
        clock: a monotonic clock in seconds.
    """

    def __init__(self, info_threshold_ms: float, warn_threshold_ms: float,
                 probe_interval_ms: float = DEFAULT_PROBE_INTERVAL_MS,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.info_threshold_ms = float(info_threshold_ms)
        self.warn_threshold_ms = float(warn_threshold_ms)
        self.probe_interval_s = probe_interval_ms / 1000.0
        self.clock = clock
        #: collections and their total time per generation
        self.gc_count = [0, 0, 0]
        self.gc_time_ms = [0.0, 0.0, 0.0]
        self.gc_max_ms = [0.0, 0.0, 0.0]
        #: pauses at least info_threshold_ms long, collector's and loop's alike
        self.info_exceeded = 0
        self.warn_exceeded = 0
        #: the loop's longest lateness, and the sum of lateness beyond one probe period (JvmMetrics'
        #: GcTotalExtraSleepTime)
        self.loop_stall_max_ms = 0.0
        self.loop_stall_total_ms = 0.0
        #: ``(wall time s, "gc" | "loop", ms, generation or -1, objects freed or -1)``, newest last
        self.recent: collections.deque = collections.deque(maxlen=RECENT_MAX)
        self._pending: collections.deque = collections.deque(maxlen=RECENT_MAX)
        self._gc_start = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0

    # ------------------------------------------------------------------ the collector
    def _on_gc(self, phase: str, info: dict) -> None:
        """``gc.callbacks`` hook (invariant 1)."""
        if phase == "start":
            self._gc_start = self.clock()
            return
        ms = (self.clock() - self._gc_start) * 1000.0
        g = info.get("generation", 2)
        self.gc_count[g] += 1
        self.gc_time_ms[g] += ms
        if ms > self.gc_max_ms[g]:
            self.gc_max_ms[g] = ms
        if ms >= self.info_threshold_ms:
            self._pending.append((time.time(), "gc", ms, g, info.get("collected", -1)))

    # ------------------------------------------------------------------------ the loop
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Hook the collector and arm the loop probe (idempotent)."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)
        self._loop = loop or asyncio.get_running_loop()
        if self._timer is None:
            self._arm()

    def stop(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._flush()

    def _arm(self) -> None:
        assert self._loop is not None
        self._due = self.clock() + self.probe_interval_s
        self._timer = self._loop.call_later(self.probe_interval_s, self._probe)

    def _probe(self) -> None:
        late_ms = max(0.0, (self.clock() - self._due) * 1000.0)
        if late_ms > self.loop_stall_max_ms:
            self.loop_stall_max_ms = late_ms
        self.loop_stall_total_ms += late_ms
        if late_ms >= self.info_threshold_ms:
            self._pending.append((time.time(), "loop", late_ms, -1, -1))
        self._flush()
        self._arm()

    def _flush(self) -> None:
        """Log the pauses recorded since the last probe (from the loop: invariant 1)."""
        while self._pending:
            p = self._pending.popleft()
            self.recent.append(p)
            _t, kind, ms, gen, freed = p
            self.info_exceeded += 1
            warn = ms >= self.warn_threshold_ms
            if warn:
                self.warn_exceeded += 1
            what = (f"garbage collection of generation {gen}" if kind == "gc" else "event loop stalled")
            log.log(logging.WARNING if warn else logging.INFO, "pause: %s for %.1f ms", what, ms,
                    extra={"pause_kind": kind, "pause_ms": round(ms, 3), "gc_generation": gen,
                           "gc_collected": freed})

    # ------------------------------------------------------------------------- metrics
    def stats(self) -> dict[str, Any]:
        """Counters for ``/jmx`` (Hadoop's ``JvmMetrics`` names, and the maxima)."""
        return {"GcCount": sum(self.gc_count), "GcTimeMillis": int(sum(self.gc_time_ms)),
                **{f"GcCountGen{g}": self.gc_count[g] for g in range(3)},
                **{f"GcTimeMillisGen{g}": int(self.gc_time_ms[g]) for g in range(3)},
                "GcPauseMaxMillis": round(max(self.gc_max_ms), 3),
                "GcNumInfoThresholdExceeded": self.info_exceeded,
                "GcNumWarnThresholdExceeded": self.warn_exceeded,
                "GcTotalExtraSleepTime": int(self.loop_stall_total_ms),
                "LoopStallMaxMillis": round(self.loop_stall_max_ms, 3)}


__all__ = ["PauseMonitor", "RECENT_MAX", "DEFAULT_PROBE_INTERVAL_MS"]
