"""msgpack RPC over asyncio streams: ``RpcServer`` and ``RpcClient``.

Why this module exists: every qjournal process talks through it (NameNode to
JournalNodes, clients and ZKFC to NameNodes). It turns a handler object's
``async def rpc_<method>(**kwargs)`` into a network service with typed errors,
pipelining, deadlines and bounded frames, over TCP, TLS, or the in-memory
network of :mod:`qjournal.transport.memory` (same code path for all three:
asyncio ``Protocol`` objects fed by whichever ``Transport`` carries the bytes).

Theory of operation
-------------------
Client. Each :meth:`RpcClient.call` takes the next request id, encodes
``[0, id, method, kwargs]``, registers a future under the id and writes the
frame. Responses ``[1, id, ok, payload]`` complete the future with that id, in
whatever order they arrive, so any number of calls pipeline on one
connection. A call's deadline fails it with :class:`RpcTimeoutError` and forgets
the id; a response arriving later is discarded. Deadlines live in one heap per
client served by a single sweep timer armed for the earliest one (entries of
finished calls are skipped lazily; the timer is dropped whenever no call is in
flight), so a pipelined call costs one ``heappush``, not a timer. When the connection dies, every pending call fails with
:class:`TransportError`.

Server. Each connection decodes frames in arrival order. A request whose
method is in the handler's ``rpc_concurrent`` collection starts at once in its
own task. Every other request joins the connection's FIFO queue, served by one
worker task that awaits each call before starting the next: calls of one
connection run **in arrival order**, one at a time. This is the ordering the
quorum writer relies on (Hadoop's single-threaded ``IPCLoggerChannel``
executor): ``start_log_segment``, ``journal`` batches, ``finalize_log_segment``
of one writer are applied in the order they were sent. Read-only calls
(``get_edit_log_manifest``, ``get_journal_state``, ...) may be listed in
``rpc_concurrent`` so that they do not queue behind writes.

Writes are flushed promptly and coalesced: the first frame written in a loop
iteration goes to the transport at once; frames written later in the same
iteration are gathered and handed over as one buffer at the end of the
iteration, or as soon as 256 KiB are gathered (one system call, and under TLS
one record stream, for a burst of pipelined calls or responses; the memory
network still sees one frame per write). The end of the iteration is one
callback per server, shared by every connection that wrote in it (a group
commit's ~64 answers schedule one, not 64). A client's call sent while no
other call of that client is in flight and nothing is gathered goes to the
transport at once and schedules no callback at all (a DFS client or a quorum
logger, one call in flight, pays no callback per call); a second call in the
same iteration goes out at once too and opens the gathering window. TCP_NODELAY is set on both sides.
The first server or client of a process raises glibc's malloc thresholds
(:mod:`qjournal.transport.alloc`) so that large frames do not page-fault.

The handler learns its caller through :func:`current_peer` (a contextvar set
for every call) or, if the method declares a ``_peer`` parameter, through that
keyword argument. Both hold a :class:`PeerInfo`. ``_peer`` can never be sent
by a client.

Authorization. A server built with an ``authorize(peer, method)`` coroutine
(:mod:`qjournal.security.service_auth`) awaits it before every handler call,
in the call's turn (FIFO order holds); a typed error from it is the call's
answer and the handler never runs (invariant 8).

Errors. A handler exception that is a :class:`QJournalError` or
:class:`InvariantViolation` travels as ``{"type", "message", "fields"}`` and is
rebuilt with :func:`qjournal.errors.make_error`, so the caller sees the same
class with the same fields. Any other exception is logged with its traceback
and travels as :class:`RemoteError`. Fields that msgpack cannot carry are
converted to strings. After answering an :class:`InvariantViolation` the server
ends the process (invariant 7).

Invariants
----------
1. A connection's non-concurrent calls execute one at a time in arrival order.
2. Every request that is dispatched gets exactly one response (result or
   error) unless the connection is lost first.
3. A malformed, oversized or undecodable frame closes only the connection it
   arrived on; the server keeps serving every other connection. No request
   content can make the server stop.
4. A client call completes exactly once: result, typed error, timeout, or
   transport failure; responses for unknown or expired ids are discarded.
5. Per-connection limits: frames are at most ``max_frame_bytes``; at most
   ``max_queued_requests`` requests are queued or running, beyond which the
   server stops reading from that connection until it drains; and while the
   transport's write buffer is above its high-water mark (the peer does not
   read its responses) the server neither reads nor starts queued calls of
   that connection (back-pressure, not an error).
6. Memory connections run their protocol callbacks in the context of the code
   that listened or connected, as asyncio does for sockets: a handler never
   sees a client's context variables.
7. A handler that broke an invariant ends the process
   (:func:`qjournal.util.tasks.fatal`) once its caller has the typed error:
   a daemon never answers again from a state that broke an invariant.
8. With an ``authorize`` hook, no handler runs for a call the hook refused.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import inspect
import logging
import math
import socket
import ssl as _ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from qjournal.errors import (
    FrameTooLargeError,
    InvalidRequestError,
    InvariantViolation,
    ProtocolError,
    QJournalError,
    RemoteError,
    RpcTimeoutError,
    TransportError,
    make_error,
)
from qjournal.transport.alloc import tune_allocator
from qjournal.transport.frames import (
    DEFAULT_MAX_FRAME_BYTES,
    KIND_RESPONSE,
    FrameDecoder,
    check_request,
    encode_request,
    encode_response,
)
from qjournal.transport.memory import MemoryListener, MemoryNetwork, MemoryTransport
from qjournal.util.futures import ListenedFuture
from qjournal.util.tasks import fatal

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT_MS",
    "DEFAULT_MAX_QUEUED_REQUESTS",
    "PeerInfo",
    "RpcClient",
    "RpcHandlers",
    "RpcConnector",
    "RpcServer",
    "client_options_from_conf",
    "current_peer",
    "error_payload",
    "memory_connector",
    "server_options_from_conf",
    "tcp_connector",
]

log = logging.getLogger("qjournal.transport.rpc")

#: Hadoop's ``ipc.client.connect.timeout`` default (20 s).
DEFAULT_CONNECT_TIMEOUT_MS = 20_000
#: Requests queued or running per server connection before reading pauses.
DEFAULT_MAX_QUEUED_REQUESTS = 1024

_PEER: contextvars.ContextVar["PeerInfo | None"] = contextvars.ContextVar("qjournal_rpc_peer", default=None)


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
    return _PEER.get()


def server_options_from_conf(conf: Any) -> dict[str, int]:
    """``RpcServer`` keyword arguments from configuration.

    Args:
        conf: a :class:`qjournal.config.conf.Configuration`.

    Returns:
        ``{"max_frame_bytes": ipc.maximum.data.length,
        "max_queued_requests": qjournal.rpc.server.max-queued-requests}``.

    Raises:
        ConfigError: a malformed value (names the key).
    """
    return {
        "max_frame_bytes": int(conf.get_bytes("ipc.maximum.data.length")),
        "max_queued_requests": int(conf.get_int("qjournal.rpc.server.max-queued-requests")),
    }


def client_options_from_conf(conf: Any) -> dict[str, int]:
    """``RpcClient.connect_tcp`` / ``connect_memory`` keyword arguments from configuration.

    Args:
        conf: a :class:`qjournal.config.conf.Configuration`.

    Returns:
        ``{"max_frame_bytes": ipc.maximum.data.length,
        "connect_timeout_ms": ipc.client.connect.timeout}``.

    Raises:
        ConfigError: a malformed value (names the key).
    """
    return {
        "max_frame_bytes": int(conf.get_bytes("ipc.maximum.data.length")),
        "connect_timeout_ms": int(conf.get_duration_ms("ipc.client.connect.timeout")),
    }


# --- shared helpers -------------------------------------------------------------------

def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # the socket may already be gone
            pass


def _peer_info(transport: asyncio.BaseTransport) -> PeerInfo:
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


def _rebuild_error(payload: Any, method: str, peer: str) -> BaseException:
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


class _IterationEnd:
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
        self._dirty: list[_Coalescer] = []

    def add(self, coalescer: "_Coalescer") -> None:
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


class _Coalescer:
    """Prompt, coalesced writes: first frame of a loop iteration now, the rest at its end.

    Frames gathered in one iteration go to a socket transport as one joined
    buffer (one ``send``; under TLS one record stream instead of one record per
    frame), and to a :class:`MemoryTransport` one frame per write, so that the
    memory network's fault hook sees whole frames. The end of the iteration is
    a callback of its own (a client's one connection), or one shared by a
    server's connections (``end``, :class:`_IterationEnd`).
    """

    __slots__ = ("_loop", "_end", "_transport", "_out", "_out_bytes", "_per_frame")

    #: gathered bytes beyond which frames are handed over at once (the
    #: transport then sees them and can apply its write back-pressure)
    MAX_GATHER_BYTES = 256 * 1024

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.WriteTransport,
                 end: _IterationEnd | None = None) -> None:
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


class RpcHandlers:
    """One handler object made of several: every ``rpc_<method>`` of each (a daemon that serves
    several protocols on one port, e.g. the NameNode's, plus the refresh calls of
    :mod:`qjournal.security.service_auth`).

    Args:
        handlers: objects with ``rpc_<method>`` coroutines and an optional ``rpc_concurrent`` tuple.

    Raises:
        InvariantViolation: two handlers serve the same method.
    """

    def __init__(self, *handlers: Any) -> None:
        concurrent: list[str] = []
        for h in handlers:
            for name in sorted(dir(type(h))):
                if not name.startswith("rpc_") or name == "rpc_concurrent":
                    continue
                if hasattr(self, name):
                    raise InvariantViolation(f"two protocol handlers serve {name}")
                setattr(self, name, getattr(h, name))
            concurrent.extend(getattr(h, "rpc_concurrent", ()))
        self.rpc_concurrent = tuple(concurrent)


# --- server -------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Method:
    func: Callable[..., Any]
    allowed: frozenset[str] | None  # None: accepts **kwargs
    required: frozenset[str]
    wants_peer: bool
    concurrent: bool


class RpcServer:
    """Serves ``handler.rpc_<method>`` coroutines over TCP, TLS and memory.

    Args:
        handler: object with ``async def rpc_<method>(self, **kwargs)`` methods;
            an optional attribute ``rpc_concurrent`` (collection of method
            names) marks calls that may run concurrently with others of the
            same connection (see the module docstring).
        max_frame_bytes: largest frame accepted or sent
            (``ipc.maximum.data.length``).
        max_queued_requests: per-connection limit of queued plus running
            requests before reading pauses (invariant 5).
        name: used in log messages.
        authorize: ``async authorize(peer, method)`` awaited before every handler call;
            raising a ``QJournalError`` refuses the call (invariant 8). None: no check.

    Attributes:
        metrics: counters ``calls``, ``errors``, ``bad_frames``,
            ``connections_opened``, ``connections_open``.
    """

    def __init__(
        self,
        handler: Any,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_queued_requests: int = DEFAULT_MAX_QUEUED_REQUESTS,
        name: str = "rpc",
        authorize: Callable[[PeerInfo, str], Awaitable[None]] | None = None,
    ) -> None:
        if max_queued_requests < 1:
            raise ValueError(f"max_queued_requests must be >= 1, got {max_queued_requests}")
        tune_allocator()  # large frames without page-fault churn (see qjournal.transport.alloc)
        self.handler = handler
        self.max_frame_bytes = max_frame_bytes
        self.max_queued_requests = max_queued_requests
        self.name = name
        self.authorize = authorize
        concurrent = getattr(handler, "rpc_concurrent", ())
        if isinstance(concurrent, str):
            concurrent = (concurrent,)
        self._concurrent = frozenset(concurrent)
        for method in sorted(self._concurrent):
            if not inspect.iscoroutinefunction(getattr(handler, "rpc_" + method, None)):
                log.warning("%s: rpc_concurrent names %r but the handler has no coroutine rpc_%s",
                            name, method, method)
        self._methods: dict[str, _Method] = {}
        self._tcp_servers: list[asyncio.AbstractServer] = []
        self._memory_listeners: list[MemoryListener] = []
        self._connections: dict[int, _ServerConnection] = {}  # insertion order
        self._next_conn_id = 0
        self._end: _IterationEnd | None = None
        self._stopped = False
        self.metrics = {"calls": 0, "errors": 0, "bad_frames": 0, "connections_opened": 0, "connections_open": 0}

    # --- lifecycle --------------------------------------------------------------------

    async def start_tcp(
        self, host: str, port: int, *, ssl: _ssl.SSLContext | None = None, backlog: int = 128
    ) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 picks a free port).

        Args:
            host: address to bind.
            port: port to bind, 0 for any.
            ssl: server TLS context (see :mod:`qjournal.transport.tls`), or None.
            backlog: listen backlog.

        Returns:
            The bound ``(host, port)``.

        Raises:
            TransportError: the address cannot be bound.
        """
        self._check_running()
        loop = asyncio.get_running_loop()
        try:
            server = await loop.create_server(
                self._protocol_factory, host, port, ssl=ssl, backlog=backlog, reuse_address=True
            )
        except OSError as exc:
            raise TransportError(f"{self.name}: cannot listen on {host}:{port}: {exc}", host=host, port=port) from exc
        self._tcp_servers.append(server)
        bound = server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def start_memory(self, network: MemoryNetwork, address: str) -> str:
        """Listen on ``address`` of an in-memory network.

        Args:
            network: the :class:`MemoryNetwork`.
            address: this server's node name.

        Returns:
            ``address``.

        Raises:
            TransportError: the name is already taken.
        """
        self._check_running()
        listener = network.listen(address, self._protocol_factory)
        self._memory_listeners.append(listener)
        return address

    async def stop(self) -> None:
        """Stop listening, close every connection and cancel running calls."""
        self._stopped = True
        for server in self._tcp_servers:
            server.close()
        for listener in self._memory_listeners:
            listener.close()
        tasks: list[asyncio.Task] = []
        for conn in list(self._connections.values()):
            tasks.extend(conn.shutdown())
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._tcp_servers:
            await server.wait_closed()
        self._tcp_servers.clear()
        self._memory_listeners.clear()

    @property
    def connection_count(self) -> int:
        """Open connections."""
        return len(self._connections)

    def _check_running(self) -> None:
        if self._stopped:
            raise TransportError(f"{self.name}: server was stopped")

    def _iteration_end(self, loop: asyncio.AbstractEventLoop) -> _IterationEnd:
        """The end-of-iteration callback the server's connections share (:class:`_IterationEnd`)."""
        end = self._end
        if end is None or end.loop is not loop:
            end = self._end = _IterationEnd(loop)
        return end

    def _protocol_factory(self) -> "_ServerConnection":
        self._next_conn_id += 1
        return _ServerConnection(self, self._next_conn_id)

    # --- dispatch table -----------------------------------------------------------

    def _lookup(self, method: str) -> _Method:
        entry = self._methods.get(method)
        if entry is not None:
            return entry
        func = getattr(self.handler, "rpc_" + method, None)
        if func is None or not inspect.iscoroutinefunction(func):
            raise InvalidRequestError(f"unknown call {method!r} on {self.name}", method=method)
        sig = inspect.signature(func)
        allowed: set[str] | None = set()
        required: set[str] = set()
        wants_peer = False
        for param in sig.parameters.values():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                allowed = None
                continue
            if param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            if param.name == "_peer":
                wants_peer = True
                continue
            if allowed is not None:
                allowed.add(param.name)
            if param.default is inspect.Parameter.empty:
                required.add(param.name)
        entry = _Method(
            func=func,
            allowed=frozenset(allowed) if allowed is not None else None,
            required=frozenset(required),
            wants_peer=wants_peer,
            concurrent=method in self._concurrent,
        )
        self._methods[method] = entry
        return entry


class _ServerConnection(asyncio.Protocol):
    """Server side of one connection: decode, dispatch, respond."""

    def __init__(self, server: RpcServer, conn_id: int) -> None:
        self._server = server
        self._id = conn_id
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._writer: _Coalescer | None = None
        self._decoder = FrameDecoder(server.max_frame_bytes)
        self._peer = PeerInfo("?", "?")
        self._context: contextvars.Context | None = None
        self._queue: deque[tuple[int, str, _Method, dict]] = deque()
        self._waiter: asyncio.Future | None = None
        self._worker: asyncio.Task | None = None
        self._tasks: dict[int, asyncio.Task] = {}  # concurrent calls by a number of their own, insertion order
        self._next_task_key = 0
        self._in_flight = 0  # queued + running
        self._paused = False  # too many requests queued or running (invariant 5)
        self._write_paused = False  # the peer does not read our responses fast enough
        self._writable: asyncio.Future | None = None  # resolved when writing may resume
        self._reading = True
        self._draining = False  # a bad frame arrived: finish what is in flight, then close
        self._closed = False

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        _set_nodelay(transport)
        self._writer = _Coalescer(self._loop, transport,  # type: ignore[arg-type]
                                  self._server._iteration_end(self._loop))
        self._peer = _peer_info(transport)
        self._decoder.stream_name = f"{self._server.name} connection from {self._peer.address}"
        ctx = contextvars.copy_context()
        ctx.run(_PEER.set, self._peer)
        self._context = ctx
        server = self._server
        server._connections[self._id] = self
        server.metrics["connections_opened"] += 1
        server.metrics["connections_open"] += 1
        if server._stopped:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._closed:
            return
        self._closed = True
        server = self._server
        if server._connections.pop(self._id, None) is not None:
            server.metrics["connections_open"] -= 1
        # Calls already running finish (a handler is never interrupted half-way
        # because its caller went away); their responses are dropped. Queued
        # calls that had not started are forgotten, as if never received.
        self._queue.clear()
        self._release_writable()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._closed or self._draining:
            return
        messages, error = self._decoder.feed_all(data)
        try:
            for msg in messages:
                if self._closed or self._draining:
                    return
                self._dispatch(msg)
        except Exception:  # a bug, not bad input: end this connection only (invariant 3)
            log.exception("%s: dispatch failed on connection from %s", self._server.name, self._peer.address)
            self._transport.abort()  # type: ignore[union-attr]
            self.connection_lost(None)
            return
        if error is not None:
            self._bad_frame(error)

    def eof_received(self) -> bool | None:
        if self._decoder.buffered_bytes:
            self._server.metrics["bad_frames"] += 1
            log.warning(
                "%s: connection from %s closed in the middle of a frame (%d bytes buffered)",
                self._server.name, self._peer.address, self._decoder.buffered_bytes,
            )
        return None  # close our side too

    # --- internals ---------------------------------------------------------------------

    def _bad_frame(self, exc: Exception) -> None:
        # Invariant 3: only this connection ends. Requests that arrived before
        # the bad frame are still answered, then the connection is closed.
        self._server.metrics["bad_frames"] += 1
        log.warning("%s: closing connection from %s: %s", self._server.name, self._peer.address, exc)
        self._draining = True
        if self._in_flight == 0:
            self._close_drained()
        else:
            self._update_reading()

    def _close_drained(self) -> None:
        self._writer.flush_now()  # type: ignore[union-attr]
        self._transport.close()  # type: ignore[union-attr]

    def _dispatch(self, msg: Any) -> None:
        server = self._server
        try:
            request_id, method, kwargs = check_request(msg)
        except ProtocolError as exc:
            self._bad_frame(exc)
            return
        except InvalidRequestError as exc:
            self._respond_error(exc.fields.get("request_id", 0), exc)
            return
        try:
            entry = server._lookup(method)
            keys = kwargs.keys()
            if entry.allowed is not None and not keys <= entry.allowed:
                extra = sorted(keys - entry.allowed)
                raise InvalidRequestError(
                    f"call {method}: unexpected argument(s) {', '.join(extra)}; "
                    f"accepted: {', '.join(sorted(entry.allowed)) or '(none)'}",
                    method=method, unexpected=extra,
                )
            if not entry.required <= keys:
                missing = sorted(entry.required - keys)
                raise InvalidRequestError(
                    f"call {method}: missing required argument(s) {', '.join(missing)}",
                    method=method, missing=missing,
                )
            if "_peer" in kwargs:
                raise InvalidRequestError(f"call {method}: argument _peer is reserved", method=method)
        except InvalidRequestError as exc:
            self._respond_error(request_id, exc)
            return
        server.metrics["calls"] += 1
        self._in_flight += 1
        if self._in_flight >= server.max_queued_requests and not self._paused:
            self._paused = True
            self._update_reading()
        if entry.concurrent:
            key = self._next_task_key = self._next_task_key + 1
            self._tasks[key] = self._loop.create_task(
                self._run(request_id, method, entry, kwargs, key),
                context=self._context.copy(),  # type: ignore[union-attr]
            )
            return
        self._queue.append((request_id, method, entry, kwargs))
        if self._worker is None:
            self._worker = self._loop.create_task(self._work(), context=self._context)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _work(self) -> None:
        queue = self._queue
        while not self._closed:
            if not queue:
                self._waiter = self._loop.create_future()
                await self._waiter
                self._waiter = None
                continue
            if self._writable is not None:
                await self._writable
                continue
            request_id, method, entry, kwargs = queue.popleft()
            try:
                await self._run(request_id, method, entry, kwargs)
            except Exception:  # a bug below the handler (e.g. a fault hook): end this connection only
                log.exception("%s: connection from %s failed while answering %s", self._server.name,
                              self._peer.address, method)
                self._transport.abort()  # type: ignore[union-attr]
                self.connection_lost(None)
                return

    async def _run(self, request_id: int, method: str, entry: _Method, kwargs: dict,
                   alone: int = 0) -> None:
        """Run one call and write its answer: one coroutine per call, the whole of it (a call in its
        own task, ``alone`` its key in :attr:`_tasks`, also removes that task from there and ends the
        connection on a bug below the handler, which the queue's worker does for the others)."""
        server = self._server
        try:
            try:
                if server.authorize is not None:  # invariant 8
                    await server.authorize(self._peer, method)
                if entry.wants_peer:
                    kwargs["_peer"] = self._peer
                result = await entry.func(**kwargs)
            except asyncio.CancelledError:
                raise
            except QJournalError as exc:
                self._respond_error(request_id, exc)
                return
            except InvariantViolation as exc:
                # The caller learns of it typed; then this process ends (invariant 7).
                self._respond_error(request_id, exc)
                fatal(f"{server.name}: call {method} from {self._peer.address} broke an invariant", exc)
                return
            except Exception as exc:
                log.error("%s: call %s from %s failed", server.name, method, self._peer.address, exc_info=True)
                self._respond_error(request_id, exc)
                return
            if self._closed:
                return
            try:
                frame = encode_response(request_id, True, result, server.max_frame_bytes)
            except FrameTooLargeError as exc:
                exc = FrameTooLargeError(f"call {method}: response {exc.message}", method=method, **exc.fields)
                self._respond_error(request_id, exc)
                return
            except Exception as exc:  # result not serialisable: a handler bug
                log.error("%s: call %s returned a value msgpack cannot encode: %r", server.name, method, exc)
                self._respond_error(
                    request_id, RemoteError(f"call {method}: result cannot be encoded: {exc}", method=method)
                )
                return
            self._writer.write(frame)  # type: ignore[union-attr]
        except Exception:
            if not alone:
                raise  # to the worker (_work), which ends the connection
            # a bug below the handler (e.g. a fault hook): end this connection only
            log.exception("%s: connection from %s failed while answering %s", server.name,
                          self._peer.address, method)
            if not self._closed:
                self._transport.abort()  # type: ignore[union-attr]
                self.connection_lost(None)
        finally:
            self._done_one()
            if alone:
                self._tasks.pop(alone, None)

    def _done_one(self) -> None:
        """Account for a finished call; call after its response was written."""
        self._in_flight -= 1
        if self._closed:
            return
        if self._draining:
            if self._in_flight == 0:
                self._close_drained()
            return
        if self._paused and self._in_flight <= self._server.max_queued_requests // 2:
            self._paused = False
            self._update_reading()

    def _update_reading(self) -> None:
        """Read from the peer only while neither back-pressure condition holds."""
        want = not (self._paused or self._write_paused or self._draining or self._closed)
        if want != self._reading:
            self._reading = want
            if want:
                self._transport.resume_reading()  # type: ignore[union-attr]
            else:
                self._transport.pause_reading()  # type: ignore[union-attr]

    def pause_writing(self) -> None:
        # The transport's write buffer is above its high-water mark: stop
        # reading requests and starting queued ones, so that responses cannot
        # pile up without bound (invariant 5).
        self._write_paused = True
        if self._writable is None:
            self._writable = self._loop.create_future()
        if not self._closed:
            self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._release_writable()
        if not self._closed:
            self._update_reading()

    def _release_writable(self) -> None:
        writable = self._writable
        self._writable = None
        if writable is not None and not writable.done():
            writable.set_result(None)

    def _respond_error(self, request_id: int, exc: BaseException) -> None:
        self._server.metrics["errors"] += 1
        if self._closed:
            return
        try:
            frame = encode_response(request_id, False, error_payload(exc), self._server.max_frame_bytes)
        except Exception as enc_exc:  # fields still not encodable, or huge: send the bare message
            frame = encode_response(
                request_id, False,
                {"type": "RemoteError", "message": f"{type(exc).__name__}: {str(exc)[:4096]} "
                                                   f"(error not encodable: {enc_exc})", "fields": {}},
            )
        self._writer.write(frame)  # type: ignore[union-attr]

    def shutdown(self) -> list[asyncio.Task]:
        """Abort the connection and cancel its running calls (server stop)."""
        tasks = list(self._tasks.values())
        if self._worker is not None:
            tasks.append(self._worker)
        if self._transport is not None:
            self._transport.abort()
        self.connection_lost(None)
        for task in tasks:
            task.cancel()
        return tasks


# --- client -------------------------------------------------------------------------------

class _ClientProtocol(asyncio.Protocol):
    __slots__ = ("_client",)

    def __init__(self, client: "RpcClient") -> None:
        self._client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._client._connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._client._data_received(data)

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._client._connection_lost(exc)


class RpcClient:
    """One connection to an :class:`RpcServer`; calls pipeline on it.

    Build with :meth:`connect_tcp` or :meth:`connect_memory`. Reconnecting is
    the caller's job: check :attr:`is_closed` and connect again.

    Args:
        max_frame_bytes: largest frame sent or accepted.
        default_timeout_ms: deadline of calls made without ``timeout_ms``
            (None: no deadline).
    """

    def __init__(self, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES, default_timeout_ms: int | None = None):
        tune_allocator()  # large frames without page-fault churn (see qjournal.transport.alloc)
        self.max_frame_bytes = max_frame_bytes
        self.default_timeout_ms = default_timeout_ms
        self.peer = "?"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: asyncio.Transport | None = None
        self._writer: _Coalescer | None = None
        self._decoder = FrameDecoder(max_frame_bytes)
        self._pending: dict[int, tuple[asyncio.Future, str]] = {}
        self._next_id = 1
        self._closed_error: TransportError | None = None
        self._answered = False  # any bytes from the server yet
        self._lost: asyncio.Future | None = None
        self._deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, request id, timeout_ms)
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf

    # --- construction ---------------------------------------------------------------------

    @classmethod
    async def connect_tcp(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout_ms: int | None = DEFAULT_CONNECT_TIMEOUT_MS,
        ssl: _ssl.SSLContext | None = None,
        server_hostname: str | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        default_timeout_ms: int | None = None,
    ) -> "RpcClient":
        """Connect over TCP (or TLS when ``ssl`` is given).

        Args:
            host: server host.
            port: server port.
            connect_timeout_ms: deadline for TCP connect plus TLS handshake
                (``ipc.client.connect.timeout``); None waits forever.
            ssl: client TLS context (:func:`qjournal.transport.tls.client_context`).
            server_hostname: name to check the server certificate against
                (default ``host``).
            max_frame_bytes: see class docstring.
            default_timeout_ms: see class docstring.

        Returns:
            A connected client.

        Raises:
            TransportError: refused, unreachable, TLS handshake failed, or the
                connect timed out.
        """
        client = cls(max_frame_bytes=max_frame_bytes, default_timeout_ms=default_timeout_ms)
        loop = asyncio.get_running_loop()
        client.peer = f"{host}:{port}"
        kwargs: dict[str, Any] = {}
        if ssl is not None:
            kwargs["ssl"] = ssl
            kwargs["server_hostname"] = server_hostname if server_hostname is not None else host
        coro = loop.create_connection(lambda: _ClientProtocol(client), host, port, **kwargs)
        try:
            if connect_timeout_ms is None:
                await coro
            else:
                await asyncio.wait_for(coro, connect_timeout_ms / 1000.0)
        except asyncio.TimeoutError:
            raise TransportError(
                f"connect to {host}:{port} timed out after {connect_timeout_ms} ms "
                f"(config key ipc.client.connect.timeout)",
                peer=client.peer, connect_timeout_ms=connect_timeout_ms,
            ) from None
        except (OSError, _ssl.SSLError) as exc:
            raise TransportError(f"connect to {host}:{port} failed: {exc}", peer=client.peer) from exc
        return client

    @classmethod
    async def connect_memory(
        cls,
        network: MemoryNetwork,
        address: str,
        *,
        src: str = "client",
        connect_timeout_ms: int | None = DEFAULT_CONNECT_TIMEOUT_MS,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        default_timeout_ms: int | None = None,
    ) -> "RpcClient":
        """Connect over an in-memory network.

        Args:
            network: the :class:`MemoryNetwork`.
            address: the server's node name.
            src: this client's node name (partitions and the fault hook see it).
            connect_timeout_ms: how long a connect across a partition waits.
            max_frame_bytes: see class docstring.
            default_timeout_ms: see class docstring.

        Returns:
            A connected client.

        Raises:
            TransportError: nothing listens on ``address`` or the nodes are
                partitioned.
        """
        client = cls(max_frame_bytes=max_frame_bytes, default_timeout_ms=default_timeout_ms)
        client.peer = address
        await network.connect(src, address, lambda: _ClientProtocol(client), connect_timeout_ms)
        return client

    # --- calls -----------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """True once the connection is closed or lost; a new client is needed."""
        return self._closed_error is not None

    @property
    def pending_calls(self) -> int:
        """Calls sent and not yet completed."""
        return len(self._pending)

    async def call(self, method: str, /, timeout_ms: int | None = None, **kwargs: Any) -> Any:
        """Call ``method`` on the server and wait for its result.

        Handler arguments cannot be named ``timeout_ms``.

        Args:
            method: the call name (the handler's ``rpc_<method>``).
            timeout_ms: deadline of this call; None uses ``default_timeout_ms``.
            **kwargs: the call's arguments (msgpack-able values).

        Returns:
            The handler's result.

        Raises:
            QJournalError: the handler's typed error, rebuilt (same class and
                fields); ``RemoteError`` for an untyped one.
            InvariantViolation: the handler broke an invariant.
            InvalidRequestError: unknown call or bad arguments.
            RpcTimeoutError: no response before the deadline.
            TransportError: the connection is closed or was lost.
            FrameTooLargeError: the request exceeds ``max_frame_bytes``.
        """
        fut, request_id = self._send(method, timeout_ms, kwargs)
        try:
            return await fut
        finally:
            pending = self._pending
            if pending.pop(request_id, None) is not None and not pending and self._sweep_handle is not None:
                self._stop_sweep()  # cancelled: the call is forgotten (see _data_received)

    def send(self, method: str, /, timeout_ms: int | None = None, **kwargs: Any) -> ListenedFuture:
        """Write the call now and return the future of its result: :meth:`call` without a coroutine,
        for a caller that reacts to the answer in a listener (:class:`ListenedFuture`: called in the
        iteration the answer is read in, where a done-callback runs one later and a task two).

        A cancelled future's call is forgotten when its answer or its deadline comes.

        Raises:
            TransportError: the connection is closed.
            FrameTooLargeError, TypeError: the request cannot be sent.
            (The future fails as :meth:`call` raises.)
        """
        return self._send(method, timeout_ms, kwargs, True)[0]  # type: ignore[return-value]

    def _send(self, method: str, timeout_ms: int | None, kwargs: dict,
              listened: bool = False) -> tuple[asyncio.Future, int]:
        if self._closed_error is not None:
            raise TransportError(
                f"call {method} to {self.peer}: {self._closed_error.message}", method=method, peer=self.peer
            )
        request_id = self._next_id
        self._next_id = request_id + 1
        try:
            frame = encode_request(request_id, method, kwargs, self.max_frame_bytes)
        except FrameTooLargeError as exc:
            raise FrameTooLargeError(f"call {method} to {self.peer}: request {exc.message}", method=method,
                                     **exc.fields) from None
        except TypeError as exc:
            raise TypeError(f"call {method}: arguments cannot be encoded: {exc}") from None
        loop = self._loop
        fut = ListenedFuture(loop=loop) if listened else loop.create_future()  # type: ignore[union-attr]
        pending = self._pending
        alone = not pending  # no other call in flight: no gathering window for this one
        pending[request_id] = (fut, method)
        if timeout_ms is None:
            timeout_ms = self.default_timeout_ms
        try:
            self._writer.write(frame, alone)  # type: ignore[union-attr]
        except BaseException:
            self._pending.pop(request_id, None)
            raise
        if timeout_ms is not None:
            # One sweep timer per client instead of one timer per call: the
            # deadline heap is pruned lazily (entries of finished calls are
            # skipped), which keeps the hot path to one heappush.
            deadline = loop.time() + timeout_ms / 1000.0  # type: ignore[union-attr]
            heap = self._deadlines
            heapq.heappush(heap, (deadline, request_id, timeout_ms))
            if deadline < self._sweep_at:
                self._arm_sweep(deadline)
            elif len(heap) > 64 and len(heap) > 4 * len(self._pending):
                self._deadlines = [e for e in heap if e[1] in self._pending]
                heapq.heapify(self._deadlines)
        return fut, request_id

    async def close(self) -> None:
        """Close the connection; pending calls fail with :class:`TransportError`."""
        if self._transport is None:
            return
        if self._closed_error is None:
            self._fail_all(TransportError(f"connection to {self.peer} closed by this client", peer=self.peer))
            self._transport.abort()
        if self._lost is not None:
            await self._lost

    async def wait_closed(self) -> None:
        """Wait until the connection is closed or lost (for whatever reason)."""
        if self._lost is not None:
            await self._lost

    async def __aenter__(self) -> "RpcClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    # --- protocol callbacks -------------------------------------------------------------

    def _connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport  # type: ignore[assignment]
        _set_nodelay(transport)
        self._writer = _Coalescer(self._loop, transport)  # type: ignore[arg-type]
        self._lost = self._loop.create_future()
        self._decoder.stream_name = f"connection to {self.peer}"

    def _data_received(self, data: bytes) -> None:
        if self._closed_error is not None:
            return
        messages, error = self._decoder.feed_all(data)
        self._answered = True
        pending = self._pending
        for msg in messages:
            if type(msg) is not list or len(msg) != 4 or msg[0] != KIND_RESPONSE or type(msg[1]) is not int:
                self._protocol_failure(
                    ProtocolError(f"connection to {self.peer}: expected a response [1, id, ok, payload], "
                                  f"got {msg!r:.100}", peer=self.peer)
                )
                return
            entry = pending.pop(msg[1], None)
            if entry is None:
                continue  # expired or cancelled call: a late response (invariant 4)
            fut, method = entry
            if fut.done():
                continue
            if msg[2] is True:
                fut.set_result(msg[3])
            else:
                fut.set_exception(_rebuild_error(msg[3], method, self.peer))
        if not pending and self._sweep_handle is not None:
            # Nothing in flight: leave no timer behind (a virtual-time loop
            # would otherwise jump to a deadline nobody waits for).
            self._stop_sweep()
        if error is not None:
            self._protocol_failure(error)

    def _connection_lost(self, exc: Exception | None) -> None:
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if exc is None and not self._answered and self._transport is not None and \
                self._transport.get_extra_info("sslcontext") is not None:
            # TLS 1.3: the server checks our certificate after our handshake ended, and asyncio
            # drops its alert; a close before any answer is how a refusal looks from here.
            reason += (" before answering: a TLS server does so when it refuses this client's certificate "
                       "(none, expired, or not signed by its CA); the server's log says why")
        if self._closed_error is None:
            self._fail_all(TransportError(f"connection to {self.peer} lost ({reason})", peer=self.peer))
        if self._lost is not None and not self._lost.done():
            self._lost.set_result(None)

    def _protocol_failure(self, exc: TransportError) -> None:
        log.warning("closing connection to %s: %s", self.peer, exc)
        self._fail_all(exc)
        self._transport.abort()  # type: ignore[union-attr]

    def _fail_all(self, error: TransportError) -> None:
        self._closed_error = error
        self._stop_sweep()
        pending = self._pending
        self._pending = {}
        for request_id, (fut, method) in pending.items():
            if not fut.done():
                fields = dict(error.fields)
                fields["method"] = method
                fut.set_exception(type(error)(f"call {method} (request {request_id}): {error.message}", **fields))

    def _arm_sweep(self, when: float) -> None:
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
        self._sweep_at = when
        self._sweep_handle = self._loop.call_at(when, self._sweep)  # type: ignore[union-attr]

    def _sweep(self) -> None:
        """Expire every call whose deadline has passed; re-arm for the next one."""
        self._sweep_handle = None
        self._sweep_at = math.inf
        now = self._loop.time()  # type: ignore[union-attr]
        heap = self._deadlines
        pending = self._pending
        while heap and (heap[0][0] <= now or heap[0][1] not in pending):
            _, request_id, timeout_ms = heapq.heappop(heap)
            if request_id in pending:
                self._expire(request_id, timeout_ms)
        if heap:
            self._arm_sweep(heap[0][0])

    def _stop_sweep(self) -> None:
        if self._sweep_handle is not None:
            self._sweep_handle.cancel()
            self._sweep_handle = None
        self._sweep_at = math.inf
        self._deadlines = []

    def _expire(self, request_id: int, timeout_ms: int) -> None:
        entry = self._pending.pop(request_id, None)
        if entry is None:
            return
        fut, method = entry
        if not fut.done():
            fut.set_exception(
                RpcTimeoutError(
                    f"call {method} to {self.peer} timed out after {timeout_ms} ms",
                    method=method, peer=self.peer, timeout_ms=timeout_ms,
                )
            )

    def __repr__(self) -> str:
        return f"<RpcClient {self.peer} {'closed' if self.is_closed else 'open'} pending={len(self._pending)}>"


