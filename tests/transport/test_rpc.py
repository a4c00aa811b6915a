"""RpcServer / RpcClient over TCP and over the in-memory network (same tests,
both transports): round trips, pipelining, FIFO order, deadlines, typed errors,
bad calls, malformed input that closes one connection only, connection loss."""

from __future__ import annotations

import asyncio
import pathlib
import socket
import struct

import msgpack
import pytest

from qjournal.errors import (
    FencedError,
    FrameTooLargeError,
    InvalidRequestError,
    InvariantViolation,
    JournalOutOfSyncError,
    RemoteError,
    RpcTimeoutError,
    TransportError,
)
from qjournal.transport.frames import encode_frame, encode_request
from qjournal.transport import PeerInfo, current_peer
from qjournal.util import tasks

from qjournal.util.waiting import async_wait_until

from .helpers import arun, with_rig

KINDS = ["tcp", "memory"]


class Handler:
    """A test service: echo, typed failures, gates to hold calls, an ordered log."""

    rpc_concurrent = {"wait", "release", "peek"}

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.log: list[int] = []
        self.calls = 0

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    async def rpc_echo(self, value, extra=None):
        self.calls += 1
        return value

    async def rpc_add(self, a, b):
        return a + b

    async def rpc_append(self, i):
        await asyncio.sleep(0)  # yield to the loop: order must still hold
        self.log.append(i)
        await asyncio.sleep(0)
        return len(self.log)

    async def rpc_wait(self, key):  # concurrent
        await self.gate(key).wait()
        return key

    async def rpc_block(self, key):  # sequential (FIFO)
        await self.gate(key).wait()
        return key

    async def rpc_release(self, key):  # concurrent
        self.gate(key).set()

    async def rpc_peek(self):  # concurrent
        return list(self.log)

    async def rpc_fenced(self, epoch):
        raise FencedError(f"IPC's epoch {epoch} is less than the last promised epoch 9 (journal j1)",
                          jid="j1", epoch=epoch, promised=9)

    async def rpc_out_of_sync(self):
        raise JournalOutOfSyncError("bad txid", jid="j1", first_txid=10, path=pathlib.Path("/x/y"),
                                    nodes={"b", "a"}, bad=object.__new__(object))

    async def rpc_invariant(self):
        raise InvariantViolation("two writers in epoch 4")

    async def rpc_crash(self):
        return {}["missing"]

    async def rpc_who(self, _peer):
        assert current_peer() == _peer
        return [_peer.address, _peer.transport]

    async def rpc_big(self, n):
        return b"x" * n

    async def rpc_unencodable(self):
        return object()

    def rpc_not_async(self):
        return 1


