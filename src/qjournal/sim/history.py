"""The history of a simulated or chaos run: what the checker judges.

Why a separate record: the checker (:mod:`qjournal.sim.checker`) must not trust
the workload's own bookkeeping or the system under test. It is fed *observed*
events only: what writers were told (acks, epochs), what readers saw, what
JournalNodes answered (seen on the wire), and what was on every disk at the
end. The same history type serves the deterministic simulator and the
real-process chaos harness, so both are judged by one checker.

Events are frozen dataclasses appended in the order they happened; each gets a
sequence number ``seq`` (the total order the checker uses; ``time`` is only for
humans, since several events can share a virtual instant).

Vocabulary (HDFS-3077 names):

* ``Setup``: the JournalNodes of the run (fixes the quorum size).
* ``Promise``: a JournalNode answered ``new_epoch`` successfully for a writer.
* ``WriterStarted``: a writer incarnation was created (before it asks anything).
* ``EpochGranted``: a writer got its epoch from a quorum (client side).
* ``Written``: a writer handed a txid and its bytes to the log (not yet acked).
* ``Acked``: ``log_sync`` returned: every txid the writer wrote up to ``txid``
  is acknowledged.
* ``Accepted``: a JournalNode acknowledged a ``journal`` batch of an epoch.
* ``Finalized``: a JournalNode acknowledged ``finalize_log_segment``.
* ``Read``: a reader saw a txid with its bytes.
* ``NodeSegment``: at the end, a segment file on a node's disk.
* ``FinalLog``: the log read back after the last recovery (the outcome).
* ``Fault``: a fault the harness injected (for reports and counts only).
* ``Note``: an observation of the simulated world used to attribute a
  violation to a known bug (never judged by itself).
* ``Failure``: an error surfaced to a writer/reader that is not an expected
  fault outcome (e.g. ``InvariantViolation``); always a violation.

The whole cluster (NameNodes, controllers and clients; judged by
:mod:`qjournal.sim.cluster_rules`) adds:

* ``OpCalled`` / ``OpAcked`` / ``OpFailed``: a client called a namespace
  operation; it was answered with success (by which NameNode), or the client
  gave up on it (error type; the operation may or may not have happened).
* ``NameNodeAck``: a NameNode sent a write's answer, with the epoch of its
  journal writer and the txid its edit log had synced (so the op's edit, at or
  below it) at that moment (seen on the NameNode's side of the wire).
* ``NsRead``: a client read whether a path exists, from which NameNode; ``call_seq``
  is the ``seq`` the next event had when the read was sent (events below it
  happened before the read began), ``call_time`` the clock then (what
  :func:`merge_histories` rebuilds ``call_seq`` from); ``session_only`` when the answer came from an
  observer without an ``msync`` for this read (it reflects the reader's own
  session, its writes and what it read, not every write acknowledged before it).
* ``NamespaceState``: at the end, the paths of a NameNode's namespace (role
  ``active``, ``standby`` or ``observer``).
* ``Healed``: every fault is healed; progress is due within ``bound_s``.
* ``Progress``: after ``Healed``, a probe write was acknowledged.
* ``ControllerState``: at the end, a failover controller's view of its NameNode's
  health, its election state, and whether the NameNode really is healthy (the
  simulator knows: running, not paused, its disk not full).

What a judge says of a history is a :class:`Violation` (a rule's name, what is
wrong, the events that show it): the rule sets and the linearizability search
all speak it, and :mod:`qjournal.sim.checker` gathers them.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any, Iterator

__all__ = [
    "Event", "Setup", "Promise", "WriterStarted", "EpochGranted", "Written", "Acked", "Accepted", "Finalized",
    "Read", "NodeSegment", "FinalLog", "Fault", "Note", "Failure", "History",
    "OpCalled", "OpAcked", "OpFailed", "NameNodeAck", "NsRead", "NamespaceState", "Healed", "Progress",
    "ControllerState", "event_from_jsonable", "merge_histories", "Violation",
]


@dataclass(frozen=True)
class Event:
    """Base of every history event. ``seq`` and ``time`` are filled in by :class:`History`."""

    seq: int = field(default=-1, kw_only=True)
    time: float = field(default=0.0, kw_only=True)


@dataclass(frozen=True)
class Setup(Event):
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Promise(Event):
    node: str
    epoch: int
    writer: str


@dataclass(frozen=True)
class EpochGranted(Event):
    writer: str
    epoch: int


@dataclass(frozen=True)
class WriterStarted(Event):
    writer: str


@dataclass(frozen=True)
class Written(Event):
    writer: str
    epoch: int
    txid: int
    data: bytes


@dataclass(frozen=True)
class Acked(Event):
    writer: str
    epoch: int
    txid: int


@dataclass(frozen=True)
class Accepted(Event):
    node: str
    epoch: int
    first_txid: int
    last_txid: int


@dataclass(frozen=True)
class Finalized(Event):
    node: str
    epoch: int
    start_txid: int
    end_txid: int


@dataclass(frozen=True)
class Read(Event):
    reader: str
    txid: int
    data: bytes


@dataclass(frozen=True)
class NodeSegment(Event):
    node: str
    start_txid: int
    end_txid: int
    in_progress: bool
    data: bytes


@dataclass(frozen=True)
class FinalLog(Event):
    first_txid: int
    records: tuple[bytes, ...]  # records[i] is the body of txid first_txid + i


@dataclass(frozen=True)
class Fault(Event):
    kind: str
    detail: str = ""


@dataclass(frozen=True)
class Note(Event):
    """Something the simulated world observed that explains a later violation
    (e.g. a segment renamed to finalized while it still had unsynced bytes)."""

    kind: str
    node: str
    detail: str = ""


@dataclass(frozen=True)
class Failure(Event):
    who: str
    error_type: str
    message: str


@dataclass(frozen=True)
class OpCalled(Event):
    client: str
    op_id: int
    method: str      # mkdirs | create | delete | rename
    path: str
    dst: str = ""    # rename only


@dataclass(frozen=True)
class OpAcked(Event):
    client: str
    op_id: int
    nn: str
    result: Any = None


@dataclass(frozen=True)
class OpFailed(Event):
    client: str
    op_id: int
    error_type: str
    message: str = ""


@dataclass(frozen=True)
class NameNodeAck(Event):
    nn: str
    epoch: int
    client: str
    op_id: int
    synced_txid: int


@dataclass(frozen=True)
class NsRead(Event):
    client: str
    nn: str
    path: str
    exists: bool
    call_seq: int = -1          # -1: not known (the read is judged as if it began at its answer)
    session_only: bool = False
    call_time: float = -1.0     # the history's clock when the read was sent (-1: not recorded)


@dataclass(frozen=True)
class NamespaceState(Event):
    nn: str
    role: str                   # "active", "standby" or "observer"
    last_txid: int
    paths: tuple[str, ...]      # every path of the namespace, sorted


@dataclass(frozen=True)
class Healed(Event):
    bound_s: float


@dataclass(frozen=True)
class Progress(Event):
    nn: str


@dataclass(frozen=True)
class ControllerState(Event):
    nn: str
    health: str
    elector: str
    nn_healthy: bool = True


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    Attributes:
        rule: the rule's name (its identity in reports and docs).
        message: what is wrong, with txids / epochs / nodes / paths.
        seqs: sequence numbers of the events that show it.
    """

    rule: str
    message: str
    seqs: tuple[int, ...] = ()

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message} (events {list(self.seqs)})"


