"""Shared helpers of the transport tests: run a coroutine with a deadline, a
server/client rig over TCP or memory, raw connections for malformed input."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from qjournal.transport.frames import FrameDecoder
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport import RpcClient, RpcServer

#: every test coroutine must finish within this; a hang fails instead of blocking the suite
TEST_DEADLINE_S = 30.0


def arun(fn: Callable[[], Awaitable[Any]], deadline_s: float = TEST_DEADLINE_S) -> Any:
    """Run ``fn()`` on a fresh event loop, failing if it takes longer than ``deadline_s``."""
    async def main():
        return await asyncio.wait_for(fn(), deadline_s)
    return asyncio.run(main())


class RawConnection:
    """A raw byte connection to the server, to send malformed frames and read frames back."""

    def __init__(self) -> None:
        self.decoder = FrameDecoder(max_frame_bytes=64 << 20)
        self.messages: list[Any] = []
        self.closed: asyncio.Future | None = None
        self.transport: asyncio.Transport | None = None

    # asyncio.Protocol
    def connection_made(self, transport):
        self.transport = transport
        self.closed = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.messages.extend(self.decoder.feed(data))

    def eof_received(self):
        return None

    def connection_lost(self, exc):
        if not self.closed.done():
            self.closed.set_result(exc)

    def pause_writing(self):
        pass

    def resume_writing(self):
        pass

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def close(self) -> None:
        self.transport.close()


class Rig:
    """An RpcServer plus clients over one kind of transport (``tcp`` or ``memory``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server: RpcServer | None = None
        self.net: MemoryNetwork | None = None
        self.addr: tuple[str, int] | None = None
        self.clients: list[RpcClient] = []
        self._n = 0

    async def start(self, handler: Any, **server_kw: Any) -> "Rig":
        self.server = RpcServer(handler, **server_kw)
        if self.kind == "tcp":
            self.addr = await self.server.start_tcp("127.0.0.1", 0)
        else:
            self.net = MemoryNetwork()
            await self.server.start_memory(self.net, "srv")
        return self

    async def connect(self, **kw: Any) -> RpcClient:
        self._n += 1
        if self.kind == "tcp":
            client = await RpcClient.connect_tcp(*self.addr, **kw)
        else:
            client = await RpcClient.connect_memory(self.net, "srv", src=f"c{self._n}", **kw)
        self.clients.append(client)
        return client

    async def raw(self) -> RawConnection:
        self._n += 1
        raw = RawConnection()
        if self.kind == "tcp":
            await asyncio.get_running_loop().create_connection(lambda: raw, *self.addr)
        else:
            await self.net.connect(f"raw{self._n}", "srv", lambda: raw)
        return raw

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        if self.server is not None:
            await self.server.stop()


async def with_rig(kind: str, handler: Any, body: Callable[[Rig], Awaitable[Any]], **server_kw: Any) -> Any:
    """Start a rig, run ``body(rig)``, always stop the rig."""
    rig = Rig(kind)
    try:
        await rig.start(handler, **server_kw)
        return await body(rig)
    finally:
        await rig.stop()
