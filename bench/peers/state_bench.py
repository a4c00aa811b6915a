"""A NameNode holding N entries beside etcd: memory per entry, restart to the first answer, and the latency tail
of 64 clients with the pauses behind it, at 10^5, 10^6 and 10^7 entries in one run.

Why: issue 17 put etcd and ZooKeeper beside qjournal's commit path; issue 30 asks the same where a large namespace
is involved, and whether a NameNode holding 10^7 inodes stalls its clients. For each size and each system (all
started by ``systems.py`` on this machine, one after the other in one run):

1. **Fill.** Up to ``--rpc-max`` entries (10^6) are written through the real clients, 64 at a time, after 1,000
   first (warm-up): NameNode creates (each an inode and a retry-cache entry), etcd puts (empty values), ZooKeeper
   creates. Above it, qjournal's namespace is generated: an image of N inodes in the same shape (``/s/c<i>/f<k>``,
   64 directories) written with the NameNode's own image code before the NameNode starts (10^7 creates through RPC
   would take ten minutes; etcd and ZooKeeper are not run above ``--peer-max``). Then the NameNode saves its
   namespace (``dfsadmin -saveNamespace``), as its checkpointer would, so that a restart loads an image.
2. **RSS per entry**: the growth of each state-holding server's resident memory over the entries written, per entry
   (the NameNode; each etcd member or ZooKeeper server, averaged). For a generated namespace: the NameNode's RSS
   after its start less that of a NameNode started on an empty namespace, per inode (no retry-cache entries).
3. **Latency under load**: ``--clients`` clients (one call in flight each) for ``--seconds``: first creates of new
   files in the same directories, then reads of existing entries (``getFileInfo`` / etcd range / ZooKeeper
   ``exists``). Each call's latency is recorded: p50, p99, p99.9, max. For the NameNode, from its log and its
   ``/jmx`` ``JvmMetrics`` (``util/pause_monitor.py``, thresholds lowered to 1 ms here): every collector pause and
   every event-loop stall within each phase, the longest of each, the collections per generation. The load
   generator's own longest stall is printed too (a stall there inflates every latency it measures).
4. **Restart**: one state-holding server is stopped and started again with the same arguments; the time from its
   start to its first answer (the NameNode: its first durable create, with its image load and the replay of the
   edits written since the image, from ``StartupProgress``; etcd: a put through the restarted member; ZooKeeper:
   ``srvr`` as leader or follower).

Usage: ``.venv/bin/python bench/peers/state_bench.py [--sizes 100000,1000000,10000000] [--systems qjournal,etcd]
[--seconds 10]`` (``make bench-peers`` installs etcd and the Python clients first). 10^7 takes ~4 GiB and ~5 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from systems import SYSTEMS, Etcd, QJournal, ZooKeeper, rss_bytes  # noqa: E402

from qjournal.config import Configuration  # noqa: E402
from qjournal.namenode.dfs_client import DFSClient  # noqa: E402
from qjournal.protocol.protocols import DFSADMIN  # noqa: E402
from qjournal.util.pause_monitor import PauseMonitor  # noqa: E402

WARMUP = 1000
#: the NameNode logs every pause from 1 ms (``jvm.pause.info-threshold.ms``) and at INFO (its start-up phases)
NN_OPTS = ["-D", "jvm.pause.info-threshold.ms=1", "-D", "qjournal.log.level=INFO", "-D", "qjournal.log.json=true"]


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100.0 * len(s)))]


def lat_summary(xs: list[float]) -> dict:
    return {"n": len(xs), "p50": pct(xs, 50) * 1e3, "p99": pct(xs, 99) * 1e3, "p999": pct(xs, 99.9) * 1e3,
            "max": max(xs) * 1e3 if xs else float("nan")}


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------------------- qjournal specifics
def write_generated_image(name_dir: str, n: int, clients: int) -> None:
    """Overwrite the formatted empty image (txid 0) with one of ``n`` files ``/s/c<i>/f<k>`` (file j is
    ``/s/c<j % clients>/f<j // clients>``, as ``clients`` clients writing in turn), with the image module's
    own writer (schema, metadata, checksum)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from qjournal.namenode import image as img
    from qjournal.namenode.ops import ROOT_INODE_ID
    info, _table, _path = img.newest_valid_image(name_dir)  # the formatted one: its identity
    ts = 1_790_000_000_000
    s_id = ROOT_INODE_ID + 1
    dir_ids = np.arange(s_id + 1, s_id + 1 + clients, dtype=np.int64)
    first_file = s_id + 1 + clients
    j = np.arange(n, dtype=np.int64)
    ids = np.concatenate([np.array([ROOT_INODE_ID, s_id], dtype=np.int64), dir_ids, first_file + j])
    parents = np.concatenate([np.array([0, ROOT_INODE_ID], dtype=np.int64), np.full(clients, s_id, dtype=np.int64),
                              dir_ids[j % clients]])
    names = pa.concat_arrays([
        pa.array(["", "s"] + [f"c{i}" for i in range(clients)], pa.string()),
        pc.binary_join_element_wise("f", pc.cast(pa.array(j // clients), pa.string()), "")])
    nd = 2 + clients
    is_dir = np.concatenate([np.ones(nd, dtype=bool), np.zeros(n, dtype=bool)])
    table = pa.table({
        "inode_id": ids, "parent_id": parents, "name": names,
        "type": pc.if_else(pa.array(is_dir), "d", "f"),
        "permission": np.where(is_dir, 0o755, 0o644).astype(np.int32),
        "owner": pa.repeat("bench", len(ids)), "group": pa.repeat("supergroup", len(ids)),
        "mtime": np.full(len(ids), ts, dtype=np.int64), "atime": np.where(is_dir, 0, ts).astype(np.int64),
        "replication": np.where(is_dir, 0, 3).astype(np.int32),
        "block_size": np.where(is_dir, 0, 134217728).astype(np.int64), "length": np.zeros(len(ids), dtype=np.int64)})
    img.save_image(name_dir, table, img.ImageInfo(0, info.layout_version, info.namespace_id, info.cluster_id,
                                                 int(ids[-1])))


def nn_log_events(path: str, t0: float, t1: float) -> list[dict]:
    """The NameNode's JSON log lines written between wall times ``t0`` and ``t1``."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                ts = dt.datetime.fromisoformat(e["ts"].replace("Z", "+00:00")).timestamp()
                if t0 <= ts <= t1:
                    out.append(e)
    except FileNotFoundError:
        pass
    return out


def pauses_of(events: list[dict]) -> dict:
    gc_p = [e for e in events if e.get("pause_kind") == "gc"]
    loop_p = [e for e in events if e.get("pause_kind") == "loop"]
    longest_gc = max(gc_p, key=lambda e: e["pause_ms"], default=None)
    return {"gc_logged": len(gc_p), "gc_max_ms": longest_gc["pause_ms"] if longest_gc else 0.0,
            "gc_max_gen": longest_gc["gc_generation"] if longest_gc else -1,
            "gc_ms_list": sorted((round(e["pause_ms"], 1) for e in gc_p), reverse=True)[:8],
            "loop_max_ms": max((e["pause_ms"] for e in loop_p), default=0.0),
            "loop_over_50ms": sum(1 for e in loop_p if e["pause_ms"] >= 50),
            "loop_over_100ms": sum(1 for e in loop_p if e["pause_ms"] >= 100)}


def jmx(http: str, bean: str) -> dict:
    try:
        with urllib.request.urlopen(f"http://{http}/jmx?qry=Hadoop:service=NameNode,name={bean}", timeout=10) as r:
            beans = json.loads(r.read())["beans"]
        return beans[0] if beans else {}
    except OSError:
        return {}


class NameNodeFacts:
    """What the bench reads of a qjournal NameNode: its HTTP address and its log."""

    def __init__(self, driver: QJournal) -> None:
        nn = driver.daemons[3]
        self.http = nn.ready["http"]
        self.log_path = nn.log_path


# -------------------------------------------------------------------------------------------------- the load
async def fill(driver, tag: str, count: int, clients: int) -> float:
    """Write ``count`` entries with ``clients`` clients; returns the seconds it took."""
    await driver.connect(clients, tag)
    t0 = time.perf_counter()

    async def worker(i: int) -> None:
        for k in range((count - i + clients - 1) // clients):  # entry j is client j % clients's (as generated)
            while True:
                try:
                    await driver.op(i, k, b"")
                    break
                except Exception as e:  # noqa: BLE001 - etcd's back-pressure (its apply behind its commit
                    if "too many requests" not in str(e):  # by 5,000 entries on a loaded machine): try again
                        raise
                    await asyncio.sleep(0.05)
    await asyncio.gather(*(worker(i) for i in range(clients)))
    took = time.perf_counter() - t0
    await driver.close()
    return took


async def read_op(driver, i: int, k: int) -> None:
    """One read of an existing entry ``<tag>/c<i>/<k>`` on client i (the fill's names)."""
    if isinstance(driver, QJournal):
        st = await driver.clients[i].get_file_info(f"/{driver.tag}/c{i}/f{k}")
        assert st is not None, f"/{driver.tag}/c{i}/f{k} missing"
    elif isinstance(driver, Etcd):
        await driver.clients[i].get(b"/%s/c%d/k%d" % (driver.tag, i, k))
    else:
        await driver.clients[i].exists(f"/{driver.tag}/c{i}/k{k}")


async def create_op(driver, i: int, k: int) -> None:
    if isinstance(driver, QJournal):
        await driver.clients[i].create(f"/{driver.tag}/c{i}/n{k}")
    elif isinstance(driver, Etcd):
        await driver.clients[i].put(b"/%s/c%d/n%d" % (driver.tag, i, k), b"")
    else:
        await driver.clients[i].create(f"/{driver.tag}/c{i}/n{k}", data=b"")


async def timed_phase(driver, kind: str, per_client: int, clients: int, seconds: float, seed: int) -> tuple[list, float]:
    """``clients`` clients doing ``kind`` calls for ``seconds``; returns (latencies in s, wall seconds)."""
    lat: list[float] = []
    end = time.perf_counter() + seconds
    rng = random.Random(seed)

    async def worker(i: int) -> None:
        k = 0
        while time.perf_counter() < end:
            t = time.perf_counter()
            if kind == "create":
                await create_op(driver, i, k)
            else:
                await read_op(driver, i, rng.randrange(per_client))
            lat.append(time.perf_counter() - t)
            k += 1
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(clients)))
    return lat, time.perf_counter() - t0


async def connect_existing(driver, tag: str, clients: int) -> None:
    """Clients on the entries already written under ``tag`` (no directory made twice)."""
    if isinstance(driver, QJournal):
        driver.clients = [DFSClient(addresses=[("nn", *driver.addr)], user="bench") for _ in range(clients)]
        driver.tag = tag
    elif isinstance(driver, Etcd):
        import aetcd
        driver.tag = tag.encode()
        driver.clients = [aetcd.Client("127.0.0.1", driver.client_ports[i % 3]) for i in range(clients)]
        for c in driver.clients:
            await c.connect()
    else:
        import aiozk
        servers = [f"127.0.0.1:{s.client_port}" for s in driver.ensemble.servers]
        driver.tag = tag
        driver.clients = [aiozk.ZKClient(servers[i % 3], session_timeout=30) for i in range(clients)]
        for c in driver.clients:
            await c.start()


# ----------------------------------------------------------------------------------------------- restart
async def first_answer(op, deadline_s: float = 300.0) -> None:
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


async def restart(driver) -> dict:
    """Stop one server holding the state, start it again, and time until it answers."""
    if isinstance(driver, QJournal):
        nn = driver.daemons[3]
        argv = list(nn.proc.args)
        host, port = driver.addr
        i = argv.index("--rpc-address")
        argv[i + 1] = f"{host}:{port}"  # the same address: the clients' configuration
        nn.stop()
        restart_log = f"{driver.root}/nn-restart.log"
        t0 = time.perf_counter()
        with open(restart_log, "wb") as lf:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=lf, start_new_session=True)
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
            proc.wait(60)
        ev = nn_log_events(restart_log, 0, time.time() + 1)
        image = next((e for e in ev if e.get("msg") == "loaded image"), {})
        replay = next((e for e in ev if e.get("msg") == "replayed edits"), {})
        return {"restart_s": took, "image_ms": image.get("load_ms"), "image_inodes": image.get("inodes"),
                "replay_ms": replay.get("replay_ms"), "replay_txns": replay.get("txns")}
    if isinstance(driver, Etcd):
        import aetcd
        member = 1
        argv = driver.argvs[member]
        p = driver.procs[member]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        t0 = time.perf_counter()
        with open(f"{driver.root}/e{member}-restart.log", "wb") as lf:
            driver.procs[member] = subprocess.Popen(argv, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)

        async def put() -> None:
            async with aetcd.Client("127.0.0.1", driver.client_ports[member], timeout=1) as c:
                await c.put(b"/restart", b"1")
        await first_answer(put)
        return {"restart_s": time.perf_counter() - t0}
    if isinstance(driver, ZooKeeper):
        sid = driver.ensemble.servers[1].server_id
        t0 = time.perf_counter()
        await asyncio.to_thread(driver.ensemble.restart, sid, 300.0)
        return {"restart_s": time.perf_counter() - t0}
    raise TypeError(driver)


# --------------------------------------------------------------------------------------------- one system
def state_pids(driver) -> list[int]:
    """The processes that hold the state: the NameNode; every etcd member; every ZooKeeper server."""
    if isinstance(driver, QJournal):
        return [driver.daemons[3].pid]
    return driver.pids()


async def save_namespace(driver: QJournal) -> int:
    async with DFSClient(addresses=[("nn", *driver.addr)], user="bench") as c:
        await c.call_on("nn", DFSADMIN.set_safe_mode, action="enter")
        r = await c.call_on("nn", DFSADMIN.save_namespace)
        await c.call_on("nn", DFSADMIN.set_safe_mode, action="leave")
    return r["txid"]


async def measure(name: str, root: str, n: int, args, empty_rss: dict) -> dict:
    generated = name == "qjournal" and n > args.rpc_max
    driver = SYSTEMS[name](root)
    if name == "qjournal":
        driver.nn_opts = NN_OPTS
        if generated:
            driver.before_nn_start = lambda name_dir: write_generated_image(name_dir, n, args.clients)
    t_start = time.perf_counter()
    await driver.start()
    res: dict = {"system": name, "entries": n, "generated": generated, "load_start": load()}
    try:
        pids = state_pids(driver)
        if generated:
            res["start_s"] = time.perf_counter() - t_start
            after = [rss_bytes(p) for p in pids]
            before = [empty_rss["qjournal"]]
            res["fill_s"] = 0.0
        else:
            await fill(driver, "warm", WARMUP, args.clients)
            gc.collect()
            before = [rss_bytes(p) for p in pids]
            res["fill_s"] = await fill(driver, "s", n, args.clients)
            after = [rss_bytes(p) for p in pids]
            if name == "qjournal" and n == min(args.sizes):
                empty_rss["qjournal"] = before[0]
        res["rss_before_mib"] = sum(before) / len(before) / 2**20
        res["rss_after_mib"] = sum(after) / len(after) / 2**20
        res["rss_per_entry"] = (sum(after) / len(after) - sum(before) / len(before)) / n
        res["servers"] = len(pids)
        if name == "qjournal":
            res["image_txid"] = await save_namespace(driver)
            facts = NameNodeFacts(driver)
        per_client = n // args.clients
        for kind in ("create", "read"):
            await connect_existing(driver, "s", args.clients)
            gm = jmx(facts.http, "JvmMetrics") if name == "qjournal" else {}
            mon = PauseMonitor(1e9, 1e9)
            mon.start()
            w0 = time.time()
            lat, wall = await timed_phase(driver, kind, per_client, args.clients, args.seconds, seed=n)
            w1 = time.time()
            mon.stop()
            await driver.close()
            ph = {"ops_per_s": len(lat) / wall, **lat_summary(lat), "gen_stall_ms": mon.loop_stall_max_ms,
                  "gen_gc_max_ms": max(mon.gc_max_ms), "load": load()}
            if name == "qjournal":
                gm1 = jmx(facts.http, "JvmMetrics")
                ph.update(pauses_of(nn_log_events(facts.log_path, w0, w1)))
                ph["gc_counts"] = [gm1.get(f"GcCountGen{g}", 0) - gm.get(f"GcCountGen{g}", 0) for g in range(3)]
            res[kind] = ph
        res.update(await restart(driver))
        res["load_end"] = load()
        return res
    finally:
        try:
            await driver.close()
        except Exception:  # noqa: BLE001 - best effort at the end
            pass
        driver.stop()


async def empty_namenode_rss(root: str) -> int:
    """The RSS of a NameNode on an empty namespace (what a generated namespace's RSS is compared with)."""
    driver = QJournal(os.path.join(root, "empty"))
    driver.nn_opts = NN_OPTS
    await driver.start()
    try:
        await fill(driver, "warm", WARMUP, 64)
        gc.collect()
        return rss_bytes(driver.daemons[3].pid)
    finally:
        driver.stop()


def fmt_ms(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def report(rows: list[dict]) -> None:
    log("\n| entries | system | RSS per entry | restart to first answer | image load (inodes) | replay (edits, edits/s) |"
        "\n|---:|---|---:|---:|---:|---:|")
    for r in rows:
        img = "-" if r.get("image_ms") is None else f"{r['image_ms'] / 1000:.2f} s ({r['image_inodes']:,})"
        rep = "-"
        if r.get("replay_ms") is not None:
            rate = r["replay_txns"] / (r["replay_ms"] / 1000) if r["replay_ms"] else float("nan")
            rep = f"{r['replay_ms'] / 1000:.2f} s ({r['replay_txns']:,}, {rate:,.0f}/s)"
        log(f"| {r['entries']:,} | {r['system']}{' (generated)' if r['generated'] else ''} | "
            f"{r['rss_per_entry']:,.0f} B | {r['restart_s']:.2f} s | {img} | {rep} |")
    log("\n| entries | system | phase | calls/s | p50 ms | p99 ms | p99.9 ms | max ms | server: longest loop stall ms "
        "(>=50 / >=100 ms) | longest GC pause ms (gen) | collections gen0/1/2 | load generator: longest stall ms | load |"
        "\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        for kind in ("create", "read"):
            p = r[kind]
            srv = gcp = cnt = "-"
            if r["system"] == "qjournal":
                srv = f"{p['loop_max_ms']:.1f} ({p['loop_over_50ms']} / {p['loop_over_100ms']})"
                gcp = f"{p['gc_max_ms']:.1f} ({p['gc_max_gen']})"
                cnt = "/".join(str(c) for c in p["gc_counts"])
            log(f"| {r['entries']:,} | {r['system']} | {kind} | {p['ops_per_s']:,.0f} | {p['p50']:.2f} | {p['p99']:.2f} | "
                f"{p['p999']:.2f} | {p['max']:.1f} | {srv} | {gcp} | {cnt} | {p['gen_stall_ms']:.1f} | {p['load']} |")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000,10000000")
    ap.add_argument("--systems", default="qjournal,etcd")
    ap.add_argument("--rpc-max", type=int, default=1_000_000, help="above this, qjournal's namespace is generated")
    ap.add_argument("--peer-max", type=int, default=1_000_000, help="no etcd / ZooKeeper above this")
    ap.add_argument("--zk-max", type=int, default=100_000, help="no ZooKeeper above this (its 512 MiB heap)")
    ap.add_argument("--seconds", type=float, default=10.0, help="each latency phase")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    args.sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    logging.basicConfig(level=logging.ERROR)
    gc.freeze()  # the load generator's imports: out of its own collector's way
    root = tempfile.mkdtemp(prefix="state-bench-")
    log(f"# state bench: sizes {args.sizes}, {args.clients} clients, {args.seconds:.0f} s per phase, cpus "
        f"{os.cpu_count()}, load average at start {load()}, work dir {root}")
    rows = []
    empty_rss: dict = {}
    try:
        for n in args.sizes:
            for name in [s for s in args.systems.split(",") if s]:
                if name != "qjournal" and (n > args.peer_max or (name == "zookeeper" and n > args.zk_max)):
                    continue
                if name == "qjournal" and n > args.rpc_max and "qjournal" not in empty_rss:
                    empty_rss["qjournal"] = await empty_namenode_rss(root)
                sub = os.path.join(root, f"{name}-{n}")
                os.makedirs(sub)
                r = await measure(name, sub, n, args, empty_rss)
                rows.append(r)
                log(f"  {n:,} {name}: filled in {r['fill_s']:.1f} s, RSS/entry {r['rss_per_entry']:,.0f} B, restart "
                    f"{r['restart_s']:.2f} s, create p99.9 {r['create']['p999']:.1f} ms, read p99.9 "
                    f"{r['read']['p999']:.1f} ms (load {r['load_start']} -> {r['load_end']})")
                log("    " + json.dumps(r, default=str))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    report(rows)
    log(f"\nload average at end {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
