"""Memory per entry and restart with N entries: qjournal's NameNode beside etcd and ZooKeeper, in one run.

Why: issue 17 asks for the peers beside qjournal in every target's table. The replay and memory targets are
qjournal's own (``bench/replay_bench.py``: edits/s, failover after 10^5 edits; ``bench/memory_bench.py``: bytes
per inode at 10^6 and 10^7); this script adds what a user would compare them with: how much memory each system's
servers take per entry they hold, and how long a server takes to serve again after a restart with those entries
behind it (a NameNode replays its edit log; etcd replays its WAL and snapshot; ZooKeeper loads its snapshot and
transaction log), all three started by ``systems.py`` on this machine, one after the other in one run.

For each system: start it, write 1,000 entries (warm-up: connections, code paths), read the servers' resident
memory, write ``--entries`` more with 64 clients (empty values: a NameNode create carries none; keys of the same
shape, 64 directories), read the resident memory again. "RSS per entry" is the growth over the entries written, per
server that holds the state (the NameNode for qjournal: the JournalNodes hold the log, not the namespace; each
member for etcd and ZooKeeper, averaged). It counts what the process holds for them, allocator slack included:
for the NameNode an inode and a retry-cache entry per create (a retried call must get the first answer), for etcd
its MVCC index and the pages of its bbolt file it touched, for ZooKeeper its data tree and the JVM heap it grew
(its heap is sized 512 MiB and grows as used). Then one server is killed and started again with the same
arguments, and "restart" is the time from its start to its first answer: for the NameNode its first durable create
(it replays every edit from the JournalNodes: no checkpoint was taken), for etcd the first put through the
restarted member, for ZooKeeper ``ZooKeeperEnsemble.restart`` (the server answers ``srvr`` as leader or follower).

Usage: ``.venv/bin/python bench/peers/state_bench.py [--entries 100000] [--systems qjournal,etcd,zookeeper]``
(``make bench-peers`` installs etcd and the Python clients first).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from systems import SYSTEMS, Etcd, QJournal, ZooKeeper, rss_bytes  # noqa: E402

from qjournal.config import Configuration  # noqa: E402
from qjournal.namenode.dfs_client import DFSClient  # noqa: E402

CLIENTS = 64
WARMUP = 1000


def state_pids(driver) -> list[int]:
    """The processes that hold the state: the NameNode; every etcd member; every ZooKeeper server."""
    if isinstance(driver, QJournal):
        return [driver.daemons[3].pid]
    return driver.pids()


async def load(driver, tag: str, count: int) -> float:
    """Write ``count`` entries with CLIENTS clients; returns the seconds it took."""
    await driver.connect(CLIENTS, tag)
    per = -(-count // CLIENTS)
    t0 = time.perf_counter()

    async def worker(i: int) -> None:
        for k in range(min(per, count - i * per)):
            await driver.op(i, k, b"")
    await asyncio.gather(*(worker(i) for i in range(CLIENTS)))
    took = time.perf_counter() - t0
    await driver.close()
    return took


async def first_answer(op, deadline_s: float = 120.0) -> None:
    """Retry ``op()`` until it succeeds (a server starting refuses or times out meanwhile)."""
    end = time.monotonic() + deadline_s
    while True:
        try:
            await op()
            return
        except Exception:  # noqa: BLE001 - not serving yet
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.01)


async def restart_s(driver) -> float:
    """Kill one server holding the state, start it again, and time until it answers."""
    if isinstance(driver, QJournal):
        nn = driver.daemons[3]
        argv = list(nn.proc.args)
        host, port = driver.addr
        i = argv.index("--rpc-address")
        argv[i + 1] = f"{host}:{port}"  # the same address: the clients' configuration
        nn.stop()
        t0 = time.perf_counter()
        with open(f"{driver.root}/nn-restart.log", "wb") as log:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
        conf = Configuration()  # retry at once: the client's failover back-off (500 ms, doubling) is not the server's
        conf.set("dfs.client.failover.sleep.base.millis", "1")
        conf.set("dfs.client.failover.sleep.max.millis", "10")
        client = DFSClient(conf, addresses=[("nn", host, port)], user="bench")
        try:
            await first_answer(lambda: client.create(f"/s/c0/restart-{time.monotonic_ns()}"))
            took = time.perf_counter() - t0
        finally:
            await client.close()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
        return took
    if isinstance(driver, Etcd):
        import aetcd
        member = 1
        argv = driver.argvs[member]
        p = driver.procs[member]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        t0 = time.perf_counter()
        log = open(f"{driver.root}/e{member}-restart.log", "wb")
        driver.procs[member] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

        async def put() -> None:
            async with aetcd.Client("127.0.0.1", driver.client_ports[member], timeout=1) as c:
                await c.put(b"/restart", b"1")
        await first_answer(put)
        return time.perf_counter() - t0
    if isinstance(driver, ZooKeeper):
        sid = driver.ensemble.servers[1].server_id
        t0 = time.perf_counter()
        await asyncio.to_thread(driver.ensemble.restart, sid, 120.0)
        return time.perf_counter() - t0
    raise TypeError(driver)


async def measure(name: str, root: str, entries: int) -> dict:
    driver = SYSTEMS[name](root)
    await driver.start()
    try:
        await load(driver, "warm", WARMUP)
        pids = state_pids(driver)
        before = [rss_bytes(p) for p in pids]
        took = await load(driver, "s", entries)
        after = [rss_bytes(p) for p in state_pids(driver)]
        per_entry = sum(a - b for a, b in zip(after, before)) / len(pids) / entries
        restart = await restart_s(driver)
        return {"system": name, "entries": entries, "load_s": took, "rss_before_mib": sum(before) / len(pids) / 2**20,
                "rss_after_mib": sum(after) / len(pids) / 2**20, "rss_per_entry": per_entry, "restart_s": restart,
                "servers": len(pids)}
    finally:
        try:
            await driver.close()
        except Exception:  # noqa: BLE001 - best effort at the end
            pass
        driver.stop()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--systems", default="qjournal,etcd,zookeeper")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    root = tempfile.mkdtemp(prefix="state-bench-")
    print(f"# state bench: {args.entries:,} entries per system, {CLIENTS} clients, cpus {os.cpu_count()}, load average "
          f"at start {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    try:
        for name in [s for s in args.systems.split(",") if s]:
            r = await measure(name, root, args.entries)
            rows.append(r)
            print(f"  {name}: loaded in {r['load_s']:.1f} s, load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\n| system | servers holding the state | RSS per server before -> after | RSS per entry | "
          "restart to first answer |\n|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['system']} | {r['servers']} | {r['rss_before_mib']:.0f} -> {r['rss_after_mib']:.0f} MiB | "
              f"{r['rss_per_entry']:,.0f} B | {r['restart_s']:.2f} s |")
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
