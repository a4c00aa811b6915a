"""LinkProxy over real loopback sockets: pass, delay, blackhole, cut, stop."""

from __future__ import annotations

import asyncio

import pytest

from qjournal.chaos.proxy import LinkProxy


async def _echo_server():
    async def handle(r, w):
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def _with_proxy(body):
    server, port = await _echo_server()
    proxy = LinkProxy("127.0.0.1", port, name="t")
    await proxy.start()
    try:
        return await asyncio.wait_for(body(proxy), 10)
    finally:
        await proxy.stop()
        server.close()
        await server.wait_closed()


def test_pass_and_delay_forward_in_order():
    async def body(proxy):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"one")
        assert await r.readexactly(3) == b"one"
        proxy.set_mode("up", "delay", delay_ms=20)
        for i in range(5):
            w.write(b"%d" % i)
        got = await r.readexactly(5)
        w.close()
        return got
    assert asyncio.run(_with_proxy(body)) == b"01234"


def test_blackhole_then_heal_resets_the_poisoned_connection():
    async def body(proxy):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        proxy.set_mode("up", "blackhole")
        w.write(b"lost")
        await w.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(r.readexactly(4), 0.3)  # nothing may arrive (bounded wait, not a sync sleep)
        proxy.heal()
        # the poisoned connection is reset: EOF or reset, never the lost bytes
        data = b""
        try:
            data = await asyncio.wait_for(r.read(100), 5)
        except ConnectionError:
            pass
        assert data == b""
        # a new connection works
        r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.port)
        w2.write(b"fresh")
        assert await r2.readexactly(5) == b"fresh"
        w2.close()
        return proxy.bytes_dropped
    assert asyncio.run(_with_proxy(body)) == 4


def test_cut_resets_open_connections():
    async def body(proxy):
        r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
        w.write(b"x")
        assert await r.readexactly(1) == b"x"
        proxy.cut()
        try:
            data = await asyncio.wait_for(r.read(10), 5)
        except ConnectionError:
            data = b""
        return data, proxy.cuts
    assert asyncio.run(_with_proxy(body)) == (b"", 1)


def test_bad_mode_is_rejected():
    p = LinkProxy("127.0.0.1", 1)
    with pytest.raises(ValueError, match="unknown mode"):
        p.set_mode("up", "shred")
    with pytest.raises(ValueError, match="unknown direction"):
        p.set_mode("sideways", "pass")
