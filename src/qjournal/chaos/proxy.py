"""A TCP proxy per link, for the real-process chaos harness.

Why: the chaos harness (:mod:`qjournal.chaos.harness`) runs real JournalNode
processes on 127.0.0.1 and cannot use ``iptables`` (no root assumed, and it
would touch the host). Instead the writer reaches every JournalNode through
its own :class:`LinkProxy`, and the harness degrades that link: extra latency,
a black hole in one direction, or a cut (every open connection reset).

TCP semantics are kept honest: a proxy never drops bytes from the *middle* of a
stream that it then keeps forwarding (TCP never does that; the receiver would
see a spliced stream). Modes per direction:

* ``pass``: forward at once.
* ``delay``: forward every chunk ``delay_ms`` later, order preserved.
* ``blackhole``: discard what arrives (a partition as seen by the sender: its
  writes succeed, nothing arrives, its calls time out). A connection that lost
  bytes this way is *poisoned* and is reset when the direction is healed, as
  TCP would after its retransmissions gave up.

``cut()`` resets every open connection at once (both sides see a reset or EOF).
New connections keep being accepted in every mode.

Invariants:

1. Bytes forwarded in one direction arrive in the order they were read.
2. A connection that discarded bytes never forwards another byte.
3. ``stop()`` closes the listener and every connection; nothing is left running.
"""

from __future__ import annotations

import asyncio
import logging

__all__ = ["LinkProxy", "MODES"]

log = logging.getLogger(__name__)

MODES = ["pass", "delay", "blackhole"]

_CHUNK_BYTES = 256 * 1024


class _Pipe:
    """One proxied connection: client side <-> upstream side."""

    def __init__(self, proxy: "LinkProxy", c_reader, c_writer, u_reader, u_writer) -> None:
        self.proxy = proxy
        self.c_writer = c_writer
        self.u_writer = u_writer
        self.poisoned = False
        self.tasks = [
            asyncio.ensure_future(self._pump(c_reader, u_writer, "up")),
            asyncio.ensure_future(self._pump(u_reader, c_writer, "down")),
        ]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str):
        try:
            while True:
                data = await reader.read(_CHUNK_BYTES)
                if not data:
                    break
                mode, delay_ms = self.proxy.mode(direction)
                if self.poisoned:
                    continue
                if mode == "blackhole":
                    self.poisoned = True  # invariant 2
                    self.proxy.bytes_dropped += len(data)
                    continue
                if mode == "delay" and delay_ms > 0:
                    await asyncio.sleep(delay_ms / 1000.0)  # serial per direction: order kept
                    if self.poisoned:
                        continue
                writer.write(data)
                await writer.drain()
                self.proxy.bytes_forwarded += len(data)
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            self.close()

    def close(self) -> None:
        for w in (self.c_writer, self.u_writer):
            try:
                w.transport.abort()
            except Exception:  # noqa: BLE001 - already closed
                pass
        self.proxy._pipes.discard(self)
        for t in self.tasks:
            if t is not asyncio.current_task() and not t.done():
                t.cancel()


class LinkProxy:
    """A TCP proxy from ``127.0.0.1:<port>`` to ``target`` with degradable directions.

    Args:
        target_host, target_port: where to forward ("up" is toward the target).
        name: for logs and reports.
    """

    def __init__(self, target_host: str, target_port: int, name: str = "link") -> None:
        self.target = (target_host, target_port)
        self.name = name
        self._modes: dict[str, tuple[str, float]] = {"up": ("pass", 0.0), "down": ("pass", 0.0)}
        self._pipes: set[_Pipe] = set()  # membership only; closed in creation order below
        self._order: list[_Pipe] = []
        self._server: asyncio.AbstractServer | None = None
        self.port = 0
        self.bytes_forwarded = 0
        self.bytes_dropped = 0
        self.connections = 0
        self.cuts = 0

    async def start(self, host: str = "127.0.0.1") -> int:
        """Listen on an ephemeral port.

        Returns:
            The port the proxy listens on.
        """
        self._server = await asyncio.start_server(self._accept, host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def retarget(self, host: str, port: int) -> None:
        """Forward new connections to another address (a restarted node on a new port)."""
        self.target = (host, port)

    def mode(self, direction: str) -> tuple[str, float]:
        return self._modes[direction]

    def set_mode(self, direction: str, mode: str, delay_ms: float = 0.0) -> None:
        """Degrade or heal one direction (``"up"`` toward the target, ``"down"`` back, ``"both"``).

        Raises:
            ValueError: unknown direction or mode.
        """
        if mode not in MODES:
            raise ValueError(f"proxy {self.name}: unknown mode {mode!r} (known: {MODES})")
        dirs = ["up", "down"] if direction == "both" else [direction]
        for d in dirs:
            if d not in self._modes:
                raise ValueError(f"proxy {self.name}: unknown direction {direction!r}")
            self._modes[d] = (mode, float(delay_ms))
        if mode == "pass":
            for p in [p for p in self._order if p.poisoned]:
                p.close()

    def heal(self) -> None:
        """Both directions back to ``pass``; poisoned connections are reset."""
        self.set_mode("both", "pass")

    def cut(self) -> None:
        """Reset every open connection."""
        self.cuts += 1
        for p in list(self._order):
            p.close()
        self._order = []

    async def _accept(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            u_reader, u_writer = await asyncio.wait_for(asyncio.open_connection(*self.target), 5.0)
        except (OSError, asyncio.TimeoutError):
            c_writer.transport.abort()
            return
        pipe = _Pipe(self, c_reader, c_writer, u_reader, u_writer)
        self._pipes.add(pipe)
        self._order = [p for p in self._order if p in self._pipes] + [pipe]

    async def stop(self) -> None:
        """Close the listener and every connection (invariant 3)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        pipes = list(self._order)
        self.cut()
        for p in pipes:
            for t in p.tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*p.tasks, return_exceptions=True)