class History:
    """An append-only list of events with a clock.

    Args:
        clock: a callable returning the current time (the virtual loop's
            ``time`` in the simulator, ``time.monotonic`` in the chaos harness).
    """

    def __init__(self, clock=lambda: 0.0) -> None:
        self._clock = clock
        self.events: list[Event] = []

    def freeze(self) -> None:
        """The run is over: stop reading its clock (which keeps the whole simulated world alive)."""
        end = float(self._clock())
        self._clock = lambda: end

    def now(self) -> float:
        """The history's clock now (what the next event's ``time`` would be)."""
        return float(self._clock())

    def add(self, event: Event) -> Event:
        """Stamp ``event`` with the next sequence number and the current time and append it.

        Returns:
            The stamped event.
        """
        stamped = dataclasses.replace(event, seq=len(self.events), time=float(self._clock()))
        self.events.append(stamped)
        return stamped

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def __len__(self) -> int:
        return len(self.events)

    def of(self, kind: type) -> list:
        """Events of one type, in order."""
        return [e for e in self.events if type(e) is kind]

    def format(self, limit: int | None = None, only: list[int] | None = None) -> str:
        """Human-readable lines, one per event (bytes shortened).

        Args:
            limit: keep at most this many lines (the last ones).
            only: keep only events with these sequence numbers.
        """
        evs = self.events if only is None else [self.events[i] for i in sorted(set(only))]
        if limit is not None and len(evs) > limit:
            evs = evs[-limit:]
        return "\n".join(format_event(e) for e in evs)

    def to_jsonl(self) -> str:
        """One JSON object per line (bytes as hex): a replayable artefact of a chaos run."""
        return "\n".join(json.dumps(_jsonable(e), sort_keys=True) for e in self.events)

    @staticmethod
    def event_to_json(e: Event) -> str:
        """One event as the JSON line :meth:`to_jsonl` writes (:func:`event_from_jsonable` reads it back)."""
        return json.dumps(_jsonable(e), sort_keys=True)