#: ``(host, port) -> a connected RpcClient``: how one process reaches another. Code that connects
#: takes one, so the same code runs over TCP (``tcp_connector``) or the simulator's memory network
#: (``memory_connector``).
RpcConnector = Callable[[str, int], Awaitable[RpcClient]]


def tcp_connector(*, ssl: _ssl.SSLContext | None = None,
                  connect_timeout_ms: int | None = DEFAULT_CONNECT_TIMEOUT_MS,
                  max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> RpcConnector:
    """An :data:`RpcConnector` over TCP (TLS when ``ssl`` is given)."""
    async def connect(host: str, port: int) -> RpcClient:
        return await RpcClient.connect_tcp(host, port, ssl=ssl, connect_timeout_ms=connect_timeout_ms,
                                           max_frame_bytes=max_frame_bytes)
    return connect


def memory_connector(network: MemoryNetwork, src: str, *,
                     connect_timeout_ms: int | None = DEFAULT_CONNECT_TIMEOUT_MS,
                     max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> RpcConnector:
    """An :data:`RpcConnector` over a memory network: ``host:port`` is the server's network address,
    ``src`` this process's name on the network."""
    async def connect(host: str, port: int) -> RpcClient:
        return await RpcClient.connect_memory(network, f"{host}:{port}", src=src,
                                              connect_timeout_ms=connect_timeout_ms,
                                              max_frame_bytes=max_frame_bytes)
    return connect
