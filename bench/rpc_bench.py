"""RPC transport benchmark: 1 KiB round trips and 1000-record batches.

Why: every edit the NameNode logs crosses this transport to each JournalNode,
so its latency bounds ``logSync`` and its throughput bounds the quorum writer
(target 250,000 txns/s in batches of 1000). The numbers are only meaningful
against the physical floor of this machine, measured in the same run: the
round trip of a raw asyncio echo server (no framing, no msgpack, no dispatch)
over loopback TCP.

What runs: a server process (raw echo server, RpcServer over TCP, RpcServer
over mutual TLS) and this client process, on loopback. The in-memory network
runs client and server in this process. Reported:

* sequential 1 KiB round trips: p50 / p99 latency and calls/s;
* pipelined 1 KiB calls (``--window`` calls in flight): calls/s;
* ``journal``-like batches of 1000 records x ``--record-bytes``: txns/s;
* every figure also as a ratio to the raw echo floor.

Usage::

    .venv/bin/python bench/rpc_bench.py            # about a minute
    .venv/bin/python bench/rpc_bench.py --quick    # a few seconds (smoke)
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.transport import pki, tls  # noqa: E402
from qjournal.transport.memory import MemoryNetwork  # noqa: E402
from qjournal.transport.rpc import RpcClient, RpcServer  # noqa: E402

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


async def _raw_floor(port, n):
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(_EchoClient, "127.0.0.1", port)
    for _ in range(200):
        await proto.round_trip(PAYLOAD)
    lat = []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        a = time.perf_counter_ns()
        await proto.round_trip(PAYLOAD)
        lat.append(time.perf_counter_ns() - a)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    proto.transport.close()
    return {"p50_us": _pct(lat, 0.5) / 1e3, "p99_us": _pct(lat, 0.99) / 1e3, "calls_s": n / total,
            "cpu_us": cpu / n * 1e6}


async def _raw_batches(port, batches, record_bytes):
    """Floor for batches: the same bytes, length-prefixed, one at a time, acknowledged by one byte."""
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(_EchoClient, "127.0.0.1", port)
    body = os.urandom(1000 * record_bytes)
    message = len(body).to_bytes(4, "big") + body

    async def one():
        proto.expect = proto.received + 1
        proto.waiter = loop.create_future()
        proto.transport.write(message)
        await proto.waiter

    for _ in range(min(batches, 20)):
        await one()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(batches):
        await one()
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    proto.transport.close()
    return {"txns_s": batches * 1000 / total, "mb_s": batches * len(body) / total / 1e6,
            "cpu_us": cpu / batches * 1e6}


async def _rpc_sequential(client, n):
    for _ in range(200):
        await client.call("echo", data=PAYLOAD)
    lat = []
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        a = time.perf_counter_ns()
        await client.call("echo", data=PAYLOAD, timeout_ms=20_000)
        lat.append(time.perf_counter_ns() - a)
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"p50_us": _pct(lat, 0.5) / 1e3, "p99_us": _pct(lat, 0.99) / 1e3, "calls_s": n / total,
            "cpu_us": cpu / n * 1e6}


async def _rpc_pipelined(client, n, window):
    sem = asyncio.Semaphore(window)

    async def one():
        async with sem:
            await client.call("echo", data=PAYLOAD, timeout_ms=20_000)

    await asyncio.gather(*[one() for _ in range(min(n, 1000))])
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[one() for _ in range(n)])
    return {"calls_s": n / (time.perf_counter() - t0), "cpu_us": (time.process_time() - c0) / n * 1e6}


async def _rpc_batches(client, batches, record_bytes, in_flight):
    records = os.urandom(1000 * record_bytes)
    req = {"jid": "bench", "epoch": 1, "ipc_serial": 0, "committed_txid": 0}

    async def one(i):
        await client.call("journal", req=req, segment_txid=1, first_txid=1 + i * 1000, num_txns=1000,
                          records=records, timeout_ms=20_000)

    sem = asyncio.Semaphore(in_flight)

    async def limited(i):
        async with sem:
            await one(i)

    await asyncio.gather(*[limited(i) for i in range(min(batches, 20))])
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*[limited(i) for i in range(batches)])
    total, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"txns_s": batches * 1000 / total, "mb_s": batches * len(records) / total / 1e6,
            "cpu_us": cpu / batches * 1e6}


async def _client_main(ports, cert_dir, args):
    echo_port, plain_port, tls_port, sink_port = ports
    n, window = args.calls, args.window
    results = {}
    results["raw echo (floor)"] = await _raw_floor(echo_port, n)
    results["raw batches (floor)"] = await _raw_batches(sink_port, args.batches, args.record_bytes)

    c = pki.CertPaths(os.path.join(cert_dir, "client.crt"), os.path.join(cert_dir, "client.key"),
                      os.path.join(cert_dir, "ca.crt"))
    for name, port, ctx in (("tcp", plain_port, None),
                            ("tls", tls_port, tls.client_context(c.cert, c.key, c.ca))):
        client = await RpcClient.connect_tcp("127.0.0.1", port, ssl=ctx)
        results[f"rpc {name} sequential"] = await _rpc_sequential(client, n)
        results[f"rpc {name} pipelined"] = await _rpc_pipelined(client, n * 2, window)
        results[f"rpc {name} batches"] = await _rpc_batches(client, args.batches, args.record_bytes, 1)
        results[f"rpc {name} batches x4"] = await _rpc_batches(client, args.batches, args.record_bytes, 4)
        await client.close()

    net = MemoryNetwork()
    server = RpcServer(BenchService())
    await server.start_memory(net, "jn1")
    client = await RpcClient.connect_memory(net, "jn1", src="nn1")
    results["rpc memory sequential"] = await _rpc_sequential(client, n)
    results["rpc memory pipelined"] = await _rpc_pipelined(client, n * 2, window)
    results["rpc memory batches"] = await _rpc_batches(client, args.batches, args.record_bytes, 1)
    await client.close()
    await server.stop()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000, help="sequential 1 KiB calls per transport")
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
    print(f"# rpc_bench: 1 KiB payload, {args.calls} sequential calls, window {args.window}, "
          f"batches of 1000 x {args.record_bytes} B; python {sys.version.split()[0]}, {os.cpu_count()} cores")
    print("# cpu us: client-process CPU per call (per batch for batches); memory cases include the server")
    print(f"{'case':<26} {'p50 us':>8} {'p99 us':>8} {'calls/s':>9} {'txns/s':>10} {'MB/s':>7} {'cpu us':>7}  vs floor")
    for name, r in results.items():
        ratio = ""
        if "txns_s" in r:
            ratio = f"txns/s x{r['txns_s'] / results['raw batches (floor)']['txns_s']:.2f}"
        elif "p50_us" in r:
            ratio = f"p50 x{r['p50_us'] / floor['p50_us']:.2f}, calls/s x{r['calls_s'] / floor['calls_s']:.2f}"
        elif "calls_s" in r:
            ratio = f"calls/s x{r['calls_s'] / floor['calls_s']:.2f}"
        print(f"{name:<26} {r.get('p50_us', float('nan')):8.1f} {r.get('p99_us', float('nan')):8.1f} "
              f"{r.get('calls_s', float('nan')):9.0f} {r.get('txns_s', float('nan')):10.0f} "
              f"{r.get('mb_s', float('nan')):7.1f} {r.get('cpu_us', float('nan')):7.1f}  {ratio}")
    return results


if __name__ == "__main__":
    main()