def _short(v: Any) -> Any:
    if isinstance(v, bytes):
        return v[:12].hex() + ("…" if len(v) > 12 else "") + f"({len(v)}B)"
    if isinstance(v, tuple) and v and isinstance(v[0], bytes):
        return f"<{len(v)} records>"
    return v


def format_event(e: Event) -> str:
    """One line: ``#seq t=time Kind field=value ...``."""
    parts = [f"#{e.seq:<5} t={e.time:10.4f} {type(e).__name__:<12}"]
    for f in dataclasses.fields(e):
        if f.name in ("seq", "time"):
            continue
        parts.append(f"{f.name}={_short(getattr(e, f.name))}")
    return " ".join(parts)


def _jsonable(e: Event) -> dict:
    d: dict[str, Any] = {"type": type(e).__name__}
    for f in dataclasses.fields(e):
        v = getattr(e, f.name)
        if isinstance(v, bytes):
            v = v.hex()
        elif isinstance(v, tuple):
            v = [x.hex() if isinstance(x, bytes) else x for x in v]
        d[f.name] = v
    return d


_EVENT_TYPES = {name: globals()[name] for name in __all__ if isinstance(globals().get(name), type)
                and issubclass(globals()[name], Event)}


def event_from_jsonable(d: dict) -> Event:
    """The event a line of :meth:`History.to_jsonl` describes (``seq`` and ``time`` kept).

    Raises:
        ValueError: an unknown event type or fields that do not fit it.
    """
    cls = _EVENT_TYPES.get(d.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown history event type {d.get('type')!r}")
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v = d[f.name]
        if f.type == "bytes":
            v = bytes.fromhex(v)
        elif str(f.type).startswith("tuple[bytes"):
            v = tuple(bytes.fromhex(x) for x in v)
        elif str(f.type).startswith("tuple"):
            v = tuple(v)
        kw[f.name] = v
    try:
        return cls(**kw)
    except TypeError as e:
        raise ValueError(f"history event {d!r}: {e}") from e


def merge_histories(parts: list[list[Event]]) -> History:
    """One history of several recorded apart (client processes on their own hosts, the test's own
    faults) on one clock: events ordered by ``time`` (ties: by part, then by each part's order),
    numbered again, and every read's ``call_seq`` rebuilt from its ``call_time`` (the events that
    happened before it was sent, whoever recorded them).

    Args:
        parts: each part's events in the order they were recorded, ``time`` from one clock
            (``time.monotonic`` is one clock for every process of a machine).

    Returns:
        The merged history (its clock frozen at the last event).
    """
    keyed = sorted(((e.time, i, j, e) for i, part in enumerate(parts) for j, e in enumerate(part)),
                   key=lambda t: t[:3])
    times = [t[0] for t in keyed]
    out: list[Event] = []
    for seq, (_, _, _, e) in enumerate(keyed):
        changes: dict[str, Any] = {"seq": seq}
        if isinstance(e, NsRead) and e.call_time >= 0:
            changes["call_seq"] = bisect.bisect_left(times, e.call_time)
        out.append(dataclasses.replace(e, **changes))
    end = times[-1] if times else 0.0
    h = History(clock=lambda: end)
    h.events = out
    return h
