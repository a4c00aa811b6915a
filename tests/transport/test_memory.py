"""The in-memory network on the simulator's virtual-time loop: drop, duplicate,
delay, reorder, partition, isolate, crash and restart, graceful close, and
determinism (same seed, same trace)."""

from __future__ import annotations

import asyncio
import random

import pytest

from qjournal.errors import RpcTimeoutError, TransportError
from qjournal.sim.loop import run_simulation
from qjournal.transport.frames import decode_frame_bytes
from qjournal.transport.download import memory_download
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport import RpcClient, RpcServer

from qjournal.util.waiting import async_wait_until


class Recorder(asyncio.Protocol):
    """Records (virtual time, bytes) of every delivery, and the end of the stream."""

    def __init__(self, log: list) -> None:
        self.log = log
        self.transport = None
        self.lost = None

    def connection_made(self, transport):
        self.transport = transport
        self.lost = asyncio.get_running_loop().create_future()

    def data_received(self, data):
        self.log.append((asyncio.get_running_loop().time(), data))

    def eof_received(self):
        self.log.append((asyncio.get_running_loop().time(), "EOF"))

    def connection_lost(self, exc):
        if not self.lost.done():
            self.lost.set_result(exc)


class Service:
    rpc_concurrent = {"slow"}

    def __init__(self) -> None:
        self.calls = 0

    async def rpc_echo(self, value):
        self.calls += 1
        return value

    async def rpc_slow(self, seconds):
        await asyncio.sleep(seconds)
        return seconds


async def raw_pair(net: MemoryNetwork, server_log: list, client_log: list, src="a", dst="b"):
    holder = {}

    def factory():
        holder["server"] = Recorder(server_log)
        return holder["server"]

    net.listen(dst, factory)
    transport, proto = await net.connect(src, dst, lambda: Recorder(client_log))
    return transport, proto, holder["server"]


def sim(main, seed=1):
    return run_simulation(main, seed)


def test_without_hook_units_arrive_in_order_at_once():
    async def main():
        net = MemoryNetwork()
        got: list = []
        t, _, _ = await raw_pair(net, got, [])
        t0 = asyncio.get_running_loop().time()
        for i in range(10):
            t.write(bytes([i]))
        t.writelines([b"x", b"y"])
        await asyncio.sleep(0.001)
        assert [d for _, d in got] == [bytes([i]) for i in range(10)] + [b"x", b"y"]
        assert all(when == t0 for when, _ in got)
        assert net.connections() == [("a", "b")]
        assert net.frames_sent == 12 and net.frames_dropped == 0
    sim(main)


@pytest.mark.parametrize("loop_kind", ["virtual", "asyncio"])
def test_delays_reorder_and_equal_due_times_keep_send_order(loop_kind):
    delays = {b"A": [0.3], b"B": [0.1], b"C": [0.1], b"D": [0.0]}
    delays.update({bytes([i]): [0.2] for i in range(30)})

    async def main():
        net = MemoryNetwork(hook=lambda src, dst, frame: delays[frame])
        got: list = []
        t, _, _ = await raw_pair(net, got, [])
        t0 = asyncio.get_running_loop().time()
        for unit in [b"A", b"B", b"C", b"D"] + [bytes([i]) for i in range(30)]:
            t.write(unit)
        await async_wait_until(lambda: len(got) >= 34, "every delivery", 10)
        order = [d for _, d in got]
        assert order == [b"D", b"B", b"C"] + [bytes([i]) for i in range(30)] + [b"A"]
        if loop_kind == "virtual":
            times = {d: round(when - t0, 9) for when, d in got}
            assert times[b"D"] == 0.0 and times[b"B"] == 0.1 and times[bytes([7])] == 0.2 and times[b"A"] == 0.3

    if loop_kind == "virtual":
        sim(main)
    else:
        asyncio.run(asyncio.wait_for(main(), 30))


def test_hook_sees_names_and_decodable_frames_and_drop_times_out():
    async def main():
        seen = []
        drop_first = [True]

        def hook(src, dst, frame):
            msg = decode_frame_bytes(frame)
            seen.append((src, dst, msg[0], msg[1]))
            if msg[0] == 0 and drop_first[0]:
                drop_first[0] = False
                return []
            return [0.001]

        net = MemoryNetwork(hook)
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        client = await RpcClient.connect_memory(net, "jn1", src="nn1")
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(RpcTimeoutError):
            await client.call("echo", value=1, timeout_ms=1000)
        assert round(loop.time() - t0, 6) == 1.0
        assert net.frames_dropped == 1
        assert await client.call("echo", value=2, timeout_ms=1000) == 2
        assert seen == [("nn1", "jn1", 0, 1), ("nn1", "jn1", 0, 2), ("jn1", "nn1", 1, 2)]
        await client.close()
        await server.stop()
    sim(main)