def run(kind, body, handler=None, **server_kw):
    handler = handler or Handler()
    return arun(lambda: with_rig(kind, handler, lambda rig: body(rig, handler), **server_kw))


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_values(kind):
    async def body(rig, h):
        c = await rig.connect()
        for value in [None, True, 0, -1, 2**63, 1.25, "é", b"\x00\xff" * 512, [1, [2, b"x"]], {"a": {"b": None}}]:
            assert await c.call("echo", value=value) == value
        assert await c.call("add", a=2, b=3, timeout_ms=5000) == 5
        assert c.pending_calls == 0 and not c.is_closed
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_pipelined_responses_complete_out_of_order(kind):
    async def body(rig, h):
        c = await rig.connect()
        first = asyncio.ensure_future(c.call("wait", key="a"))
        second = asyncio.ensure_future(c.call("wait", key="b"))
        await async_wait_until(lambda: "a" in h.gates and "b" in h.gates, "both calls to start", poll_s=0.001)
        await c.call("release", key="b")
        assert await second == "b"
        assert not first.done()
        await c.call("release", key="a")
        assert await first == "a"
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_sequential_calls_run_one_at_a_time_in_arrival_order(kind):
    async def body(rig, h):
        c = await rig.connect()
        blocked = asyncio.ensure_future(c.call("block", key="g"))
        appends = [asyncio.ensure_future(c.call("append", i=i)) for i in range(50)]
        await async_wait_until(lambda: "g" in h.gates, "block to start", poll_s=0.001)
        # a concurrent call is not queued behind the blocked sequential one
        assert await c.call("peek") == []
        assert not any(a.done() for a in appends)
        await c.call("release", key="g")
        assert await blocked == "g"
        assert await asyncio.gather(*appends) == list(range(1, 51))
        assert h.log == list(range(50))
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_deadline_raises_and_late_response_is_discarded(kind):
    async def body(rig, h):
        c = await rig.connect()
        with pytest.raises(RpcTimeoutError) as ei:
            await c.call("block", key="g", timeout_ms=20)
        err = ei.value
        assert err.fields["method"] == "block" and err.fields["timeout_ms"] == 20
        assert "block" in str(err) and "20 ms" in str(err) and err.fields["peer"] == c.peer
        await c.call("release", key="g")
        # the late response of 'block' arrives before this one (FIFO) and is dropped
        assert await c.call("echo", value="after") == "after"
        assert c.pending_calls == 0 and not c.is_closed
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_default_timeout_applies(kind):
    async def body(rig, h):
        c = await rig.connect(default_timeout_ms=20)
        with pytest.raises(RpcTimeoutError):
            await c.call("wait", key="never")
        assert await c.call("echo", value=1) == 1
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_typed_errors_arrive_as_the_same_class_with_fields(kind):
    async def body(rig, h):
        c = await rig.connect()
        with pytest.raises(FencedError) as ei:
            await c.call("fenced", epoch=3)
        assert ei.value.fields == {"jid": "j1", "epoch": 3, "promised": 9}
        assert "epoch 3" in str(ei.value)
        with pytest.raises(JournalOutOfSyncError) as ei2:
            await c.call("out_of_sync")
        f = ei2.value.fields
        assert f["path"] == "/x/y" and f["nodes"] == ["a", "b"] and f["first_txid"] == 10
        assert isinstance(f["bad"], str)
        fatal_calls = []
        previous = tasks.set_fatal_handler(lambda message, exc: fatal_calls.append((message, exc)))
        try:
            with pytest.raises(InvariantViolation, match="two writers in epoch 4"):
                await c.call("invariant")
        finally:
            tasks.set_fatal_handler(previous)
        # the caller got the typed error, and the server process ends (rpc invariant 7)
        assert [("broke an invariant" in m, str(e)) for m, e in fatal_calls] == [
            (True, "two writers in epoch 4")]
        with pytest.raises(RemoteError) as ei3:
            await c.call("crash")
        assert ei3.value.fields["remote_type"] == "KeyError"
        with pytest.raises(RemoteError, match="cannot be encoded"):
            await c.call("unencodable")
        # the server still serves this connection
        assert await c.call("echo", value=1) == 1
        assert rig.server.metrics["errors"] == 5
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_calls_and_wrong_arguments(kind):
    async def body(rig, h):
        c = await rig.connect()
        for method in ["nope", "not_async", "gate"]:
            with pytest.raises(InvalidRequestError, match=f"unknown call '{method}'"):
                await c.call(method)
        with pytest.raises(InvalidRequestError) as ei:
            await c.call("add", a=1, b=2, c=3, d=4)
        assert "call add" in str(ei.value) and "c, d" in str(ei.value)
        assert ei.value.fields["unexpected"] == ["c", "d"]
        with pytest.raises(InvalidRequestError) as ei:
            await c.call("add", a=1)
        assert "call add" in str(ei.value) and "missing" in str(ei.value) and ei.value.fields["missing"] == ["b"]
        with pytest.raises(InvalidRequestError, match="_peer"):
            await c.call("who", _peer="spoofed")
        assert await c.call("echo", value="still fine") == "still fine"
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_handler_sees_its_peer(kind):
    async def body(rig, h):
        c = await rig.connect()
        address, transport = await c.call("who")
        assert transport == kind
        if kind == "memory":
            assert address == "c1"
        else:
            host, port = c._transport.get_extra_info("sockname")[:2]
            assert address == f"{host}:{port}"
    run(kind, body)
    assert PeerInfo("a", "tcp").cert is None


def _bad_inputs(limit):
    return {
        "oversized": struct.pack(">I", limit + 1) + b"x" * 10,
        "undecodable": struct.pack(">I", 3) + b"\xc1\xc1\xc1",
        "not_a_request": encode_frame("hello"),
        "garbage": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        "response_to_server": encode_frame([1, 1, True, None]),
    }


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", ["oversized", "undecodable", "not_a_request", "garbage", "response_to_server",
                                 "half_frame"])
