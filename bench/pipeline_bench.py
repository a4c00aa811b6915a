"""Benchmark of the Spark pipeline: decode rate and checkpoint time against the physical floor.

Why: the pipeline is only worth its Spark start-up if it decodes and
checkpoints large journals faster than the NameNode's own one-process replay;
this script measures, in one run and on the same generated journal:

* floor      reading every segment byte (``open().read()``; page cache warm),
* replay     the NameNode's single-process catch-up itself: ``EditLogTailer``
             over the history as a ``file://`` journal (read, decode, apply,
             the retry cache; the cyclic collector paused, as in a NameNode),
* decode     the ``qjournal`` data source reading and decoding every record (a count),
* ingest     decode + the partitioned Parquet write + the manifest,
* checkpoint from the empty image to the last txid (Spark), image saved in
             the NameNode's format: from the ingested edits table, and straight
             from the journal's segments (``checkpoint_from_journal``: the
             executors read, decode and fold; no table),

and prints each with its ratio to the floor, the decode rate per core, and
the checkpoint's ratio to the replay (the target of issue 14: below 1 at 10^7
edits on ``local[2]``). The floor and the replay are measured once per size;
the Spark lines once per master: ``local[2]`` and ``cluster``, a standalone
master with ``--workers`` one-core workers started from the pyspark package
(:class:`qjournal.localcluster.spark.SparkCluster`, as ``qjournal spark up``).
The history is generated with ``qjournal.pipeline.generate`` (one node:
replicas multiply the decode work linearly) and kept under ``--work`` so reruns
skip the generation (10^7 edits: about 5 minutes, 2.6 GB).

Run: ``.venv/bin/python bench/pipeline_bench.py`` (sizes 10^5, 10^6 and 10^7 on
``local[2]`` and a two-worker cluster); ``--sizes 100000 --masters local[2]``
for a quick run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time

from histories import NODE, history, journal_dir, segments
from qjournal.config import Configuration
from qjournal.namenode.journal_registry import open_journal
from qjournal.localcluster.spark import SparkCluster
from qjournal.namenode.namespace import Namespace
from qjournal.namenode.retry_cache import RetryCache
from qjournal.namenode.tailer import EditLogTailer
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline import ingest as ing
from qjournal.pipeline.session import SessionOptions, get_or_create
from qjournal.pipeline.source import read_tasks


async def _replay(hist: str) -> Namespace:
    """The NameNode's own catch-up over the history as a ``file://`` journal (``EditLogTailer``)."""
    journal = open_journal(f"file://{journal_dir(hist)}", Configuration())
    tailer = EditLogTailer(Namespace(permissions_enabled=False), RetryCache(), asyncio.Lock(), 0, lambda: 0, 1000)
    try:
        await tailer.catch_up(journal)
    finally:
        await journal.close()
    return tailer.namespace


def measure_floor_and_replay(work: str, seed: int, txns: int, roll: int) -> dict:
    """The physical floor and the NameNode's own replay of one history (no Spark)."""
    hist = history(work, seed, txns, roll)
    files = [path for path, _s, _e in segments(hist)]
    total_bytes = sum(os.path.getsize(f) for f in files)

    t = time.monotonic()
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            n += len(fh.read())
    floor = time.monotonic() - t

    t = time.monotonic()
    ns = asyncio.run(_replay(hist))
    replay = time.monotonic() - t
    assert ns.last_applied_txid == txns, (ns.last_applied_txid, txns)
    return {"hist": hist, "txns": txns, "segments": len(files), "bytes": total_bytes, "inodes": len(ns),
            "floor_s": floor, "replay_s": replay}


def measure_spark(spark, work: str, base: dict, tag: str) -> dict:
    """Decode, ingest and checkpoint of one history on one session."""
    hist, txns = base["hist"], base["txns"]
    copies = ing.discover_local([os.path.join(hist, NODE)])
    t = time.monotonic()
    decoded = read_tasks(spark, copies).count()
    decode = time.monotonic() - t
    assert decoded == txns, (decoded, txns)

    out = os.path.join(work, f"out-{tag}-{txns}")
    shutil.rmtree(out, ignore_errors=True)
    layout = ing.OutputLayout(out)
    t = time.monotonic()
    ing.ingest(spark, copies, layout, [NODE], progress=ing.no_progress)
    ingest = time.monotonic() - t

    t = time.monotonic()
    res = cp.checkpoint(spark, ing.read_edits(spark, layout), ing.read_manifest(spark, layout),
                        out_name_dir=os.path.join(out, "checkpoint"))
    ckpt = time.monotonic() - t
    assert res.txid == txns and res.num_inodes == base["inodes"], (res, base["inodes"])

    t = time.monotonic()
    res = cp.checkpoint_from_journal(spark, cp.replica_tasks(copies), out_name_dir=os.path.join(out, "direct"))
    direct = time.monotonic() - t
    assert res.txid == txns and res.num_inodes == base["inodes"], (res, base["inodes"])
    shutil.rmtree(out, ignore_errors=True)
    return {"decode_s": decode, "ingest_s": ingest, "checkpoint_s": ckpt, "direct_s": direct}