def test_duplicated_request_runs_twice_and_the_extra_response_is_discarded():
    async def main():
        def hook(src, dst, frame):
            return [0.0, 0.5] if src == "nn1" else [0.0]

        service = Service()
        net = MemoryNetwork(hook)
        server = RpcServer(service)
        await server.start_memory(net, "jn1")
        client = await RpcClient.connect_memory(net, "jn1", src="nn1")
        assert await client.call("echo", value="x") == "x"
        await asyncio.sleep(1.0)  # virtual: let the duplicate arrive and be answered
        assert service.calls == 2
        assert net.frames_duplicated == 1
        assert client.pending_calls == 0 and not client.is_closed
        assert await client.call("echo", value="y") == "y"
        await client.close()
        await server.stop()
    sim(main)


def test_partition_drops_in_flight_and_new_units_until_heal():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [1.0] if f == b"late" else [0.0])
        got: list = []
        t, _, _ = await raw_pair(net, got, [], src="a", dst="b")
        t.write(b"late")  # due at +1.0
        await asyncio.sleep(0.5)
        net.partition("b", "a")
        assert net.is_blocked("a", "b")
        t.write(b"during")
        await asyncio.sleep(1.0)
        assert got == []  # in flight at partition time: dropped at delivery (invariant 2)
        net.heal()
        t.write(b"after")
        await asyncio.sleep(0.1)
        assert [d for _, d in got] == [b"after"]
        assert net.frames_dropped == 2
    sim(main)


def test_partition_and_isolate_with_rpc():
    async def main():
        net = MemoryNetwork()
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        nn1 = await RpcClient.connect_memory(net, "jn1", src="nn1")
        nn2 = await RpcClient.connect_memory(net, "jn1", src="nn2")
        net.partition("nn1", "jn1")
        with pytest.raises(RpcTimeoutError):
            await nn1.call("echo", value=1, timeout_ms=500)
        assert await nn2.call("echo", value=2, timeout_ms=500) == 2  # other pairs unaffected
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        with pytest.raises(TransportError, match="partitioned"):
            await RpcClient.connect_memory(net, "jn1", src="nn1", connect_timeout_ms=2000)
        assert round(loop.time() - t0, 6) == 2.0
        net.heal()
        assert await nn1.call("echo", value=3, timeout_ms=500) == 3
        net.isolate("jn1")
        with pytest.raises(RpcTimeoutError):
            await nn2.call("echo", value=4, timeout_ms=500)
        net.heal()
        assert await nn2.call("echo", value=5, timeout_ms=500) == 5
        with pytest.raises(TransportError, match="connection refused"):
            await RpcClient.connect_memory(net, "nobody", src="nn1")
        await nn1.close()
        await nn2.close()
        await server.stop()
    sim(main)


def test_crash_loses_every_connection_and_a_restart_listens_again():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [0.2])
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        nn1 = await RpcClient.connect_memory(net, "jn1", src="nn1")
        slow = asyncio.ensure_future(nn1.call("slow", seconds=5.0))
        echo = asyncio.ensure_future(nn1.call("echo", value=1))
        await asyncio.sleep(0.1)  # both requests are in flight
        net.crash("jn1")
        for fut in (slow, echo):
            with pytest.raises(TransportError, match="crashed"):
                await fut
        assert nn1.is_closed and not net.is_listening("jn1")
        assert net.connections() == []
        with pytest.raises(TransportError, match="connection refused"):
            await RpcClient.connect_memory(net, "jn1", src="nn1")
        await server.stop()
        restarted = RpcServer(Service())
        await restarted.start_memory(net, "jn1")
        again = await RpcClient.connect_memory(net, "jn1", src="nn1")
        assert await again.call("echo", value=2) == 2
        await again.close()
        await restarted.stop()
    sim(main)


def test_graceful_close_reaches_the_peer_after_delayed_units():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [0.2])
        got: list = []
        t, client_proto, server_proto = await raw_pair(net, got, [])
        t0 = asyncio.get_running_loop().time()
        t.write(b"last words")
        t.close()
        t.write(b"ignored after close")
        exc = await server_proto.lost
        assert exc is None
        assert [(round(w - t0, 6), d) for w, d in got] == [(0.2, b"last words"), (0.2, "EOF")]
        assert await client_proto.lost is None
    sim(main)


def test_abort_resets_the_peer():
    async def main():
        net = MemoryNetwork()
        t, client_proto, server_proto = await raw_pair(net, [], [])
        t.abort()
        assert isinstance(await server_proto.lost, ConnectionResetError)
        assert await client_proto.lost is None
    sim(main)


def test_invalid_hook_delay_is_refused():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [-1.0])
        t, _, _ = await raw_pair(net, [], [])
        with pytest.raises(ValueError, match="invalid delay"):
            t.write(b"x")
    sim(main)


