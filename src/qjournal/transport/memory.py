"""An in-memory network with fault hooks, for tests and the deterministic simulator.

Why this module exists: the quorum protocol must be tested against lost,
duplicated, delayed and reordered messages, partitions and crashed nodes, and
every such run must replay exactly from a seed. Real sockets can do none of
that deterministically. This network carries the *same* byte frames as TCP
through asyncio ``Transport``/``Protocol`` objects, so :mod:`qjournal.transport.server`
runs unchanged over it (same framing, same limits, same malformed-frame
behaviour), while every delivery is a ``loop.call_soon``/``call_later`` callback
that a virtual-time loop (:mod:`qjournal.sim.loop`) drives.

Theory of operation
-------------------
Nodes are names (``"jn1"``, ``"nn1"``). A server calls :meth:`MemoryNetwork.listen`
on its name; a client calls :meth:`MemoryNetwork.connect` from a source name to
a destination name, which creates a pair of :class:`MemoryTransport` endpoints
(the connection is identified by ``(src, dst)``) and calls ``connection_made``
on both protocols at once.

Every ``write(data)`` is one *unit* (the RPC layer writes one frame per unit:
``writelines`` of N frames is N units). For each unit the network decides:

* if the two nodes are partitioned (:meth:`partition`, :meth:`isolate`), drop;
* else ask the fault hook ``hook(src, dst, frame_bytes) -> list[float]``: the
  list holds one delivery delay in seconds per copy to deliver (``[]`` = drop,
  ``[0.0]`` = deliver now, ``[0.0, 0.5]`` = deliver and duplicate later;
  different delays on consecutive frames reorder them). Without a hook, every
  unit is delivered with delay 0.

With ``MemoryNetwork(hook, fifo=True)`` a unit is never delivered before an
earlier unit of the same connection direction (delays are stretched), as over
TCP; by default different delays reorder units.

Deliveries wait in a per-endpoint heap ordered by ``(due time, send sequence)``
and are released by a ``call_soon`` (delay 0) or ``call_later`` timer. When a
timer fires, every entry ordered at or before its own is delivered, so frames
due at the same instant always arrive in send order, whatever order asyncio
runs equal-time timers in.

Control events are reliable: a graceful ``close()`` delivers end-of-stream to
the peer after every unit already scheduled to it (like a FIN that is
retransmitted until it arrives), never through the hook. :meth:`crash` is a
power cut: both endpoints of every connection of that node are lost at once
(``connection_lost(ConnectionResetError)``), in-flight units are discarded, and
the node's listener is removed so that a restarted server can listen again.
A connect to a name nobody listens on fails at once ("connection refused"); a
connect across a partition fails after ``connect_timeout_ms``.

The network also carries the in-process "HTTP" of nodes that run without a
real HTTP server: a node registers a :data:`UrlFetcher` under its name
(:meth:`MemoryNetwork.serve_http`) and anyone on the network downloads a
``mem://<name>/...`` URL with :meth:`MemoryNetwork.fetch`. So a JournalNode
serves segments to its peers and to readers in the same process without either
side importing the other. These downloads are plain awaited calls: they obey
no fault hook and no partition (the simulator has its own HTTP model);
:meth:`crash` removes the node's server like its listener.

Invariants
----------
1. Determinism: given the same sequence of calls, the same hook answers and the
   same event loop, deliveries happen in the same order. There is no real
   time, no thread, no socket, and no iteration over unordered collections
   (connections are kept in creation order).
2. A unit is delivered at most ``len(hook answer)`` times and never after the
   receiving endpoint is lost; a unit between partitioned nodes (at send time
   or at delivery time) is never delivered.
3. Units with the same due time reach the receiver in send order.
4. After :meth:`crash` of a node, no unit sent before the crash reaches or
   leaves that node.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import logging
import math
from collections import deque
from typing import Any, Awaitable, Callable, Sequence
from urllib.parse import urlsplit

from qjournal.errors import TransportError
from qjournal.transport.download import SegmentDownload

__all__ = ["FaultHook", "MemoryListener", "MemoryNetwork", "MemoryTransport", "UrlFetcher"]

log = logging.getLogger("qjournal.transport.memory")

#: ``hook(src, dst, frame_bytes) -> delays in seconds`` (empty = drop).
FaultHook = Callable[[str, str, bytes], Sequence[float]]

#: ``fetch(url) -> SegmentDownload``: one download, the shape of a JournalNode's
#: ``GET /getJournal`` answer (its ``X-Qjournal-Crc32c`` header and its body in chunks)
UrlFetcher = Callable[[str], Awaitable[SegmentDownload]]

#: the URL scheme of in-process HTTP servers on a memory network
_MEM_SCHEME = "mem"

_DATA = 0
_EOF = 1


class MemoryListener:
    """A name listening on a :class:`MemoryNetwork` (the analogue of a listening socket).

    Attributes:
        address: the node name.
    """

    def __init__(self, network: "MemoryNetwork", address: str, protocol_factory: Callable[[], asyncio.Protocol]):
        self.network = network
        self.address = address
        self.protocol_factory = protocol_factory
        self.closed = False
        # Server-side callbacks run in the context of the code that started
        # listening, as asyncio does for TCP servers, never in a client's.
        self.context = contextvars.copy_context()

    def close(self) -> None:
        """Stop accepting connections (existing connections stay open, as with TCP)."""
        if self.closed:
            return
        self.closed = True
        if self.network._listeners.get(self.address) is self:
            del self.network._listeners[self.address]


class MemoryNetwork:
    """Named nodes connected by fault-injectable in-memory byte streams.

    Args:
        hook: optional fault hook (see module docstring); may be replaced later
            through the ``hook`` attribute.
        fifo: if True, a unit never overtakes an earlier unit of the same
            connection direction (its delay is stretched to arrive no earlier),
            which is what TCP guarantees; drops and duplicates still happen.
            If False (default), different delays reorder units, a stronger
            adversary than TCP.

    Attributes:
        hook: the current fault hook or None.
        fifo: see Args.
        frames_sent: units written by any endpoint.
        frames_dropped: units not delivered (partition or empty hook answer).
        frames_duplicated: extra copies scheduled by the hook.
    """

    def __init__(self, hook: FaultHook | None = None, *, fifo: bool = False) -> None:
        self.hook = hook
        self.fifo = fifo
        self._listeners: dict[str, MemoryListener] = {}
        self._http: dict[str, UrlFetcher] = {}
        self._endpoints: dict[int, MemoryTransport] = {}  # creation order (invariant 1)
        self._partitions: set[tuple[str, str]] = set()  # membership only, never iterated
        self._isolated: set[str] = set()  # membership only, never iterated
        self._seq = 0
        self._next_endpoint_id = 0
        self.frames_sent = 0
        self.frames_dropped = 0
        self.frames_duplicated = 0

    # --- topology -----------------------------------------------------------------

    def listen(self, address: str, protocol_factory: Callable[[], asyncio.Protocol]) -> MemoryListener:
        """Accept connections to ``address``.

        Args:
            address: node name.
            protocol_factory: builds the server-side protocol of each connection.

        Returns:
            The listener (close it to stop accepting).

        Raises:
            TransportError: another listener holds ``address``.
        """
        if not isinstance(address, str) or not address:
            raise ValueError(f"memory address must be a non-empty string, got {address!r}")
        if address in self._listeners:
            raise TransportError(f"memory address {address} is already in use", address=address)
        listener = MemoryListener(self, address, protocol_factory)
        self._listeners[address] = listener
        return listener

    def is_listening(self, address: str) -> bool:
        """Whether a server currently listens on ``address``.

        Args:
            address: node name.

        Returns:
            True if a listener holds the name.
        """
        return address in self._listeners

    async def connect(
        self,
        src: str,
        dst: str,
        protocol_factory: Callable[[], asyncio.Protocol],
        connect_timeout_ms: int | None = None,
    ) -> tuple["MemoryTransport", asyncio.Protocol]:
        """Open a connection from node ``src`` to the listener at ``dst``.

        Args:
            src: name of the connecting node (used by partitions and the hook).
            dst: name of the listening node.
            protocol_factory: builds the client-side protocol.
            connect_timeout_ms: how long a connect across a partition waits
                before failing; None fails at once.

        Returns:
            ``(transport, protocol)`` of the client side, both already connected.

        Raises:
            TransportError: nobody listens on ``dst`` ("connection refused"), or
                the nodes are partitioned (after ``connect_timeout_ms``).
        """
        loop = asyncio.get_running_loop()
        if self._blocked(src, dst):
            if connect_timeout_ms:
                await asyncio.sleep(connect_timeout_ms / 1000.0)
            raise TransportError(
                f"memory connect {src} -> {dst} timed out after {connect_timeout_ms} ms: the nodes are partitioned",
                src=src, dst=dst, connect_timeout_ms=connect_timeout_ms,
            )
        listener = self._listeners.get(dst)
        if listener is None:
            raise TransportError(
                f"memory connect {src} -> {dst}: connection refused (nothing listens on {dst})", src=src, dst=dst
            )
        server_context = listener.context.copy()  # one per connection: never entered twice at once
        client = MemoryTransport(self, loop, self._new_id(), src, dst, contextvars.copy_context())
        server = MemoryTransport(self, loop, self._new_id(), dst, src, server_context)
        client._is_client = True
        client._peer = server
        server._peer = client
        self._endpoints[server._id] = server
        self._endpoints[client._id] = client
        server_protocol = server_context.run(listener.protocol_factory)
        server._protocol = server_protocol
        client_protocol = protocol_factory()
        client._protocol = client_protocol
        server_context.run(server_protocol.connection_made, server)
        client_protocol.connection_made(client)
        return client, client_protocol

    # --- in-process HTTP ------------------------------------------------------------

    def serve_http(self, address: str, fetch: UrlFetcher) -> str:
        """Serve ``mem://<address>/...`` URLs with ``fetch`` (an HTTP server without sockets).

        Args:
            address: node name.
            fetch: answers every download of a URL on that node.

        Returns:
            The base URL, ``mem://<address>``.

        Raises:
            TransportError: another server holds ``address``.
        """
        if address in self._http:
            raise TransportError(f"memory HTTP address {address} is already in use", address=address)
        self._http[address] = fetch
        return f"{_MEM_SCHEME}://{address}"

    def stop_http(self, address: str, fetch: UrlFetcher) -> None:
        """Stop serving ``address`` if ``fetch`` still serves it (idempotent; a server
        restarted under the same name after a :meth:`crash` is left alone)."""
        if self._http.get(address) == fetch:
            del self._http[address]

    async def fetch(self, url: str) -> SegmentDownload:
        """Download a ``mem://<address>/...`` URL from the node serving ``address``.

        Returns:
            What the node's fetcher answered: the download, its body streaming in chunks.

        Raises:
            TransportError: not a ``mem://`` URL, or nothing serves that address
                ("connection refused"); and whatever the node's fetcher raises.
        """
        parts = urlsplit(url)
        if parts.scheme != _MEM_SCHEME:
            raise TransportError(f"GET {url[:200]}: not a {_MEM_SCHEME}:// URL", url=url[:200])
        fetch = self._http.get(parts.netloc)
        if fetch is None:
            raise TransportError(f"GET {url[:200]}: connection refused (no in-process HTTP server "
                                 f"named {parts.netloc!r} on the memory network)", url=url[:200])
        return await fetch(url)

    def connections(self) -> list[tuple[str, str]]:
        """The open connections.

        Returns:
            ``(src, dst)`` of every connection whose client side is open, in
            creation order.
        """
        out = []
        for ep in self._endpoints.values():
            if ep._is_client and not ep._lost:
                out.append((ep.local, ep.remote))
        return out

    # --- faults ---------------------------------------------------------------------

    def partition(self, a: str, b: str) -> None:
        """Drop every unit between ``a`` and ``b`` (both directions) until :meth:`heal`.

        Units already in flight between them are dropped when they come due
        (invariant 2). Connections stay open, as TCP connections do.

        Args:
            a: a node name.
            b: another node name.
        """
        self._partitions.add((a, b) if a <= b else (b, a))

    def isolate(self, a: str) -> None:
        """Drop every unit to or from ``a`` until :meth:`heal`.

        Args:
            a: the node name to cut off from every other node.
        """
        self._isolated.add(a)

    def heal(self) -> None:
        """Remove every partition and isolation."""
        self._partitions.clear()
        self._isolated.clear()

    def is_blocked(self, a: str, b: str) -> bool:
        """Whether units between ``a`` and ``b`` are currently dropped.

        Args:
            a: a node name.
            b: another node name.

        Returns:
            True if a partition or an isolation separates them.
        """
        return self._blocked(a, b)

    def crash(self, address: str) -> None:
        """Power-cut node ``address``: lose all its connections, its listener and its
        in-process HTTP server (invariant 4).

        Both endpoints of each affected connection get
        ``connection_lost(ConnectionResetError)`` on the next loop iteration;
        units in flight to or from the node are discarded. A new
        :meth:`listen` on ``address`` (a restarted server) is allowed at once.

        Args:
            address: the node name.
        """
        listener = self._listeners.pop(address, None)
        if listener is not None:
            listener.closed = True
        self._http.pop(address, None)
        for ep in list(self._endpoints.values()):
            if ep.local == address or ep.remote == address:
                ep._kill(ConnectionResetError(f"memory node {address} crashed"))

    # --- internals ---------------------------------------------------------------------

    def _new_id(self) -> int:
        self._next_endpoint_id += 1
        return self._next_endpoint_id

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _blocked(self, a: str, b: str) -> bool:
        if a in self._isolated or b in self._isolated:
            return True
        return ((a, b) if a <= b else (b, a)) in self._partitions

    def _send(self, sender: "MemoryTransport", data: bytes) -> None:
        receiver = sender._peer
        self.frames_sent += 1
        if receiver is None or receiver._closing or self._blocked(sender.local, sender.remote):
            self.frames_dropped += 1
            return
        hook = self.hook
        if hook is None:
            receiver._schedule(0.0, _DATA, data)
            return
        delays = list(hook(sender.local, sender.remote, data))
        if not delays:
            self.frames_dropped += 1
            return
        if len(delays) > 1:
            self.frames_duplicated += len(delays) - 1
        for delay in delays:
            if not isinstance(delay, (int, float)) or not math.isfinite(delay) or delay < 0:
                raise ValueError(
                    f"fault hook returned invalid delay {delay!r} for {sender.local} -> {sender.remote}; "
                    f"delays must be finite seconds >= 0"
                )
            delay = float(delay)
            if self.fifo:  # no overtaking within one direction of one connection (as TCP)
                delay = max(delay, receiver._last_due - receiver._loop.time())
            receiver._schedule(delay, _DATA, data)

    def _forget(self, ep: "MemoryTransport") -> None:
        self._endpoints.pop(ep._id, None)


class MemoryTransport(asyncio.Transport):
    """One endpoint of an in-memory connection (an ``asyncio.Transport``).

    ``get_extra_info('peername')`` is the remote node name and ``'sockname'``
    the local one; ``'socket'`` is None.
    """

    def __init__(self, network: MemoryNetwork, loop: asyncio.AbstractEventLoop, ep_id: int, local: str, remote: str,
                 context: contextvars.Context):
        super().__init__()
        self._context = context  # callbacks into our protocol run in it
        self._network = network
        self._loop = loop
        self._id = ep_id
        self.local = local
        self.remote = remote
        self._is_client = False  # set by MemoryNetwork.connect
        self._peer: MemoryTransport | None = None
        self._protocol: asyncio.Protocol | None = None
        self._closing = False
        self._lost = False
        self._paused = False
        self._backlog: deque[tuple[int, bytes]] = deque()
        self._heap: list[tuple[float, int, int, bytes]] = []
        self._last_due = -math.inf  # latest due time of anything scheduled to us

    # --- asyncio.Transport API --------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.remote
        if name == "sockname":
            return self.local
        return default

    def is_closing(self) -> bool:
        return self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._network._send(self, bytes(data))

    def writelines(self, list_of_data) -> None:
        for data in list_of_data:
            self.write(data)

    def write_eof(self) -> None:
        raise NotImplementedError("memory transports do not support half-close")

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None

    def is_reading(self) -> bool:
        return not self._paused and not self._lost

    def pause_reading(self) -> None:
        self._paused = True

    def resume_reading(self) -> None:
        if not self._paused:
            return
        self._paused = False
        if self._backlog:
            self._loop.call_soon(self._drain_backlog, context=self._context)

    def close(self) -> None:
        """Graceful close: the peer sees end-of-stream after all units already sent."""
        if self._closing:
            return
        self._closing = True
        peer = self._peer
        if peer is not None and not peer._lost:
            now = self._loop.time()
            peer._schedule(max(0.0, peer._last_due - now), _EOF, b"")
        self._loop.call_soon(self._lose, None, context=self._context)

    def abort(self) -> None:
        """Immediate close: in-flight units are dropped and the peer sees a reset."""
        if self._lost:
            return
        peer = self._peer
        if peer is not None:
            peer._kill(ConnectionResetError(f"memory connection {self.local} -> {self.remote} reset by {self.local}"))
        self._kill(None)

    # --- delivery ------------------------------------------------------------------------

    def _schedule(self, delay: float, kind: int, data: bytes) -> None:
        if self._closing:  # closed, killed or lost: nothing more is received
            return
        loop = self._loop
        if delay <= 0.0 and not self._heap and kind == _DATA:
            # Nothing waits in the heap: deliver on the next callback round,
            # in call_soon (FIFO) order, which is the same order the heap
            # would give (invariant 3) without its bookkeeping.
            now = loop.time()
            if now > self._last_due:
                self._last_due = now
            loop.call_soon(self._deliver_soon, data, context=self._context)
            return
        due = loop.time() + delay
        seq = self._network._next_seq()
        heapq.heappush(self._heap, (due, seq, kind, data))
        if due > self._last_due:
            self._last_due = due
        if delay <= 0.0:
            loop.call_soon(self._fire, due, seq, context=self._context)
        else:
            loop.call_later(delay, self._fire, due, seq, context=self._context)

    def _fire(self, due: float, seq: int) -> None:
        # Invariant 3: release everything ordered at or before this entry.
        key = (due, seq)
        heap = self._heap
        while heap and not self._closing and (heap[0][0], heap[0][1]) <= key:
            _, _, kind, data = heapq.heappop(heap)
            if self._paused or self._backlog:  # keep order behind units held while paused
                self._backlog.append((kind, data))
            else:
                self._deliver(kind, data)

    def _deliver_soon(self, data: bytes) -> None:
        if self._closing:
            return
        if self._paused or self._backlog:
            self._backlog.append((_DATA, data))
        else:
            self._deliver(_DATA, data)

    def _drain_backlog(self) -> None:
        while self._backlog and not self._paused and not self._closing:
            kind, data = self._backlog.popleft()
            self._deliver(kind, data)

    def _deliver(self, kind: int, data: bytes) -> None:
        if self._closing:
            return
        if kind == _DATA:
            if self._network._blocked(self.remote, self.local):  # invariant 2, at delivery time
                self._network.frames_dropped += 1
                return
            self._protocol.data_received(data)  # type: ignore[union-attr]
            return
        # end of stream
        keep_open = self._protocol.eof_received()  # type: ignore[union-attr]
        if not keep_open:
            self._closing = True
            self._lose(None)

    def _kill(self, exc: BaseException | None) -> None:
        """Lose this endpoint at the next iteration, discarding in-flight units."""
        if self._lost:
            return
        self._closing = True
        self._heap.clear()
        self._backlog.clear()
        self._loop.call_soon(self._lose, exc, context=self._context)

    def _lose(self, exc: BaseException | None) -> None:
        if self._lost:
            return
        self._lost = True
        self._closing = True
        self._heap.clear()
        self._backlog.clear()
        self._network._forget(self)
        protocol = self._protocol
        if protocol is not None:
            protocol.connection_lost(exc)

    def __repr__(self) -> str:
        state = "lost" if self._lost else ("closing" if self._closing else "open")
        return f"<MemoryTransport {self.local} -> {self.remote} {state}>"
