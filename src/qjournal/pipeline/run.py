"""The pipeline's stages as one runnable unit: ``ingest | audit | checkpoint | report | all``.

Why one module: ``qjournal pipeline …``, ``python -m qjournal.pipeline …`` and
``spark-submit src/qjournal/pipeline/__main__.py …`` must accept the same
arguments and do the same thing. This module owns the argument list
(:func:`add_arguments`) and the stage runner (:func:`run`); the CLI modules
only register it.

Exit status: 0 success; 1 the audit found an error (an invariant of seed 000
§2.7 is broken; ``all`` still writes the checkpoint and report first); 2 bad
usage or input (a message names what and where).
"""

from __future__ import annotations

import argparse
import sys

from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.pipeline import audit as au
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline import ingest as ing
from qjournal.pipeline import report as rep
from qjournal.pipeline.fetch import ReadSettings, plan_committed, plan_copies
from qjournal.pipeline.ingest import stderr_progress
from qjournal.pipeline.session import SessionOptions, get_or_create
from qjournal.pipeline.store import output_uri

STAGES = ("ingest", "audit", "checkpoint", "report", "all")

#: exit status when the audit finds an invariant broken
EXIT_AUDIT_FAILED = 1
#: exit status for bad usage or unusable input
EXIT_USAGE = 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The pipeline's arguments (shared by every entry point)."""
    p.add_argument("stage", choices=STAGES, help="what to run (all = ingest, audit, checkpoint, report)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--journal-dirs", metavar="D1,D2,D3",
                     help="JournalNode edits directories (dfs.journalnode.edits.dir), one per node "
                          "(with the checkpoint stage: checkpoint straight from their finalized segments, "
                          "no edits table)")
    src.add_argument("--journal", metavar="qjournal://h1:p1;h2:p2;h3:p3/JID",
                     help="read finalized segments from running JournalNodes (the driver asks for the "
                          "manifests; each executor downloads its segment over HTTP(S)); with the "
                          "checkpoint stage: checkpoint straight from the committed journal")
    p.add_argument("--out", required=True, metavar="DIR|URI",
                   help="output directory (tables, image, report): a local path or any Hadoop file system "
                        "URI Spark can write (file://, hdfs://, s3a://)")
    p.add_argument("--jid", help="journal id (default: the only one found)")
    p.add_argument("--master", default=None,
                   help="Spark master (default: spark-submit's own, else $MASTER, else local[*])")
    p.add_argument("--ship-code", choices=("auto", "yes", "no"), default="auto",
                   help="add this qjournal package to the executors (auto: unless the master is local)")
    p.add_argument("--shuffle-partitions", type=int, default=None,
                   help="spark.sql.shuffle.partitions (default: 2 x cores)")
    p.add_argument("--image", metavar="PATH",
                   help="base image: an fsimage_<txid> file or a NameNode name directory "
                        "(default: an empty namespace at txid 0)")
    p.add_argument("--txid", type=int, default=None,
                   help="checkpoint target txid (default: the end of the hole-free run)")
    p.add_argument("--namespace-id", type=int, default=0, help="image header without a base image")
    p.add_argument("--cluster-id", default="", help="image header without a base image")
    p.add_argument("--storage-info", metavar="NSID:CLUSTERID",
                   help="sent to /getJournal when fetching (default: what the JournalNodes report)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _say(args):
    if args.quiet:
        return lambda _m: None

    return stderr_progress


def _session(args):
    ship = {"auto": None, "yes": True, "no": False}[getattr(args, "ship_code", "auto")]
    # master None: spark-submit's own (never overridden), else $MASTER, else local[*] (session.py)
    return get_or_create(SessionOptions(master=args.master, shuffle_partitions=args.shuffle_partitions,
                                        ship_code=ship))


def run(args: argparse.Namespace) -> int:
    """Run the chosen stage(s).

    Args:
        args: parsed by a parser built with :func:`add_arguments`.

    Returns:
        The exit status (module docstring).
    """
    say = _say(args)
    try:
        return _run(args, say)
    except QJournalError as e:
        print(f"qjournal pipeline {args.stage}: {e.message}", file=sys.stderr)
        return EXIT_USAGE


def _journal_dirs(args) -> list[str]:
    """``--journal-dirs D1,D2,D3`` as a list."""
    return [d for d in args.journal_dirs.split(",") if d]


def _run(args, say) -> int:
    layout = ing.OutputLayout(output_uri(args.out))
    stage = args.stage
    if stage in ("ingest", "all") and not (args.journal_dirs or args.journal):
        print(f"qjournal pipeline {stage}: give --journal-dirs D1,D2,D3 or --journal qjournal://...",
              file=sys.stderr)
        return EXIT_USAGE
    spark = _session(args)
    rc = 0
    findings = None
    if stage in ("ingest", "all"):
        conf = Configuration.from_args(args)  # --conf / -D, else $QJOURNAL_CONF_DIR's site files
        if args.journal:
            plan = plan_copies(args.journal, conf, storage_info=args.storage_info)
            for err in plan.errors:
                say(f"fetch: node {err}")
            say(f"fetch: {len(plan.tasks)} finalized segment copies on {len(plan.nodes) - len(plan.errors)} "
                f"of {len(plan.nodes)} nodes")
            copies, names = plan.tasks, plan.nodes
        else:
            dirs = _journal_dirs(args)
            names = ing.node_names(dirs)
            copies = ing.discover_local(dirs, args.jid, names)
        ing.ingest(spark, copies, layout, names, progress=say, conf=conf)
    if stage in ("audit", "all", "report"):
        nodes = ing.read_nodes(spark, layout)
        manifest = ing.read_manifest(spark, layout)
        edits = ing.read_edits(spark, layout)
        nodes_df = spark.createDataFrame([(n,) for n in nodes], "node string")
        findings = au.audit(manifest, edits, nodes_df, len(nodes)).cache()
        if stage in ("audit", "all"):
            pdf = findings.toPandas()
            findings.write.mode("overwrite").parquet(layout.findings)
            errors = pdf[pdf["severity"] == au.ERROR]
            for r in findings.collect():
                seg_start = "-" if r["segment_start"] is None else r["segment_start"]
                print(f"{r['severity'].upper():7s} {r['kind']:18s} {r['jid']} node={r['node'] or '-'} "
                      f"segment={seg_start}: {r['detail']}")
            say(f"audit: {len(errors)} error(s), {len(pdf) - len(errors)} warning(s)")
            if len(errors):
                rc = EXIT_AUDIT_FAILED
    if stage == "checkpoint" and (args.journal or args.journal_dirs):
        # straight from the journal: each executor reads, decodes and folds its segments
        conf = Configuration.from_args(args)
        if args.journal:
            plan = plan_committed(args.journal, conf)
            say(f"checkpoint: {len(plan.tasks)} segments of the committed journal, up to txid "
                f"{plan.committed_txid}")
            tasks = plan.tasks
        else:
            dirs = _journal_dirs(args)
            tasks = cp.replica_tasks(ing.discover_local(dirs, args.jid, ing.node_names(dirs)))
        cp.checkpoint_from_journal(spark, tasks, out_name_dir=layout.checkpoint_dir,
                                   settings=ReadSettings.from_conf(conf), base=args.image, txid=args.txid,
                                   namespace_id=args.namespace_id, cluster_id=args.cluster_id, progress=say)
    elif stage in ("checkpoint", "all"):
        manifest = ing.read_manifest(spark, layout)
        edits = ing.read_edits(spark, layout)
        cp.checkpoint(spark, edits, manifest, out_name_dir=layout.checkpoint_dir, base=args.image,
                      jid=args.jid, txid=args.txid, namespace_id=args.namespace_id,
                      cluster_id=args.cluster_id, progress=say)
    if stage in ("report", "all"):
        manifest = ing.read_manifest(spark, layout)
        edits = ing.read_edits(spark, layout)
        res = rep.write_report(spark, edits, manifest, findings, layout.report_dir, base=args.image,
                               jid=args.jid, progress=say)
        print(res.html_path)
    return rc


def main(argv: list[str] | None = None) -> int:
    """``python -m qjournal.pipeline`` / ``spark-submit …/__main__.py``."""
    p = argparse.ArgumentParser(prog="qjournal-pipeline", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


__all__ = ["STAGES", "EXIT_AUDIT_FAILED", "EXIT_USAGE", "add_arguments", "run", "main"]