def _chaos_trace(seed: int) -> list:
    async def main():
        rng = random.Random(seed)
        trace = []

        def hook(src, dst, frame):
            msg = decode_frame_bytes(frame)
            roll = rng.random()
            if roll < 0.1:
                delays = []
            elif roll < 0.2:
                delays = [rng.random() * 0.1, rng.random() * 0.1]
            else:
                delays = [rng.random() * 0.05]
            trace.append((round(asyncio.get_running_loop().time(), 9), src, dst, msg[0], msg[1], len(delays)))
            return delays

        net = MemoryNetwork(hook)
        service = Service()
        server = RpcServer(service)
        await server.start_memory(net, "jn1")
        clients = [await RpcClient.connect_memory(net, "jn1", src=f"nn{i}") for i in range(2)]
        results = await asyncio.gather(
            *[clients[i % 2].call("echo", value=i, timeout_ms=300) for i in range(40)], return_exceptions=True
        )
        outcome = [r if isinstance(r, int) else type(r).__name__ for r in results]
        for c in clients:
            await c.close()
        await server.stop()
        return trace, outcome, service.calls

    return run_simulation(main, seed)


@pytest.mark.parametrize("seed", [7, 2024])
def test_same_seed_same_trace(seed):
    print(f"seed={seed}")
    first = _chaos_trace(seed)
    second = _chaos_trace(seed)
    assert first == second
    trace, outcome, calls = first
    assert "RpcTimeoutError" in outcome and any(isinstance(r, int) for r in outcome)
    assert any(n == 2 for *_, n in trace)  # some duplicates happened


def test_each_call_expires_at_its_own_deadline_and_the_deadline_heap_stays_small():
    async def main():
        net = MemoryNetwork()
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        client = await RpcClient.connect_memory(net, "jn1", src="nn1")
        net.isolate("jn1")  # nothing gets through: every call must time out
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        expired_at = {}

        async def one(timeout_ms):
            with pytest.raises(RpcTimeoutError) as ei:
                await client.call("echo", value=timeout_ms, timeout_ms=timeout_ms)
            assert ei.value.fields["timeout_ms"] == timeout_ms
            expired_at[timeout_ms] = round(loop.time() - t0, 6)

        await asyncio.gather(one(300), one(100), one(200), one(100))
        assert expired_at == {100: 0.1, 200: 0.2, 300: 0.3}
        net.heal()
        for i in range(500):  # finished calls do not pile up in the deadline heap
            assert await client.call("echo", value=i, timeout_ms=60_000) == i
        assert len(client._deadlines) <= 70
        await client.close()
        await server.stop()
    sim(main)


def test_paused_reading_keeps_unit_order():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [0.0] if f != b"late" else [0.1])
        got: list = []
        t, _, server_proto = await raw_pair(net, got, [])
        server_proto.transport.pause_reading()
        t.write(b"1")
        t.write(b"late")
        t.write(b"2")
        await asyncio.sleep(0.2)
        assert got == []
        server_proto.transport.resume_reading()
        t.write(b"3")
        await asyncio.sleep(0.1)
        assert [d for _, d in got] == [b"1", b"2", b"late", b"3"]
    sim(main)


class HookBug(Exception):
    pass


@pytest.mark.parametrize("method", ["echo", "slow"])  # sequential and concurrent dispatch
def test_a_failing_hook_ends_only_the_connection_it_broke(method):
    async def main():
        def hook(src, dst, frame):
            if src == "jn1" and dst == "bad":
                raise HookBug("hook bug on the response path")
            if src == "nn1" and decode_frame_bytes(frame)[3].get("value") == "boom":
                raise HookBug("hook bug on the request path")
            return [0.0]

        net = MemoryNetwork(hook)
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        good = await RpcClient.connect_memory(net, "jn1", src="nn1")
        bad = await RpcClient.connect_memory(net, "jn1", src="bad")
        kwargs = {"value": 1} if method == "echo" else {"seconds": 0.1}
        with pytest.raises(TransportError):
            await bad.call(method, **kwargs, timeout_ms=5000)
        with pytest.raises(HookBug):  # a client-side write failure reaches the caller
            await good.call("echo", value="boom")
        assert good.pending_calls == 0
        assert await good.call(method, **kwargs) in (1, 0.1)
        await good.close()
        await server.stop()
    sim(main)