def test_malformed_input_closes_only_that_connection(kind, bad):
    limit = 4096

    async def body(rig, h):
        good = await rig.connect()
        assert await good.call("echo", value=1) == 1
        pending = asyncio.ensure_future(good.call("block", key="g"))
        raw = await rig.raw()
        if bad == "half_frame":
            raw.write(encode_request(1, "echo", {"value": "x" * 100})[:20])
            raw.close()
        else:
            raw.write(encode_request(1, "echo", {"value": "before"}))  # answered before the bad frame
            raw.write(_bad_inputs(limit)[bad])
        await raw.closed
        if bad != "half_frame":
            assert raw.messages == [[1, 1, True, "before"]]
        await async_wait_until(lambda: rig.server.metrics["bad_frames"] == 1, "bad frame to be counted", poll_s=0.001)
        # the other connection is untouched, even with a call in progress, and new ones work
        await good.call("release", key="g")
        assert await pending == "g"
        assert await good.call("echo", value=2) == 2
        other = await rig.connect()
        assert await other.call("echo", value=3) == 3

    run(kind, body, max_frame_bytes=limit)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_request_with_an_id_is_answered_not_disconnected(kind):
    async def body(rig, h):
        raw = await rig.raw()
        raw.write(encode_frame([0, 5, "echo", [1, 2]]))
        raw.write(encode_frame([0, 6, "echo", {"value": 1}]))
        await async_wait_until(lambda: len(raw.messages) == 2, "two responses", poll_s=0.001)
        assert raw.messages[0][:3] == [1, 5, False]
        assert raw.messages[0][3]["type"] == "InvalidRequestError"
        assert raw.messages[1] == [1, 6, True, 1]
        raw.close()
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_frame_limits_on_requests_and_responses(kind):
    async def body(rig, h):
        c = await rig.connect(max_frame_bytes=8192)
        with pytest.raises(FrameTooLargeError, match="call echo"):
            await c.call("echo", value=b"x" * 10_000)  # refused locally, nothing sent
        with pytest.raises(FrameTooLargeError, match="call big: response"):
            await c.call("big", n=5000)  # the server's limit is 4096
        assert await c.call("echo", value=b"y" * 1000) == b"y" * 1000
        assert not c.is_closed
    run(kind, body, max_frame_bytes=4096)


@pytest.mark.parametrize("kind", KINDS)
def test_oversized_response_closes_the_client_connection(kind):
    async def body(rig, h):
        c = await rig.connect(max_frame_bytes=1000)
        waiting = asyncio.ensure_future(c.call("block", key="g"))
        with pytest.raises(FrameTooLargeError):
            await c.call("big", n=5000)
        # that response was unusable: the connection is gone and every pending call failed
        with pytest.raises(TransportError):
            await waiting
        assert c.is_closed
        with pytest.raises(TransportError):
            await c.call("echo", value=1)
        h.gate("g").set()
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_connection_loss_fails_every_pending_call(kind):
    async def body(rig, h):
        c = await rig.connect()
        pending = [asyncio.ensure_future(c.call("block", key="g")), asyncio.ensure_future(c.call("wait", key="w"))]
        await async_wait_until(lambda: "g" in h.gates and "w" in h.gates, "calls to start", poll_s=0.001)
        await rig.server.stop()
        for fut in pending:
            with pytest.raises(TransportError) as ei:
                await fut
            assert c.peer in str(ei.value)
        await c.wait_closed()
        assert c.is_closed
        with pytest.raises(TransportError):
            await c.call("echo", value=1)
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_client_close_fails_pending_calls_and_server_survives(kind):
    async def body(rig, h):
        c = await rig.connect()
        pending = asyncio.ensure_future(c.call("block", key="g"))
        await async_wait_until(lambda: "g" in h.gates, "call to start", poll_s=0.001)
        await c.close()
        with pytest.raises(TransportError, match="closed by this client"):
            await pending
        await async_wait_until(lambda: rig.server.connection_count == 0, "server to see the close", poll_s=0.001)
        h.gate("g").set()  # the running call completes; its response has nowhere to go
        c2 = await rig.connect()
        assert await c2.call("echo", value=1) == 1
    run(kind, body)


@pytest.mark.parametrize("kind", KINDS)
def test_back_pressure_keeps_order_and_completes(kind):
    async def body(rig, h):
        c = await rig.connect()
        blocked = asyncio.ensure_future(c.call("block", key="g"))
        appends = [asyncio.ensure_future(c.call("append", i=i)) for i in range(40)]
        await async_wait_until(lambda: "g" in h.gates, "block to start", poll_s=0.001)
        h.gate("g").set()
        assert await blocked == "g"
        assert await asyncio.gather(*appends) == list(range(1, 41))
        assert h.log == list(range(40))
    run(kind, body, max_queued_requests=3)


