"""A virtual-time asyncio event loop: the clock of the deterministic simulator.

Why: the simulator runs the *real* JournalNode shell, the real quorum client
(``QuorumJournalManager``) and the real transport on one thread. They are
asyncio code: they sleep, wait with deadlines and schedule retries through
``loop.call_later``. On a normal loop those waits cost wall-clock time and their
interleaving depends on the OS. On this loop they cost nothing and happen in
exactly the same order for a given seed, so any run replays from its seed
(STYLE.md, the TigerBeetle / FoundationDB model).

Theory of operation:

* :class:`VirtualTimeLoop` is an ``asyncio.BaseEventLoop`` whose selector never
  blocks. ``BaseEventLoop._run_once`` asks the selector to wait ``timeout``
  seconds for I/O when nothing is ready; the virtual selector instead moves the
  clock forward by ``timeout`` (to the next timer) and reports no I/O. Then the
  loop runs the timers that became due. ``time()`` returns the virtual clock.
* There is no real I/O: the simulated cluster talks through
  ``qjournal.transport``'s in-memory network, whose deliveries are ``call_later``
  timers on this loop, and stores data on the simulated disk
  (:mod:`qjournal.sim.disk`).
* ``run_in_executor`` (and therefore ``asyncio.to_thread``) runs the function
  inline and returns a finished future, so code that pushes fsyncs to a thread
  stays deterministic. A :class:`SimThread` is a simulated worker thread: its calls run
  one at a time, in submission order, each in a loop callback of its own, so the
  caller waits a turn of the loop as it waits for a real thread (other callbacks
  interleave) without leaving the one thread of the simulation.
* All randomness of a run comes from :attr:`VirtualTimeLoop.rng`, one
  ``random.Random(seed)``.
* Processes (:class:`SimProcess`): code started with :func:`run_in_process`
  runs in a context that names its process, and so does every callback it
  schedules (asyncio copies the context into tasks, timers and future
  callbacks; the memory network runs a connection's callbacks in the context
  of whoever listened or connected). The loop runs such a callback only while
  its process is running: a *paused* process (SIGSTOP) keeps its callbacks
  until it resumes, then runs them at the later virtual time, as SIGCONT does;
  a *killed* process never runs another line (SIGKILL): its callbacks are held
  for good, and only the run's teardown lets its tasks unwind (so nothing of
  it is left to a garbage collector's finalizer).

Invariants:

1. The virtual clock never goes backwards, and it only moves when no callback
   is ready (a callback observes a constant ``time()`` while it runs).
2. Timers due at the same virtual instant run in the order they were
   scheduled (``heapq`` on ``(when, insertion order)`` through asyncio's own
   ``TimerHandle`` ordering plus FIFO ready queue).
3. A run is bounded: more than ``max_callbacks`` loop iterations or a clock past
   ``max_virtual_time_s`` raises :class:`SimulationLimitExceeded`; a loop with
   nothing ready and no timer pending raises :class:`SimulationStalled` (every
   task waits for something that can never happen: a liveness bug).
4. No callback of a paused or killed process runs before the teardown; the
   callbacks a paused process held run, in their original order, when it resumes.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import collections
import concurrent.futures
import contextvars
import gc
import heapq
import random
import selectors
from typing import Any, Callable, Coroutine

__all__ = ["VirtualTimeLoop", "SimulationStalled", "SimulationLimitExceeded", "run_simulation",
           "SimProcess", "run_in_process", "CURRENT_PROCESS", "ProcessKilled", "join_process_task", "SimThread"]

#: virtual time at which every run starts (not zero, so "time 0" bugs show)
START_TIME_S = 1000.0


class SimulationStalled(RuntimeError):
    """Nothing is ready and no timer is pending: the simulated system can make no progress."""


class SimulationLimitExceeded(RuntimeError):
    """The run exceeded its callback budget or its virtual-time budget."""


class SimProcess:
    """A simulated OS process: a name, and whether its code may run (invariant 4).

    Args:
        name: for logs and reports.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.paused = False
        self.killed = False
        self.held: list[tuple[Callable, tuple, contextvars.Context]] = []
        #: the process's tasks, held strongly: a killed process's pending tasks must not be
        #: garbage-collected (and their coroutines closed, running their finally blocks) at an
        #: arbitrary moment; the run's teardown unwinds them on the loop instead
        self.tasks: set[asyncio.Task] = set()

    def pause(self) -> None:
        """SIGSTOP: nothing of this process runs until :meth:`resume`."""
        self.paused = True

    def resume(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """SIGCONT: the held callbacks run now, in order (a killed process stays dead)."""
        if self.killed:
            return
        self.paused = False
        held, self.held = self.held, []
        loop = loop or asyncio.get_running_loop()
        for cb, args, ctx in held:
            loop.call_soon(cb, *args, context=ctx)

    def kill(self) -> None:
        """SIGKILL: nothing of this process ever runs again (its callbacks wait for the teardown)."""
        self.killed = True

    def revive_for_teardown(self, loop: asyncio.AbstractEventLoop) -> None:
        """After the run: let the process's held callbacks run, so its tasks can unwind."""
        self.killed = False
        self.resume(loop)

    def __repr__(self) -> str:
        state = "killed" if self.killed else "paused" if self.paused else "running"
        return f"SimProcess({self.name}, {state})"


#: the process whose code is running (None: the simulator itself, never paused)
CURRENT_PROCESS: contextvars.ContextVar[SimProcess | None] = contextvars.ContextVar(
    "qjournal_sim_process", default=None)


def run_in_process(process: SimProcess, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task:
    """Start ``coro`` as a task of ``process`` (everything it schedules belongs to it too)."""
    ctx = contextvars.copy_context()
    ctx.run(CURRENT_PROCESS.set, process)
    loop = asyncio.get_running_loop()
    if isinstance(loop, VirtualTimeLoop) and process not in loop.processes:
        loop.processes.append(process)
    return loop.create_task(coro, name=name, context=ctx)


class ProcessKilled(RuntimeError):
    """The process whose task was awaited was killed before the task finished."""


async def join_process_task(process: SimProcess, task: asyncio.Task, poll_s: float = 0.1) -> Any:
    """Wait for ``task`` of ``process`` from outside it.

    A plain ``await`` would hang for ever if the process is killed meanwhile (its task never
    runs again, not even to be cancelled); this returns its result, raises its exception,
    or raises :class:`ProcessKilled`.
    """
    while not task.done():
        if process.killed:
            raise ProcessKilled(f"{process.name} was killed")
        await asyncio.wait({task}, timeout=poll_s)
    return task.result()


class SimThread:
    """A simulated worker thread (module docstring): ``await run(fn, *args)`` runs ``fn(*args)`` in a
    loop callback of its own, after every call submitted before it, and hands back its result or its
    exception (a ``BaseException`` too, as a thread pool's future would)."""

    def __init__(self) -> None:
        self._queue: collections.deque[tuple[Callable[..., Any], tuple, asyncio.Future]] = collections.deque()
        self._closed = False

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on this thread (see the class docstring)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.append((fn, args, fut))
        if len(self._queue) == 1:
            loop.call_soon(self._step)
        return await fut

    def _step(self) -> None:
        fn, args, fut = self._queue.popleft()
        try:
            result = fn(*args)  # a caller that went away (cancelled): its call runs, as on a real thread
        except BaseException as exc:  # handed to the awaiting task, as a thread pool would
            if fut.done():
                raise  # nobody awaits it: the loop's exception handler reports it
            fut.set_exception(exc)
        else:
            if not fut.done():
                fut.set_result(result)
        finally:
            if self._queue:  # the next call's turn: after this one's caller was woken
                asyncio.get_running_loop().call_soon(self._step)

    def close(self) -> None:
        """No more calls are expected (the queued ones still run)."""
        self._closed = True


def _task_factory(loop: asyncio.AbstractEventLoop, coro, context=None) -> asyncio.Task:
    """Tasks as usual; a process's tasks are also remembered by the process."""
    task = asyncio.Task(coro, loop=loop, context=context)
    process = (context if context is not None else contextvars.copy_context()).get(CURRENT_PROCESS)
    if process is not None:
        process.tasks.add(task)
        task.add_done_callback(process.tasks.discard)
    return task


def _gated(process: SimProcess, callback: Callable, args: tuple, ctx: contextvars.Context) -> None:
    """Run a process's callback, unless the process is paused or killed (then it is held)."""
    if process.paused or process.killed:
        process.held.append((callback, args, ctx))
        return
    callback(*args)


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no real file descriptors: ``select`` advances the virtual clock."""

    def __init__(self, loop: "VirtualTimeLoop") -> None:
        self._loop = loop
        self._map: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj, events, data=None):  # pragma: no cover - no real I/O in the sim
        key = selectors.SelectorKey(fileobj, id(fileobj), events, data)
        self._map[fileobj] = key
        return key

    def unregister(self, fileobj):  # pragma: no cover
        return self._map.pop(fileobj)

    def select(self, timeout: float | None = None):
        self._loop._advance(timeout)
        return []

    def get_map(self):
        return dict(self._map)

    def close(self) -> None:
        self._map.clear()


class _OrderedTimerHandle(asyncio.TimerHandle):
    """A timer ordered by ``(when, seq)`` so equal deadlines keep their scheduling order."""

    __slots__ = ("_seq",)

    def __init__(self, when, seq, callback, args, loop, context):
        super().__init__(when, callback, args, loop, context=context)
        self._seq = seq

    # The heap's comparisons (a few per timer pushed or popped, the loop's hottest path): spelled out rather
    # than through a ``(when, seq)`` tuple built per call.
    def __lt__(self, other):
        return self._when < other._when or (self._when == other._when and self._seq < other._seq)

    def __le__(self, other):
        return self._when < other._when or (self._when == other._when and self._seq <= other._seq)

    def __gt__(self, other):
        return other.__lt__(self)

    def __ge__(self, other):
        return other.__le__(self)

    def __eq__(self, other):
        return self is other

    __hash__ = asyncio.TimerHandle.__hash__


class VirtualTimeLoop(asyncio.base_events.BaseEventLoop):
    """An asyncio event loop on a virtual clock (see the module docstring).

    Args:
        seed: seed of :attr:`rng`, the single source of randomness of a run.
        max_callbacks: upper bound on loop iterations (invariant 3).
        max_virtual_time_s: upper bound on elapsed virtual seconds (invariant 3).
    """

    def __init__(self, seed: int = 0, *, max_callbacks: int = 5_000_000,
                 max_virtual_time_s: float = 24 * 3600.0) -> None:
        super().__init__()
        self._selector = _VirtualSelector(self)
        self._now = START_TIME_S
        self._clock_resolution = 1e-9
        self.seed = seed
        self.rng = random.Random(seed)
        self.max_callbacks = max_callbacks
        self.max_virtual_time_s = max_virtual_time_s
        self.iterations = 0
        self._timer_seq = 0
        #: every process started on this loop, held until the run's teardown lets their tasks unwind
        self.processes: list[SimProcess] = []
        self.set_task_factory(_task_factory)

    # -- clock ---------------------------------------------------------------------
    def time(self) -> float:
        """The virtual clock, in seconds."""
        return self._now

    @property
    def elapsed_s(self) -> float:
        """Virtual seconds since the start of the run."""
        return self._now - START_TIME_S

    def _advance(self, timeout: float | None) -> None:
        self.iterations += 1
        if self.iterations > self.max_callbacks:
            raise SimulationLimitExceeded(
                f"virtual loop ran more than max_callbacks={self.max_callbacks} iterations "
                f"(seed {self.seed}, virtual time {self.elapsed_s:.3f}s)")
        if timeout is None:
            raise SimulationStalled(
                f"no callback ready and no timer pending at virtual time {self.elapsed_s:.3f}s "
                f"(seed {self.seed}): every task waits for an event that cannot happen")
        if timeout > 0:
            # jump to the next timer; land exactly on it so the due check sees it (invariant 1)
            target = self._now + timeout
            if self._scheduled:
                target = max(target, self._scheduled[0]._when)
            self._now = max(self._now, target)
            if self.elapsed_s > self.max_virtual_time_s:
                raise SimulationLimitExceeded(
                    f"virtual clock passed max_virtual_time_s={self.max_virtual_time_s} "
                    f"(seed {self.seed})")

    # -- processes (invariant 4) -----------------------------------------------------
    @staticmethod
    def _gate(callback: Callable, args: tuple, context: contextvars.Context | None):
        ctx = context if context is not None else contextvars.copy_context()
        process = ctx.get(CURRENT_PROCESS)
        if process is None:
            return callback, args, context
        return _gated, (process, callback, args, ctx), ctx

    def call_soon(self, callback, *args, context=None):
        """As ``BaseEventLoop.call_soon``; a process's callback is gated (invariant 4)."""
        callback, args, context = self._gate(callback, args, context)
        return super().call_soon(callback, *args, context=context)

    # -- timers: FIFO among equal deadlines (invariant 2) -----------------------------
    def call_at(self, when, callback, *args, context=None):
        """As ``BaseEventLoop.call_at``, with ties broken by scheduling order; a process's callback
        is gated (invariant 4)."""
        callback, args, context = self._gate(callback, args, context)
        self._check_closed()
        if self._debug:  # pragma: no cover
            self._check_thread()
            self._check_callback(callback, 'call_at')
        self._timer_seq += 1
        timer = _OrderedTimerHandle(when, self._timer_seq, callback, args, self, context)
        if timer._source_traceback:  # pragma: no cover
            del timer._source_traceback[-1]
        heapq.heappush(self._scheduled, timer)
        timer._scheduled = True
        return timer

    # -- the pieces BaseEventLoop leaves abstract ----------------------------------
    def _process_events(self, event_list) -> None:
        return None

    def _write_to_self(self) -> None:
        return None

    # -- executor: inline, deterministic -------------------------------------------
    def run_in_executor(self, executor, func: Callable, *args) -> asyncio.Future:
        """Run ``func(*args)`` now and return a finished future (no threads in a simulation)."""
        fut = self.create_future()
        try:
            fut.set_result(func(*args))
        except BaseException as exc:  # handed to the awaiting task, as a thread pool would
            fut.set_exception(exc)
        return fut

    def set_default_executor(self, executor: concurrent.futures.Executor) -> None:
        return None

    async def shutdown_default_executor(self, timeout=None) -> None:
        return None

    # -- real I/O is not part of a simulation --------------------------------------
    async def create_connection(self, *args, **kwargs):
        raise RuntimeError("real sockets are not available on the virtual-time loop; "
                           "use the in-memory transport")

    async def create_server(self, *args, **kwargs):
        raise RuntimeError("real sockets are not available on the virtual-time loop; "
                           "use the in-memory transport")


def run_simulation(main: Callable[[], Coroutine[Any, Any, Any]], seed: int, *, collect: bool = True,
                   **loop_kwargs) -> Any:
    """Run ``main()`` to completion on a fresh :class:`VirtualTimeLoop`.

    Also seeds the ``random`` module's global generator, so library code that
    draws from it stays reproducible.

    Args:
        main: a coroutine function taking no argument; it can reach the loop
            through ``asyncio.get_running_loop()``.
        seed: the run's seed.
        collect: collect the run's garbage at the end (below); False when the caller still holds the
            world and collects it once it drops it (:func:`qjournal.sim.seeded_run.execute`).
        **loop_kwargs: passed to :class:`VirtualTimeLoop`.

    Returns:
        What ``main()`` returned.

    Raises:
        SimulationStalled, SimulationLimitExceeded: see the invariants; and
        whatever ``main()`` raised.
    """
    loop = VirtualTimeLoop(seed, **loop_kwargs)
    random.seed(seed)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(main())
    finally:
        try:
            _cancel_all(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()
            # Finalize the run's garbage here (futures that log an unretrieved error, abandoned
            # coroutines): left to a later collection, their finalizers run Python code wherever
            # the collector happens to start, e.g. inside the compiler, where CPython 3.11 then
            # fails with "AST constructor recursion depth mismatch".
            if collect:
                gc.collect()


def _cancel_all(loop: VirtualTimeLoop) -> None:
    # teardown, after the run: killed and paused processes may unwind their tasks now
    for p in list(loop.processes):
        p.revive_for_teardown(loop)
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    try:
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except (SimulationStalled, SimulationLimitExceeded):
        pass