@pytest.mark.parametrize("seed", [11, 12])
def test_fuzzed_bytes_never_stop_the_server(seed):
    """Random and mutated frames, each on its own connection: the server answers
    or closes that connection, and keeps serving a well-behaved client."""
    print(f"seed={seed}")
    from qjournal.transport.frames import encode_frame, encode_request

    rng = random.Random(seed)
    valid = [encode_request(1, "echo", {"value": [1, b"x", "y"]}), encode_request(2, "slow", {"seconds": 0.01}),
             encode_frame([0, 3, "echo", {"value": {"k": 2**40}}])]

    def sample() -> bytes:
        base = bytearray(rng.choice(valid))
        kind = rng.randrange(4)
        if kind == 0:  # random bytes
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        if kind == 1:  # flip bytes of the body
            for _ in range(rng.randrange(1, 4)):
                base[rng.randrange(4, len(base))] = rng.randrange(256)
            return bytes(base)
        if kind == 2:  # truncated
            return bytes(base[: rng.randrange(1, len(base))])
        return bytes(base) + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 10)))  # trailing junk

    async def main():
        net = MemoryNetwork()
        server = RpcServer(Service(), max_frame_bytes=1 << 16)
        await server.start_memory(net, "jn1")
        good = await RpcClient.connect_memory(net, "jn1", src="nn1")
        for i in range(150):
            raw_log: list = []
            transport, proto = await net.connect(f"fuzz{i}", "jn1", lambda: Recorder(raw_log))
            transport.write(sample())
            await asyncio.sleep(0.05)
            transport.close()
            await proto.lost
            assert await good.call("echo", value=i) == i
        assert net.connections() == [("nn1", "jn1")]
        await good.close()
        await server.stop()
    sim(main, seed)


def test_a_cancelled_call_is_forgotten():
    async def main():
        net = MemoryNetwork(hook=lambda s, d, f: [0.5])
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        client = await RpcClient.connect_memory(net, "jn1", src="nn1")
        task = asyncio.ensure_future(client.call("echo", value="cancel me"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.pending_calls == 0
        assert await client.call("echo", value="next") == "next"  # the late answer was dropped
        await client.close()
        await server.stop()
    sim(main)


def test_fifo_network_never_reorders_one_direction():
    delays = {b"A": [0.3], b"B": [0.1], b"C": [0.0], b"D": [0.2]}

    async def main():
        net = MemoryNetwork(hook=lambda src, dst, frame: delays[frame], fifo=True)
        got: list = []
        t, _, _ = await raw_pair(net, got, [])
        t0 = asyncio.get_running_loop().time()
        for unit in [b"A", b"B", b"C", b"D"]:
            t.write(unit)
        await asyncio.sleep(1.0)
        assert [(round(w - t0, 6), d) for w, d in got] == [(0.3, b"A"), (0.3, b"B"), (0.3, b"C"), (0.3, b"D")]
    sim(main)


def test_no_timer_is_left_behind_when_no_call_is_in_flight():
    async def main():
        net = MemoryNetwork()
        server = RpcServer(Service())
        await server.start_memory(net, "jn1")
        client = await RpcClient.connect_memory(net, "jn1", src="nn1")
        assert await client.call("echo", value=1, timeout_ms=60_000) == 1
        assert client._sweep_handle is None and client._deadlines == []
        loop = asyncio.get_running_loop()
        assert not any(not t.cancelled() for t in loop._scheduled)  # nothing would move the virtual clock
        await client.close()
        await server.stop()
    sim(main)


def test_in_process_http_serves_registered_names_until_stopped_or_crashed():
    async def main():
        net = MemoryNetwork()
        got = []

        async def serve(url):
            got.append(url)
            return memory_download(b"body", 7, 3)

        async def body(download):
            return b"".join([c async for c in download]), download.crc

        base = net.serve_http("jn1", serve)
        assert base == "mem://jn1"
        assert await body(await net.fetch(f"{base}/getJournal?segmentTxId=1")) == (b"body", 7)
        with pytest.raises(TransportError, match="already in use"):
            net.serve_http("jn1", serve)
        with pytest.raises(TransportError, match="connection refused.*'jn2'"):
            await net.fetch("mem://jn2/getJournal")
        with pytest.raises(TransportError, match="not a mem:// URL"):
            await net.fetch("http://jn1/getJournal")
        net.crash("jn1")  # a power cut takes the node's HTTP server too
        with pytest.raises(TransportError, match="connection refused"):
            await net.fetch(f"{base}/x")

        async def restarted(url):
            return memory_download(b"new", None, 3)
        net.serve_http("jn1", restarted)
        net.stop_http("jn1", serve)  # the crashed incarnation's stop leaves the new one alone
        assert await body(await net.fetch("mem://jn1/x")) == (b"new", None)
        net.stop_http("jn1", restarted)
        net.stop_http("jn1", restarted)  # idempotent
        with pytest.raises(TransportError, match="connection refused"):
            await net.fetch("mem://jn1/x")
        return got
    assert asyncio.run(main()) == ["mem://jn1/getJournal?segmentTxId=1"]