def test_tcp_nodelay_on_both_sides():
    async def body(rig, h):
        c = await rig.connect()
        await c.call("echo", value=1)
        sock = c._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        (conn,) = rig.server._connections.values()
        ssock = conn._transport.get_extra_info("socket")
        assert ssock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    run("tcp", body)


def test_connect_refused_is_a_transport_error():
    async def main():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        from qjournal.transport import RpcClient
        with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
            await RpcClient.connect_tcp("127.0.0.1", port, connect_timeout_ms=5000)
    arun(main)


async def _connect_counting_writes(rig):
    """A client whose transport records the length of each write it is handed."""
    c = await rig.connect()
    writes = []
    transport = c._transport
    real_write = transport.write
    transport.write = lambda data: (writes.append(len(data)), real_write(data))[1]
    return c, writes


def test_requests_written_in_one_iteration_are_coalesced():
    """Many concurrently issued calls leave in few writes (one system call per loop iteration)."""
    async def body(rig, h):
        c, writes = await _connect_counting_writes(rig)
        results = await asyncio.gather(*[c.call("echo", value=i) for i in range(100)])
        assert results == list(range(100))
        frame_len = len(encode_request(1, "echo", {"value": 1}))
        # the first alone (nothing else in flight) and the second at once, the other 98 in one write
        assert writes == [frame_len, frame_len, 98 * frame_len]
    run("tcp", body)


def test_a_call_alone_goes_out_at_once_without_a_gathering_window():
    """One call in flight (a DFS client, a quorum logger): written at once, no end-of-iteration callback."""
    async def body(rig, h):
        c, writes = await _connect_counting_writes(rig)
        for i in range(3):
            fut = c.send("echo", value=i)
            assert c._writer._out is None  # no window opened, so no callback scheduled for it
            assert await fut == i
        assert writes == [len(encode_request(1, "echo", {"value": 1}))] * 3
    run("tcp", body)


def test_handler_msgpack_result_with_int_keys_round_trips():
    async def body(rig, h):
        c = await rig.connect()
        assert await c.call("echo", value={1: "a", 2: "b"}) == {1: "a", 2: "b"}
        assert msgpack.unpackb(msgpack.packb(b"x", use_bin_type=True), raw=False) == b"x"
    run("memory", body)


_ROLE: "contextvars.ContextVar[str]" = __import__("contextvars").ContextVar("test_role", default="unset")


class RoleService:
    async def rpc_role(self):
        return _ROLE.get()


@pytest.mark.parametrize("kind", KINDS)
def test_handlers_run_in_the_servers_context_not_the_clients(kind):
    async def main():
        async def start_server(rig):
            _ROLE.set("server")
            await rig.start(RoleService())

        async def use(rig):
            _ROLE.set("client")
            c = await rig.connect()
            return await c.call("role")

        from .helpers import Rig
        rig = Rig(kind)
        try:
            await asyncio.ensure_future(start_server(rig))  # its own task: its own context
            return await asyncio.ensure_future(use(rig))
        finally:
            await rig.stop()

    assert arun(main) == "server"


def test_a_client_that_does_not_read_stops_the_server_reading_it():
    """Write back-pressure: responses never pile up without bound in the server."""
    n, size = 64, 1 << 20

    async def body(rig, h):
        raw = await rig.raw()
        raw.transport.pause_reading()  # never read the responses
        for i in range(n):
            raw.write(encode_request(i, "big", {"n": size}))
        await async_wait_until(lambda: rig.server.connection_count == 1, "connection", poll_s=0.001)
        (conn,) = rig.server._connections.values()
        await async_wait_until(lambda: not conn._reading, "server to stop reading", poll_s=0.001)
        assert conn._transport.get_write_buffer_size() < 8 * size
        raw.transport.resume_reading()
        await async_wait_until(lambda: len(raw.messages) == n, "every response", poll_s=0.001)
        assert [m[1] for m in raw.messages] == list(range(n))
        assert all(m[2] is True and len(m[3]) == size for m in raw.messages)
        raw.close()

    run("tcp", body, max_frame_bytes=2 * size)
