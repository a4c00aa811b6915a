"""The RPC client: ``RpcClient``, one connection on which calls pipeline, and the connectors.

Why this module exists: every qjournal process that calls another (the quorum writer and
readers to the JournalNodes, DFS clients, ZKFCs and tools to the NameNodes) does so through it,
with pipelining, deadlines and bounded frames, over TCP, TLS or the memory network. The wire it
speaks is :mod:`qjournal.transport.frames` and :mod:`qjournal.transport.wire`.

Theory of operation
-------------------
Each :meth:`RpcClient.call` takes the next request id, encodes ``[0, id, method, kwargs]``,
registers a future under the id and writes the frame. A method is named by its protocol
table's row (:class:`~qjournal.protocol.rpc_contract.RpcMethod`, which is its wire name) or
by a plain string. Responses ``[1, id, ok, payload]`` complete the future with that id, in
whatever order they arrive, so any number of calls pipeline on one connection. A call's
deadline fails it with :class:`RpcTimeoutError` and forgets the id; a response arriving later
is discarded. Deadlines live in one heap per client served by a single sweep timer armed for
the earliest one (entries of finished calls are skipped lazily; the timer is dropped whenever
no call is in flight), so a pipelined call costs one ``heappush``, not a timer. When the
connection dies, every pending call fails with :class:`TransportError`.

Invariants
----------
4. A client call completes exactly once: result, typed error, timeout, or
   transport failure; responses for unknown or expired ids are discarded.

(The other invariants are the server's: :mod:`qjournal.transport.server`.)
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import ssl as _ssl
from typing import Any, Awaitable, Callable

from qjournal.errors import FrameTooLargeError, ProtocolError, RpcTimeoutError, TransportError
from qjournal.transport import ipc_trace
from qjournal.transport.alloc import tune_allocator
from qjournal.transport.frames import DEFAULT_MAX_FRAME_BYTES, KIND_RESPONSE, FrameDecoder, encode_request
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport.tls import REFUSED_CERTIFICATE_HINT
from qjournal.transport.wire import Coalescer, rebuild_error, set_nodelay
from qjournal.util.futures import ListenedFuture
from qjournal.util.logs import TRACE

__all__ = ["DEFAULT_CONNECT_TIMEOUT_MS", "RpcClient", "RpcConnector", "client_options_from_conf",
           "memory_connector", "tcp_connector"]

log = logging.getLogger("qjournal.transport.client")

#: Hadoop's ``ipc.client.connect.timeout`` default (20 s).
DEFAULT_CONNECT_TIMEOUT_MS = 20_000


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
        self._writer: Coalescer | None = None
        self._decoder = FrameDecoder(max_frame_bytes)
        self._pending: dict[int, tuple[asyncio.Future, str]] = {}
        self._next_id = 1
        self._closed_error: TransportError | None = None
        self._answered = False  # any bytes from the server yet
        self._lost: asyncio.Future | None = None
        self._deadlines: list[tuple[float, int, int]] = []  # heap of (deadline, request id, timeout_ms)
        self._sweep_handle: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        #: request id -> send time, only while IPC tracing is on (ipc_trace.py; empty otherwise)
        self._traced: dict[int, float] = {}

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
            method: the call: its row of a protocol table (:mod:`qjournal.protocol.protocols`), or its
                name (the handler's ``rpc_<method>``).
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
        if type(method) is not str:  # a protocol table's RpcMethod: its plain name packs fastest
            method = method.name  # type: ignore[attr-defined]
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
        if ipc_trace.enabled(ipc_trace.CLIENT):
            self._traced[request_id] = loop.time()  # type: ignore[union-attr]
            ipc_trace.CLIENT.log(TRACE, "%d: Call -> %s: %s %s (%d B)", request_id, self.peer, method,
                                 ipc_trace.describe_args(kwargs), len(frame))
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
        set_nodelay(transport)
        self._writer = Coalescer(self._loop, transport)  # type: ignore[arg-type]
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
            if self._traced:
                self._trace_answer(msg[1], method, msg[2] is True, msg[3])
            if fut.done():
                continue
            if msg[2] is True:
                fut.set_result(msg[3])
            else:
                fut.set_exception(rebuild_error(msg[3], method, self.peer))
        if not pending and self._sweep_handle is not None:
            # Nothing in flight: leave no timer behind (a virtual-time loop
            # would otherwise jump to a deadline nobody waits for).
            self._stop_sweep()
        if error is not None:
            self._protocol_failure(error)

    def _trace_answer(self, request_id: int, method: str, ok: bool, payload: Any) -> None:
        t0 = self._traced.pop(request_id, None)
        if t0 is None:
            return
        ms = (self._loop.time() - t0) * 1000.0  # type: ignore[union-attr]
        if ok:
            ipc_trace.CLIENT.log(TRACE, "%d: Response <- %s: %s %s (%.3f ms)", request_id, self.peer, method,
                                 ipc_trace.describe_result(payload), ms)
        else:
            err = payload if isinstance(payload, dict) else {}
            ipc_trace.CLIENT.log(TRACE, "%d: Error <- %s: %s %s: %s (%.3f ms)", request_id, self.peer, method,
                                 err.get("type"), str(err.get("message", ""))[:200], ms)

    def _connection_lost(self, exc: Exception | None) -> None:
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "closed by the server"
        if exc is None and not self._answered and self._transport is not None and \
                self._transport.get_extra_info("sslcontext") is not None:
            # TLS 1.3: the server checks our certificate after our handshake ended, and asyncio
            # drops its alert; a close before any answer is how a refusal looks from here.
            reason += f" before answering: {REFUSED_CERTIFICATE_HINT}"
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
        self._traced.clear()
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
        if self._traced.pop(request_id, None) is not None:
            ipc_trace.CLIENT.log(TRACE, "%d: Timeout: %s to %s, no answer in %d ms", request_id, method, self.peer,
                                 timeout_ms)
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