def _session(master: str, work: str, workers: int):
    """A session on ``master`` ("cluster": a local standalone master and ``workers`` one-core workers)."""
    cluster = None
    if master == "cluster":
        cluster = SparkCluster(os.path.join(work, "spark-cluster"), workers=workers, worker_cores=1,
                               worker_memory="3g", out=lambda m: print(f"  {m}", file=sys.stderr))
        cluster.up()
        master = cluster.state.master_url
    t = time.monotonic()
    spark = get_or_create(SessionOptions(master=master, app_name="qjournal-pipeline-bench",
                                         driver_memory="6g",
                                         extra_conf={"spark.driver.maxResultSize": "4g",
                                                     "spark.executor.memory": "2g"}))
    spark.range(1).count()
    if cluster is not None:
        cores = workers
    else:
        n = master[len("local["):].rstrip("]").split(",")[0] if master.startswith("local[") else "1"
        cores = os.cpu_count() or 1 if n == "*" else int(n)
    print(f"session start (cold): {time.monotonic() - t:.1f} s, master {master}, {cores} cores")
    return spark, cluster, cores


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,1000000,10000000", help="txids per history, comma separated")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--roll-every-txns", type=int, default=20000)
    p.add_argument("--masters", default="local[2],cluster",
                   help="Spark masters, comma separated; 'cluster' = a local standalone master and workers")
    p.add_argument("--workers", type=int, default=2, help="workers of the 'cluster' master (one core each)")
    p.add_argument("--work", default="/tmp/qjournal-pipeline-bench")
    args = p.parse_args(argv)
    os.makedirs(args.work, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    bases = {}
    for size in sizes:
        bases[size] = measure_floor_and_replay(args.work, args.seed, size, args.roll_every_txns)
    rows = []
    for master in [m for m in args.masters.split(",") if m]:
        spark, cluster, cores = _session(master, args.work, args.workers)
        try:
            for size in sizes:
                r = dict(bases[size])
                r.update(measure_spark(spark, args.work, r, tag=master.strip("[]").replace("[", "-")))
                r.update(master=master, cores=cores)
                r.pop("hist")
                rows.append(r)
                _print(r)
        finally:
            spark.stop()
            if cluster is not None:
                cluster.down(quiet=True)
    print("\n" + json.dumps(rows))
    return 0


def _print(r: dict) -> None:
    f = r["floor_s"]
    print(f"\n{r['master']} ({r['cores']} cores): {r['txns']:>9} edits, {r['segments']} segments, "
          f"{r['bytes'] / 1e6:.1f} MB, {r['inodes']} inodes at the end")
    for key, label in (("floor_s", "read bytes (floor)"), ("replay_s", "NameNode replay (1 process)"),
                       ("decode_s", "Spark decode (count)"), ("ingest_s", "Spark ingest (decode+write)"),
                       ("checkpoint_s", "Spark checkpoint (edits table)"),
                       ("direct_s", "Spark checkpoint (journal)")):
        v = r[key]
        rate = r["txns"] / v if v > 0 else float("inf")
        print(f"  {label:30s} {v:8.2f} s  {rate:12,.0f} edits/s  x{v / f if f > 0 else 0:,.0f} floor")
    print(f"  decode per core: {r['txns'] / (r['decode_s'] * r['cores']):,.0f} edits/s; "
          f"checkpoint from the journal per core: {r['txns'] / (r['direct_s'] * r['cores']):,.0f} edits/s")
    print(f"  ÷ replay: checkpoint (journal) {r['direct_s'] / r['replay_s']:.2f}, checkpoint (edits table) "
          f"{r['checkpoint_s'] / r['replay_s']:.2f}, ingest + checkpoint {(r['ingest_s'] + r['checkpoint_s']) / r['replay_s']:.2f}"
          f"  (target: checkpoint < replay at 10^7 on local[2])")


if __name__ == "__main__":
    sys.exit(main())
