"""The RPC server: ``RpcServer`` serves a handler's calls over TCP, TLS and the memory network.

Why this module exists: every qjournal daemon serves its protocols through it (the JournalNode,
the NameNode, the ZKFC). It turns a handler object's ``async def rpc_<method>(**kwargs)`` into a
network service with typed errors, pipelining and bounded frames, over TCP, TLS, or the in-memory
network of :mod:`qjournal.transport.memory` (same code path for all three: asyncio ``Protocol``
objects fed by whichever ``Transport`` carries the bytes). The wire it speaks is
:mod:`qjournal.transport.frames` and :mod:`qjournal.transport.wire`.

Theory of operation
-------------------
Each connection decodes frames in arrival order. A handler names the protocols it serves
(``rpc_protocols``, tables of :mod:`qjournal.protocol.protocols`): the table says which
arguments a call takes (unknown or missing ones are refused before the handler runs), decodes
each argument with its wire type, and says which calls may run concurrently. A handler without
tables (tests, benchmarks) is served by its methods' signatures and its ``rpc_concurrent``
collection. A concurrent call starts at once in its own task. Every other request joins the
connection's FIFO queue, served by one worker task that awaits each call before starting the
next: calls of one connection run **in arrival order**, one at a time. This is the ordering
the quorum writer relies on (Hadoop's single-threaded ``IPCLoggerChannel`` executor):
``start_log_segment``, ``journal`` batches, ``finalize_log_segment`` of one writer are applied
in the order they were sent.

The first server or client of a process raises glibc's malloc thresholds
(:mod:`qjournal.transport.alloc`) so that large frames do not page-fault.

The handler learns its caller through :func:`~qjournal.transport.wire.current_peer` (a
contextvar set for every call) or, if the method declares a ``_peer`` parameter, through that
keyword argument. Both hold a :class:`~qjournal.transport.wire.PeerInfo`. ``_peer`` can never be
sent by a client.

Authorization. A server built with an ``authorize(peer, method)`` coroutine
(:mod:`qjournal.security.service_auth`) awaits it before every handler call,
in the call's turn (FIFO order holds); a typed error from it is the call's
answer and the handler never runs (invariant 8).

Errors (the wire format: :mod:`qjournal.transport.wire`). Any exception that is not a
:class:`QJournalError` or :class:`InvariantViolation` is logged with its traceback and
travels as :class:`RemoteError`. After answering an :class:`InvariantViolation` the server
ends the process (invariant 7).

Invariants
----------
1. A connection's non-concurrent calls execute one at a time in arrival order.
2. Every request that is dispatched gets exactly one response (result or
   error) unless the connection is lost first.
3. A malformed, oversized or undecodable frame closes only the connection it
   arrived on; the server keeps serving every other connection. No request
   content can make the server stop.
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
9. A handler with protocol tables runs only for a method of its tables, with exactly the
   table's arguments, each decoded by its wire type.

(Invariant 4 is the client's: :mod:`qjournal.transport.client`.)
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import ssl as _ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from qjournal.errors import (FrameTooLargeError, InvalidRequestError, InvariantViolation, ProtocolError,
                             QJournalError, RemoteError, TransportError)
from qjournal.protocol.rpc_contract import RpcMethod, RpcProtocol
from qjournal.transport import ipc_trace
from qjournal.transport.alloc import tune_allocator
from qjournal.transport.frames import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, check_request, encode_response
from qjournal.transport.memory import MemoryListener, MemoryNetwork
from qjournal.transport.wire import (PEER, Coalescer, IterationEnd, PeerInfo, error_payload, peer_info,
                                     set_nodelay)
from qjournal.util.logs import TRACE
from qjournal.util.tasks import fatal

__all__ = ["DEFAULT_MAX_QUEUED_REQUESTS", "RpcHandlers", "RpcServer", "server_options_from_conf"]

log = logging.getLogger("qjournal.transport.server")

#: Requests queued or running per server connection before reading pauses.
DEFAULT_MAX_QUEUED_REQUESTS = 1024


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



class RpcHandlers:
    """One handler object made of several: every ``rpc_<method>`` of each, and their protocol tables
    (a daemon that serves several protocols on one port, e.g. the NameNode's, plus the refresh calls
    of :mod:`qjournal.security.service_auth`).

    Args:
        handlers: objects with ``rpc_<method>`` coroutines and their ``rpc_protocols`` (or, without
            tables, an optional ``rpc_concurrent`` tuple).

    Raises:
        InvariantViolation: two handlers serve the same method, or some have tables and others not.
    """

    def __init__(self, *handlers: Any) -> None:
        concurrent: list[str] = []
        protocols: list[RpcProtocol] = []
        with_tables = {getattr(h, "rpc_protocols", None) is not None for h in handlers}
        if len(with_tables) > 1:
            raise InvariantViolation("RpcHandlers: every handler names its protocols, or none does")
        for h in handlers:
            for name in sorted(dir(type(h))):
                if not name.startswith("rpc_") or name in ("rpc_concurrent", "rpc_protocols"):
                    continue
                if hasattr(self, name):
                    raise InvariantViolation(f"two protocol handlers serve {name}")
                setattr(self, name, getattr(h, name))
            concurrent.extend(getattr(h, "rpc_concurrent", ()))
            protocols.extend(getattr(h, "rpc_protocols", None) or ())
        self.rpc_concurrent = tuple(concurrent)
        if with_tables == {True}:
            self.rpc_protocols = tuple(protocols)


@dataclass(frozen=True, slots=True)
class _Method:
    func: Callable[..., Any]
    allowed: frozenset[str] | None  # None: accepts **kwargs
    required: frozenset[str]
    wants_peer: bool
    concurrent: bool
    #: (argument, decoder) of every argument the table types (invariant 9)
    decoders: tuple[tuple[str, Callable[[Any, str, str], Any]], ...] = ()


class RpcServer:
    """Serves ``handler.rpc_<method>`` coroutines over TCP, TLS and memory.

    Args:
        handler: object with ``async def rpc_<method>(self, **kwargs)`` methods and an attribute
            ``rpc_protocols``: the tables (:mod:`qjournal.protocol.protocols`) of the methods it
            serves, which say each call's arguments and whether it runs concurrently (invariant 9).
            A handler without tables (tests, benchmarks) is served by its methods' signatures, and
            an optional ``rpc_concurrent`` collection of method names marks the concurrent calls.
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
        protocols = getattr(handler, "rpc_protocols", None)
        #: the contract of every method served, when the handler names its protocols (invariant 9)
        self._table: dict[str, RpcMethod] | None = None
        if protocols is not None:
            self._table = {}
            for p in protocols:
                for m in p:
                    if m.name in self._table:
                        raise InvariantViolation(f"{name}: method {m.name} is in two of the handler's protocols")
                    if not inspect.iscoroutinefunction(getattr(handler, "rpc_" + m.name, None)):
                        raise InvariantViolation(f"{name}: the handler has no coroutine rpc_{m.name} of "
                                                 f"{p.name}")
                    self._table[m.name] = m
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
        self._end: IterationEnd | None = None
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

    def _iteration_end(self, loop: asyncio.AbstractEventLoop) -> IterationEnd:
        """The end-of-iteration callback the server's connections share (:class:`IterationEnd`)."""
        end = self._end
        if end is None or end.loop is not loop:
            end = self._end = IterationEnd(loop)
        return end

    def _protocol_factory(self) -> "_ServerConnection":
        self._next_conn_id += 1
        return _ServerConnection(self, self._next_conn_id)

    # --- dispatch table -----------------------------------------------------------

    def _lookup(self, method: str) -> _Method:
        entry = self._methods.get(method)
        if entry is not None:
            return entry
        table = self._table
        spec = table.get(method) if table is not None else None
        func = getattr(self.handler, "rpc_" + method, None) if table is None or spec is not None else None
        if func is None or not inspect.iscoroutinefunction(func):
            raise InvalidRequestError(f"unknown call {method!r} on {self.name}", method=method)
        if spec is not None:
            entry = _Method(func=func, allowed=spec.arg_names, required=spec.required_args,
                            wants_peer="_peer" in inspect.signature(func).parameters, concurrent=spec.concurrent,
                            decoders=tuple((a.name, a.type.decode) for a in spec.args if a.type.decode is not None))
            self._methods[method] = entry
            return entry
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
        self._writer: Coalescer | None = None
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
        #: request id -> dispatch time, only while IPC tracing is on (ipc_trace.py; empty otherwise)
        self._traced: dict[int, float] = {}

    # --- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        set_nodelay(transport)
        self._writer = Coalescer(self._loop, transport,  # type: ignore[arg-type]
                                  self._server._iteration_end(self._loop))
        self._peer = peer_info(transport)
        self._decoder.stream_name = f"{self._server.name} connection from {self._peer.address}"
        ctx = contextvars.copy_context()
        ctx.run(PEER.set, self._peer)
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
            for arg, decode in entry.decoders:  # invariant 9: the handler gets the table's types
                if arg in kwargs:
                    kwargs[arg] = decode(kwargs[arg], method, arg)
        except InvalidRequestError as exc:
            self._respond_error(request_id, exc, method)
            return
        server.metrics["calls"] += 1
        if ipc_trace.enabled(ipc_trace.SERVER):
            self._traced[request_id] = self._loop.time()
            ipc_trace.SERVER.log(TRACE, "%d: Call <- %s: %s %s", request_id, self._peer.address, method,
                                 ipc_trace.describe_args(kwargs))
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
                self._respond_error(request_id, exc, method)
                return
            except InvariantViolation as exc:
                # The caller learns of it typed; then this process ends (invariant 7).
                self._respond_error(request_id, exc, method)
                fatal(f"{server.name}: call {method} from {self._peer.address} broke an invariant", exc)
                return
            except Exception as exc:
                log.error("%s: call %s from %s failed", server.name, method, self._peer.address, exc_info=True)
                self._respond_error(request_id, exc, method)
                return
            if self._closed:
                return
            try:
                frame = encode_response(request_id, True, result, server.max_frame_bytes)
            except FrameTooLargeError as exc:
                exc = FrameTooLargeError(f"call {method}: response {exc.message}", method=method, **exc.fields)
                self._respond_error(request_id, exc, method)
                return
            except Exception as exc:  # result not serialisable: a handler bug
                log.error("%s: call %s returned a value msgpack cannot encode: %r", server.name, method, exc)
                self._respond_error(
                    request_id, RemoteError(f"call {method}: result cannot be encoded: {exc}", method=method)
                )
                return
            self._writer.write(frame)  # type: ignore[union-attr]
            if self._traced:
                self._trace_answer(request_id, method, ipc_trace.describe_result(result), len(frame))
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

    def _trace_answer(self, request_id: int, method: str, what: str, nbytes: int) -> None:
        t0 = self._traced.pop(request_id, None)
        if t0 is not None:
            ipc_trace.SERVER.log(TRACE, "%d: Response -> %s: %s %s (%d B, %.3f ms)", request_id, self._peer.address,
                                 method, what, nbytes, (self._loop.time() - t0) * 1000.0)

    def _respond_error(self, request_id: int, exc: BaseException, method: str = "") -> None:
        self._server.metrics["errors"] += 1
        if self._traced:
            self._trace_answer(request_id, method, f"{type(exc).__name__}: {str(exc)[:200]}", 0)
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

