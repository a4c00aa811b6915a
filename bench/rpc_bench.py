"""RPC transport benchmark: 1 KiB round trips and 1000-record batches.

Why: every edit the NameNode logs crosses this transport to each JournalNode,
so its latency bounds ``logSync`` and its throughput bounds the quorum writer
(target 250,000 txns/s in batches of 1000). The numbers are only meaningful
against the physical floor of this machine, measured in the same run: the
round trip of a raw asyncio echo server (no framing, no msgpack, no dispatch)
over loopback TCP.

What runs: a server process (raw echo server, raw length-prefixed sink, RpcServer
over TCP, RpcServer over mutual TLS) and this client process, on loopback; the
in-memory network runs client and server in this process. The machine is
shared, so the cases of each group run interleaved in small blocks: the floor
and every case see the same background load. Reported:

* sequential 1 KiB round trips: p50 / p99 latency and calls/s, against the raw
  echo round trip;
* pipelined 1 KiB calls (bursts of ``--window`` concurrent calls): calls/s;
* ``journal``-like batches of 1000 records x ``--record-bytes``: txns/s,
  against the same bytes sent length-prefixed to a raw sink that acknowledges
  each with one byte;
* the client process's CPU time per call.

Usage::

    .venv/bin/python bench/rpc_bench.py            # about a minute
    .venv/bin/python bench/rpc_bench.py --quick    # a few seconds (smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.transport import pki, tls  # noqa: E402
from qjournal.transport.memory import MemoryNetwork  # noqa: E402
from qjournal.transport import RpcClient, RpcServer  # noqa: E402

PAYLOAD = b"x" * 1024


class BenchService:
    """What the JournalNode does for a write, minus the disk: take bytes, answer small."""

    async def rpc_echo(self, data):
        return data

    async def rpc_journal(self, req, segment_txid, first_txid, num_txns, records):
        return None


class _EchoServer(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.transport.write(data)


class _SinkServer(asyncio.Protocol):
    """Floor for batches: reads ``u32 length | body`` messages, answers one byte per message."""

    def connection_made(self, transport):
        self.transport = transport
        self.buf = bytearray()

    def data_received(self, data):
        buf = self.buf
        buf += data
        acks = 0
        off = 0
        while len(buf) - off >= 4:
            end = off + 4 + int.from_bytes(buf[off:off + 4], "big")
            if end > len(buf):
                break
            off = end
            acks += 1
        del buf[:off]
        if acks:
            self.transport.write(b"k" * acks)


class _EchoClient(asyncio.Protocol):
    """Counts echoed bytes; completes a future when ``expect`` bytes have come back."""

    def __init__(self):
        self.received = 0
        self.expect = 0
        self.waiter = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data):
        self.received += len(data)
        if self.waiter is not None and self.received >= self.expect:
            self.waiter.set_result(None)
            self.waiter = None

    async def round_trip(self, data):
        loop = asyncio.get_running_loop()
        self.expect = self.received + len(data)
        self.waiter = loop.create_future()
        self.transport.write(data)
        await self.waiter


def _server_main(conn, cert_dir):
    async def main():
        loop = asyncio.get_running_loop()
        echo = await loop.create_server(_EchoServer, "127.0.0.1", 0)
        sink = await loop.create_server(_SinkServer, "127.0.0.1", 0)
        plain = RpcServer(BenchService())
        _, plain_port = await plain.start_tcp("127.0.0.1", 0)
        s = pki.CertPaths(*(os.path.join(cert_dir, f"server.{x}") for x in ("crt", "key")),
                          os.path.join(cert_dir, "ca.crt"))
        secure = RpcServer(BenchService())
        _, tls_port = await secure.start_tcp("127.0.0.1", 0, ssl=tls.server_context(s.cert, s.key, s.ca))
        conn.send((echo.sockets[0].getsockname()[1], plain_port, tls_port, sink.sockets[0].getsockname()[1]))
        await loop.run_in_executor(None, conn.recv)  # wait for "stop"

    asyncio.run(main())


def _pct(samples, q):
    samples = sorted(samples)
    return samples[min(len(samples) - 1, int(q * len(samples)))]


class Case:
    """One measured case: ``unit()`` does one unit of work (a call, a burst, a batch)."""

    def __init__(self, name, unit, calls_per_unit=1, txns_per_call=0, bytes_per_call=0, latency=False):
        self.name = name
        self.unit = unit
        self.calls_per_unit = calls_per_unit
        self.txns_per_call = txns_per_call
        self.bytes_per_call = bytes_per_call
        self.latency = latency
        self.lat_ns = []
        self.wall_s = 0.0
        self.cpu_s = 0.0
        self.units = 0

    def result(self):
        calls = self.units * self.calls_per_unit
        r = {"calls_s": calls / self.wall_s, "cpu_us": self.cpu_s / calls * 1e6}
        if self.lat_ns:
            r["p50_us"] = _pct(self.lat_ns, 0.5) / 1e3
            r["p99_us"] = _pct(self.lat_ns, 0.99) / 1e3
        if self.txns_per_call:
            r["txns_s"] = calls * self.txns_per_call / self.wall_s
            r["mb_s"] = calls * self.bytes_per_call / self.wall_s / 1e6
        return r


async def interleave(cases, units, block):
    """Run the cases in turns of ``block`` units until each did ``units``.

    The machine is shared: interleaving exposes every case (and the floor) to
    the same background load, so their ratios stay meaningful.
    """
    for case in cases:  # warm-up
        for _ in range(min(block, 20)):
            await case.unit()
    perf, perf_ns, cpu = time.perf_counter, time.perf_counter_ns, time.process_time
    done = 0
    while done < units:
        step = min(block, units - done)
        for case in cases:
            t0, c0 = perf(), cpu()
            if case.latency:
                lat = case.lat_ns
                for _ in range(step):
                    a = perf_ns()
                    await case.unit()
                    lat.append(perf_ns() - a)
            else:
                for _ in range(step):
                    await case.unit()
            case.wall_s += perf() - t0
            case.cpu_s += cpu() - c0
            case.units += step
        done += step
    return {case.name: case.result() for case in cases}


def _echo_unit(proto):
    async def unit():
        await proto.round_trip(PAYLOAD)
    return unit


def _sink_unit(proto, body):
    loop = asyncio.get_running_loop()
    message = len(body).to_bytes(4, "big") + body

    async def unit():
        proto.expect = proto.received + 1
        proto.waiter = loop.create_future()
        proto.transport.write(message)
        await proto.waiter
    return unit


def _call_unit(client):
    async def unit():
        await client.call("echo", data=PAYLOAD, timeout_ms=20_000)
    return unit


def _burst_unit(client, window):
    async def unit():
        await asyncio.gather(*[client.call("echo", data=PAYLOAD, timeout_ms=20_000) for _ in range(window)])
    return unit


def _batch_unit(client, records, in_flight):
    req = {"jid": "bench", "epoch": 1, "ipc_serial": 0, "committed_txid": 0}
    counter = [0]

    async def one():
        counter[0] += 1
        await client.call("journal", req=req, segment_txid=1, first_txid=1 + counter[0] * 1000, num_txns=1000,
                          records=records, timeout_ms=20_000)

    async def unit():
        if in_flight == 1:
            await one()
        else:
            await asyncio.gather(*[one() for _ in range(in_flight)])
    return unit


async def _client_main(ports, cert_dir, args):
    echo_port, plain_port, tls_port, sink_port = ports
    n, window, batches = args.calls, args.window, args.batches
    loop = asyncio.get_running_loop()
    records = os.urandom(1000 * args.record_bytes)
    _, echo = await loop.create_connection(_EchoClient, "127.0.0.1", echo_port)
    _, sink = await loop.create_connection(_EchoClient, "127.0.0.1", sink_port)
    c = pki.CertPaths(os.path.join(cert_dir, "client.crt"), os.path.join(cert_dir, "client.key"),
                      os.path.join(cert_dir, "ca.crt"))
    tcp = await RpcClient.connect_tcp("127.0.0.1", plain_port)
    secure = await RpcClient.connect_tcp("127.0.0.1", tls_port, ssl=tls.client_context(c.cert, c.key, c.ca))
    net = MemoryNetwork()
    server = RpcServer(BenchService())
    await server.start_memory(net, "jn1")
    mem = await RpcClient.connect_memory(net, "jn1", src="nn1")

    results = {}
    results.update(await interleave([
        Case("raw echo (floor)", _echo_unit(echo), latency=True),
        Case("rpc tcp sequential", _call_unit(tcp), latency=True),
        Case("rpc tls sequential", _call_unit(secure), latency=True),
        Case("rpc memory sequential", _call_unit(mem), latency=True),
    ], n, 250))
    results.update(await interleave([
        Case(f"rpc tcp pipelined x{window}", _burst_unit(tcp, window), calls_per_unit=window),
        Case(f"rpc tls pipelined x{window}", _burst_unit(secure, window), calls_per_unit=window),
        Case(f"rpc memory pipelined x{window}", _burst_unit(mem, window), calls_per_unit=window),
    ], max(1, 2 * n // window), 4))
    batch = {"txns_per_call": 1000, "bytes_per_call": len(records)}
    results.update(await interleave([
        Case("raw batches (floor)", _sink_unit(sink, records), **batch),
        Case("rpc tcp batches", _batch_unit(tcp, records, 1), **batch),
        Case("rpc tcp batches x4", _batch_unit(tcp, records, 4), calls_per_unit=4, **batch),
        Case("rpc tls batches", _batch_unit(secure, records, 1), **batch),
        Case("rpc memory batches", _batch_unit(mem, records, 1), **batch),
    ], batches, 10))
    for client in (tcp, secure, mem):
        await client.close()
    await server.stop()
    echo.transport.close()
    sink.transport.close()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=10_000, help="sequential 1 KiB calls per case")
    parser.add_argument("--window", type=int, default=256, help="calls in flight when pipelining")
    parser.add_argument("--batches", type=int, default=300, help="1000-record batches per transport")
    parser.add_argument("--record-bytes", type=int, default=200, help="bytes per record in a batch")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.batches = 1000, 20

    with tempfile.TemporaryDirectory() as cert_dir:
        ca = pki.make_ca(cert_dir, "ca")
        pki.make_cert(cert_dir, ca, "server")
        pki.make_cert(cert_dir, ca, "client")
        parent, child = mp.Pipe()
        proc = mp.get_context("spawn").Process(target=_server_main, args=(child, cert_dir), daemon=True)
        proc.start()
        try:
            if not parent.poll(30):
                raise SystemExit("benchmark server did not start within 30 s")
            ports = parent.recv()
            results = asyncio.run(_client_main(ports, cert_dir, args))
        finally:
            if proc.is_alive():
                parent.send("stop")
            proc.join(10)
            if proc.is_alive():
                proc.kill()
                proc.join()

    floor = results["raw echo (floor)"]
    bfloor = results["raw batches (floor)"]
    print(f"# rpc_bench: 1 KiB payload, {args.calls} sequential calls per case, bursts of {args.window}, "
          f"batches of 1000 x {args.record_bytes} B; cases interleaved; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("# cpu us: client-process CPU per call (memory cases include the server)")
    print(f"{'case':<26} {'p50 us':>8} {'p99 us':>8} {'calls/s':>9} {'txns/s':>10} {'MB/s':>7} {'cpu us':>7}  vs floor")
    nan = float("nan")
    for name, r in results.items():
        if "txns_s" in r:
            ratio = f"txns/s x{r['txns_s'] / bfloor['txns_s']:.2f}"
        elif "p50_us" in r:
            ratio = f"p50 x{r['p50_us'] / floor['p50_us']:.2f}, calls/s x{r['calls_s'] / floor['calls_s']:.2f}"
        else:
            ratio = f"calls/s x{r['calls_s'] / floor['calls_s']:.2f}"
        print(f"{name:<26} {r.get('p50_us', nan):8.1f} {r.get('p99_us', nan):8.1f} {r['calls_s']:9.0f} "
              f"{r.get('txns_s', nan):10.0f} {r.get('mb_s', nan):7.1f} {r['cpu_us']:7.1f}  {ratio}")
    return results


if __name__ == "__main__":
    main()
