"""What both ends of an RPC connection share: the peer, the error wire format, coalesced frame writes.

Why a module of its own: the server (:mod:`qjournal.transport.server`) and the client
(:mod:`qjournal.transport.client`) write frames (:mod:`qjournal.transport.frames`) the same way
and agree on how an error travels; each of those facts lives here once.

Errors. A handler exception that is a :class:`QJournalError` or
:class:`InvariantViolation` travels as ``{"type", "message", "fields"}``
(:func:`error_payload`) and is rebuilt with :func:`qjournal.errors.make_error`
(:func:`rebuild_error`), so the caller sees the same class with the same fields. Any other
exception travels as :class:`RemoteError`. Fields that msgpack cannot carry are converted
to strings.

Writes are flushed promptly and coalesced (:class:`Coalescer`): the first frame written in a
loop iteration goes to the transport at once; frames written later in the same iteration are
gathered and handed over as one buffer at the end of the iteration, or as soon as 256 KiB are
gathered (one system call, and under TLS one record stream, for a burst of pipelined calls or
responses; the memory network still sees one frame per write). The end of the iteration is
one callback per server (:class:`IterationEnd`), shared by every connection that wrote in it
(a group commit's ~64 answers schedule one, not 64). A client's call sent while no other call
of that client is in flight and nothing is gathered goes to the transport at once and
schedules no callback at all; a second call in the same iteration goes out at once too and
opens the gathering window. TCP_NODELAY is set on both sides (:func:`set_nodelay`).

The peer of the call being handled is :func:`current_peer` (a contextvar the server sets per
connection, :data:`PEER`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import socket
from dataclasses import dataclass
from typing import Any

from qjournal.errors import InvariantViolation, ProtocolError, QJournalError, RemoteError, make_error
from qjournal.transport.memory import MemoryTransport

__all__ = ["PeerInfo", "current_peer", "error_payload", "rebuild_error", "set_nodelay", "peer_info", "Coalescer",
           "IterationEnd", "PEER"]

log = logging.getLogger("qjournal.transport.wire")

PEER: contextvars.ContextVar["PeerInfo | None"] = contextvars.ContextVar("qjournal_rpc_peer", default=None)


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """Who is calling.

    Attributes:
        address: ``"host:port"`` for TCP/TLS, the source node name in memory.
        transport: ``"tcp"``, ``"tls"`` or ``"memory"``.
        cert: the verified TLS peer certificate (``SSLSocket.getpeercert()``), or None.
    """

    address: str
    transport: str
    cert: dict | None = None


def current_peer() -> PeerInfo | None:
    """The peer of the RPC being handled by the current task, or None outside a call."""
    return PEER.get()



def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """TCP_NODELAY on a TCP transport's socket (a memory or closed transport: nothing)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # the socket may already be gone
            pass


def peer_info(transport: asyncio.BaseTransport) -> PeerInfo:
    """Who is at the other end of ``transport``: its address, the transport kind, its TLS certificate."""
    name = transport.get_extra_info("peername")
    if isinstance(name, str):
        return PeerInfo(name, "memory")
    if isinstance(name, tuple) and len(name) >= 2:
        address = f"{name[0]}:{name[1]}"
    else:
        address = str(name)
    if transport.get_extra_info("sslcontext") is not None:
        return PeerInfo(address, "tls", transport.get_extra_info("peercert"))
    return PeerInfo(address, "tcp")


_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1


