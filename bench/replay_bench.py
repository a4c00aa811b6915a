"""Replay benchmark: edits/s through the NameNode's tailer, and failover time after 10^5 unreplayed edits.

Why: a standby that catches up (start-up, a long tail period, a failover after a gap) replays every edit it
has not applied; the target (issue 17) is 200,000 edits/s, so that a failover after 100,000 unreplayed edits
takes under one second. The real failover reads from the quorum journal, so the read side of those paths is
measured, not only the local file's.

What it measures, each in a fresh child process (so a "before" tree and this tree run back to back in the same
conditions, alternating, ``--baseline-src``; each tree reads from its own three JournalNode processes running its
own code, since recovery and the edit caches are the JournalNodes' work):

1. ``file``: ``EditLogTailer.catch_up`` over a ``file://`` journal of finalized segments.
2. ``http``: the same over the quorum journal (three ``qjournal journalnode`` processes), finalized segments
   streamed from ``/getJournal`` (``client/reader.py``).
3. ``rpc``: the same over the quorum journal's in-progress segment, served by the JournalNodes' edit caches
   (``get_journaled_edits``, ``client/rpc_reader.py``; the child reports that no round fell back to streaming).
4. ``failover``: ``bench/namenode_bench.py``'s failover (two in-process NameNodes over the same three
   JournalNodes, the standby's tail period 1 h): ``transition_to_active`` to the first accepted write after
   ``--edits`` edits since the checkpoint.

Each replay child first replays the first 1,000 edits into a throwaway namespace (the first HTTP fetch of a
process, imports), then times a full replay into a fresh namespace and retry cache. The edit mix is
``namenode_bench``'s: mkdir, create, rename in turn, 1,000 per directory, every op with a client id (so every
edit also rebuilds a retry-cache entry).

Usage: ``.venv/bin/python bench/replay_bench.py [--edits 100000] [--rounds 3] [--baseline-src DIR/src]``
(``git archive <commit> src | tar -x -C DIR`` makes a baseline tree).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", "src"))
if "--child" not in sys.argv:  # a child runs the tree its PYTHONPATH names
    sys.path.insert(0, SRC)

from namenode_bench import JNs, bench_failover  # noqa: E402
from qjournal.config import Configuration  # noqa: E402
from qjournal.namenode.journal_registry import open_journal  # noqa: E402
from qjournal.namenode.namespace import CallContext, Namespace  # noqa: E402
from qjournal.namenode.ops import encode_op  # noqa: E402
from qjournal.namenode.retry_cache import RetryCache  # noqa: E402
from qjournal.namenode.tailer import EditLogTailer  # noqa: E402
from qjournal.protocol.messages import NamespaceInfo  # noqa: E402

TARGET_EDITS_PER_S = 200_000
TARGET_FAILOVER_S = 1.0
NS_INFO = NamespaceInfo(11, "CID-replay")
WARMUP_EDITS = 1_000


def log(msg: str) -> None:
    print(msg, flush=True)


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


# ------------------------------------------------------------------ the edits
def make_edits(n: int) -> list[tuple[int, bytes]]:
    """``n`` edits ``(opcode, body)``: mkdir / create / rename in turn, 1,000 per directory."""
    ns = Namespace(superuser="bench")
    out: list[tuple[int, bytes]] = []
    client_id = b"\x07" * 16
    i = 0
    while len(out) < n:
        ctx = CallContext("bench", ("bench",), client_id, i, i)
        d, k = divmod(i, 1000)
        if k == 0:
            ops = ns.mkdirs(ctx, f"/r/{d}")
        elif k % 3 == 1:
            ops = ns.mkdirs(ctx, f"/r/{d}/d{k}")
        elif k % 3 == 2:
            ops = ns.create(ctx, f"/r/{d}/f{k}")
        else:
            ops = ns.rename(ctx, f"/r/{d}/f{k - 1}", f"/r/{d}/g{k}")
        out.extend(encode_op(op) for op in ops)
        i += 1
    return out[:n]


async def write_edits(uri: str, edits: list[tuple[int, bytes]], segment_txns: int, finalize: bool):
    """Write ``edits`` from txid 1 in segments of ``segment_txns`` (a sync every 1,000); the last segment
    is left in progress unless ``finalize``. Returns the journal (still the writer when not finalized)."""
    j = open_journal(uri, Configuration())
    await j.format(NS_INFO, force=True)
    if hasattr(j, "ns_info"):
        j.ns_info = NS_INFO
    await j.recover_unfinalized_segments()
    txid = 0
    while txid < len(edits):
        first = txid + 1
        out = await j.start_log_segment(first)
        for opcode, body in edits[txid:txid + segment_txns]:
            txid += 1
            out.write(txid, body, opcode)
            if txid % 1000 == 0:
                out.mark()
                await out.sync()
        out.mark()
        await out.sync()
        if finalize or txid < len(edits):
            await out.close()
            await j.finalize_log_segment(first, txid)
    if not finalize:  # until the JournalNodes know the last txid committed (the writer's next heartbeat)
        deadline = time.monotonic() + 30
        while (await j.get_journaled_edits(txid)).last_txid < txid:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the edit caches never served txid {txid}")
            await asyncio.sleep(0.01)
    return j


# ------------------------------------------------------------------ children
async def child_replay(uri: str, n: int, in_progress: bool) -> dict:
    conf = Configuration()
    conf.set("qjournal.log.level", "WARNING")
    j = open_journal(uri, conf)
    if hasattr(j, "ns_info"):
        j.ns_info = NS_INFO
    warm = EditLogTailer(Namespace(superuser="bench"), RetryCache(), asyncio.Lock(), 0, lambda: 0, 1000)
    await warm.catch_up(j, in_progress, to_txid=min(WARMUP_EDITS, n))
    t = EditLogTailer(Namespace(superuser="bench"), RetryCache(), asyncio.Lock(), 0, lambda: 0, 1000)
    t0 = time.perf_counter()
    got = await t.catch_up(j, in_progress)
    dt = time.perf_counter() - t0
    res = {"edits": got, "seconds": dt, "retry_cache": len(t.retry_cache), "inodes": len(t.namespace),
           "load": load()}
    for k in ("rpc_reads", "rpc_fallbacks", "bytes_streamed", "bytes_rpc"):
        if hasattr(j, k):
            res[k] = getattr(j, k)
    await j.close()
    if got != n:
        raise SystemExit(f"replayed {got} edits, expected {n}")
    return res


async def child_failover(jns: list[str], n: int) -> dict:
    root = tempfile.mkdtemp(prefix="replay-fo-")
    try:
        stamp = f"{os.getpid()}x{time.monotonic_ns()}"
        took, gen = await bench_failover(
            root, n, lambda jid: "qjournal://" + ";".join(jns) + f"/{jid}{stamp}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"seconds": took, "logging_s": gen, "load": load()}


async def run_child(src: str, *args: str) -> dict:
    """Run a child on the tree ``src`` (the event loop keeps running: the rpc path's writer heartbeats)."""
    env = dict(os.environ, PYTHONPATH=src)
    p = await asyncio.create_subprocess_exec(sys.executable, os.path.abspath(__file__), "--child", *args,
                                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_b, err_b = await p.communicate()
    stdout, stderr = out_b.decode(errors="replace"), err_b.decode(errors="replace")
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
        if line.startswith("    phases:"):  # bench_failover's phase line
            log("      " + line.strip())
    raise RuntimeError(f"child {args} with {src} failed ({p.returncode}):\n{stdout[-2000:]}\n{stderr[-4000:]}")


# ------------------------------------------------------------------ parent
def fmt_rate(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f}" + (f" ({min(rates):,.0f}-{max(rates):,.0f})" if len(rates) > 1 else "")


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="replay runs per path and tree (interleaved)")
    ap.add_argument("--paths", default="file,http,rpc", help="which replay paths (file, http, rpc)")
    ap.add_argument("--segment-txns", type=int, default=20_000, help="txns per finalized segment")
    ap.add_argument("--baseline-src", help="a 'before' tree's src directory, run alternately with this one")
    ap.add_argument("--failover-rounds", type=int, default=1, help="failover runs per tree (0: none)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        kind, *rest = args.child
        if kind == "replay":
            res = await child_replay(rest[0], int(rest[1]), rest[2] == "1")
        else:
            res = await child_failover(rest[0].split(","), int(rest[1]))
        print("RESULT " + json.dumps(res), flush=True)
        return 0

    trees = [("this tree", SRC)] + ([("baseline", os.path.abspath(args.baseline_src))] if args.baseline_src else [])
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    root = tempfile.mkdtemp(prefix="replay-bench-")
    log(f"# replay bench: {args.edits:,} edits, cpus={os.cpu_count()}, python {sys.version.split()[0]}, "
        f"load average at start {load()}")
    need_jns = bool({"http", "rpc"} & set(paths)) or args.failover_rounds > 0
    jns: dict[str, JNs] = {}
    for k, (label, src) in enumerate(trees if need_jns else []):
        os.makedirs(f"{root}/{k}")
        jns[label] = JNs(f"{root}/{k}", src)
    writers = []
    try:
        edits = make_edits(args.edits)
        nbytes = sum(len(b) for _, b in edits)
        log(f"edits: {len(edits):,}, {nbytes / len(edits):.0f} body bytes per edit on average")
        uris: dict[tuple[str, str], tuple[str, bool]] = {}
        if "file" in paths:  # one file journal, read by every tree
            await (await write_edits(f"file://{root}/file", edits, args.segment_txns, True)).close()
        for label, _src in trees:
            if "file" in paths:
                uris["file", label] = (f"file://{root}/file", False)
            if "http" in paths:
                uris["http", label] = (jns[label].uri("replayhttp"), False)
                await (await write_edits(uris["http", label][0], edits, args.segment_txns, True)).close()
            if "rpc" in paths:  # one in-progress segment, its writer kept (the committed txid stays known)
                uris["rpc", label] = (jns[label].uri("replayrpc"), True)
                writers.append(await write_edits(uris["rpc", label][0], edits, len(edits), False))
        results: dict[tuple[str, str], list[dict]] = {}
        for r in range(args.rounds):
            for path in paths:
                for label, src in trees:
                    uri, in_progress = uris[path, label]
                    res = await run_child(src, "replay", uri, str(len(edits)), "1" if in_progress else "0")
                    results.setdefault((path, label), []).append(res)
                    extra = "".join(f", {k} {res[k]:,}" for k in ("rpc_reads", "rpc_fallbacks") if k in res)
                    log(f"  round {r + 1} {path:>4} {label:>9}: {res['edits'] / res['seconds']:>9,.0f} edits/s "
                        f"({res['seconds'] * 1000:,.0f} ms{extra}; load {res['load']})")
                    if path == "rpc" and res.get("rpc_fallbacks"):
                        log("    (a round fell back to streaming segments: not the edit-cache path alone)")
        fo: dict[str, list[dict]] = {}
        for r in range(args.failover_rounds):
            for label, src in trees:
                res = await run_child(src, "failover", ",".join(d.ready["rpc"] for d in jns[label].daemons),
                                      str(len(edits)))
                fo.setdefault(label, []).append(res)
                log(f"  failover {label:>9}: {res['seconds'] * 1000:,.0f} ms after {len(edits):,} edits "
                    f"(load {res['load']})")
        log(f"\nload average at end {load()}\nmarkdown:\n")
        log("| path | tree | edits/s median (min-max) | ÷ target 200,000 | load averages |\n|---|---|---:|---:|---|")
        for path in paths:
            for label, _src in trees:
                rs = results[(path, label)]
                rates = [x["edits"] / x["seconds"] for x in rs]
                log(f"| {path} | {label} | {fmt_rate(rates)} | {statistics.median(rates) / TARGET_EDITS_PER_S:.2f} "
                    f"| {', '.join(x['load'] for x in rs)} |")
        if fo:
            log(f"\n| failover after {len(edits):,} edits (qjm) | tree | transition → first write | "
                f"÷ target 1 s | load averages |\n|---|---|---:|---:|---|")
            for label, _src in trees:
                secs = [x["seconds"] for x in fo[label]]
                log(f"| | {label} | {statistics.median(secs) * 1000:,.0f} ms | "
                    f"{statistics.median(secs) / TARGET_FAILOVER_S:.2f} | {', '.join(x['load'] for x in fo[label])} |")
    finally:
        await cleanup(writers, list(jns.values()), root)
    return 0


async def cleanup(writers: list, jns: list[JNs], root: str) -> None:
    """Close the rpc path's writers, stop the JournalNodes, remove the run's files."""
    for w in writers:
        try:
            await w.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
    for j in jns:
        j.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