def _wire_value(value: Any, depth: int = 0) -> Any:
    """Coerce ``value`` to something msgpack can carry (error fields)."""
    if value is None or type(value) in (str, bytes, bool, float):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):  # int and subclasses (IntEnum)
        return int(value) if _INT_MIN <= value <= _INT_MAX else str(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if depth >= 8:
        return repr(value)
    if isinstance(value, dict):
        return {
            (k if type(k) in (str, int) else str(k)): _wire_value(v, depth + 1) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_wire_value(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_wire_value(v, depth + 1) for v in value), key=repr)
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    return str(value)


def error_payload(exc: BaseException) -> dict:
    """The wire form ``{"type", "message", "fields"}`` of an exception.

    Args:
        exc: a :class:`QJournalError`, :class:`InvariantViolation` or any other
            exception (sent as ``RemoteError`` with ``remote_type``).

    Returns:
        A msgpack-able dict.
    """
    if isinstance(exc, QJournalError):
        fields = {str(k): _wire_value(v) for k, v in exc.fields.items() if k != "message"}
        return {"type": type(exc).__name__, "message": exc.message, "fields": fields}
    if isinstance(exc, InvariantViolation):
        return {"type": "InvariantViolation", "message": str(exc), "fields": {}}
    return {
        "type": "RemoteError",
        "message": f"{type(exc).__name__}: {exc}",
        "fields": {"remote_type": type(exc).__name__},
    }


def rebuild_error(payload: Any, method: str, peer: str) -> BaseException:
    """The exception an error payload (:func:`error_payload`) describes, as the caller should see it:
    the same class with the same fields, ``RemoteError`` for a class this side cannot build, and
    ``ProtocolError`` for a malformed payload."""
    if not isinstance(payload, dict) or not isinstance(payload.get("type"), str):
        return ProtocolError(f"call {method} to {peer}: malformed error payload {payload!r:.100}", method=method, peer=peer)
    fields = payload.get("fields")
    if not isinstance(fields, dict):
        fields = {}
    message = payload.get("message")
    if not isinstance(message, str):
        message = repr(message)
    try:
        return make_error(payload["type"], message, {str(k): v for k, v in fields.items()})
    except Exception:  # an error class whose constructor rejects these fields
        return RemoteError(f"{payload['type']}: {message}", remote_type=payload["type"])


class IterationEnd:
    """One callback at the end of a loop iteration for every coalescer that wrote in it.

    The connections of one server share it: a burst of responses on many connections
    (the NameNode's group commit answers ~64 clients in one iteration) schedules one
    callback, not one per connection. Coalescers are flushed in the order they first
    wrote. Never shared between servers or clients: the simulator runs every process
    on one loop and pauses a process by holding the callbacks scheduled from its
    context, which must not hold another process's frames.
    """

    __slots__ = ("loop", "_dirty")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._dirty: list[Coalescer] = []

    def add(self, coalescer: "Coalescer") -> None:
        """Flush ``coalescer`` at the end of this iteration (one callback for all of them)."""
        dirty = self._dirty
        if not dirty:
            self.loop.call_soon(self._run)
        dirty.append(coalescer)

    def _run(self) -> None:
        dirty, self._dirty = self._dirty, []
        for c in dirty:
            try:
                c._flush()
            except Exception:  # one transport's failure must not keep the others' frames back
                log.exception("handing gathered frames to a transport failed")


class Coalescer:
    """Prompt, coalesced writes: first frame of a loop iteration now, the rest at its end.

    Frames gathered in one iteration go to a socket transport as one joined
    buffer (one ``send``; under TLS one record stream instead of one record per
    frame), and to a :class:`MemoryTransport` one frame per write, so that the
    memory network's fault hook sees whole frames. The end of the iteration is
    a callback of its own (a client's one connection), or one shared by a
    server's connections (``end``, :class:`IterationEnd`).
    """

    __slots__ = ("_loop", "_end", "_transport", "_out", "_out_bytes", "_per_frame")

    #: gathered bytes beyond which frames are handed over at once (the
    #: transport then sees them and can apply its write back-pressure)
    MAX_GATHER_BYTES = 256 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport,
                 end: IterationEnd | None = None) -> None:
        self._loop = loop
        self._end = end
        self._transport = transport
        self._out: list[bytes] | None = None
        self._out_bytes = 0
        self._per_frame = isinstance(transport, MemoryTransport)

    def write(self, frame: bytes, alone: bool = False) -> None:
        """Gather ``frame`` (module docstring). ``alone``: the writer has nothing else in flight, so
        a frame that would go out at once opens no gathering window (no end-of-iteration callback);
        a frame written after it in the same iteration goes out at once too, and opens it then."""
        out = self._out
        if out is None:
            self._transport.write(frame)
            if alone:
                return
            self._out = []
            end = self._end
            if end is None:
                self._loop.call_soon(self._flush)
            else:
                end.add(self)
        else:
            out.append(frame)
            self._out_bytes += len(frame)
            if self._out_bytes > self.MAX_GATHER_BYTES:
                self.flush_now()

    def _flush(self) -> None:
        out = self._out
        self._out = None
        self._out_bytes = 0
        if out:
            self._hand_over(out)

    def flush_now(self) -> None:
        """Hand every gathered frame to the transport now (before a close, or when many bytes wait)."""
        out = self._out
        if out:
            self._out = []
            self._out_bytes = 0
            self._hand_over(out)

    def _hand_over(self, out: list[bytes]) -> None:
        transport = self._transport
        if transport.is_closing():
            return
        if self._per_frame:
            transport.writelines(out)
        elif len(out) == 1:
            transport.write(out[0])
        else:
            transport.write(b"".join(out))

