"""Checkpoint: previous image + later edits -> the image at a later txid, in Spark tasks and Arrow folds.

Why: a standby NameNode checkpoints by replaying edits one at a time in one
process (HDFS-1580 use case 5: a checkpointer reads a journal while the active
keeps writing). The pipeline builds the same image in bulk, in parallel, from
the edits table, and writes it in the NameNode's own image format
(:mod:`qjournal.namenode.image`) so a NameNode loads it directly.

Theory of operation (steps 1-2 on the small manifest with DataFrames, 3 in Spark tasks, 4-5 on the
driver):

1. *Canonical copy* (:func:`canonical_copies`): for each segment, among the
   clean copies the fingerprint held by most nodes wins (ties: the smallest
   node name); its valid records are the journal's edits.
2. *Range* (:func:`contiguous_end`, on the small manifest): edits must run
   without a hole from the image's txid + 1 to the target txid.
3. *Fold* (:func:`fold_edits`, the rules in :mod:`qjournal.pipeline.fold`):
   each partition of the edits is turned into attribute updates and folded
   to one row per inode by a Spark task (``mapInArrow``, Arrow and numpy
   kernels, no per-record Python loop); the driver folds the partitions'
   folds with the base image's rows (an associative fold: the partitions'
   order does not matter).
4. *Deletes* (:func:`qjournal.pipeline.fold.resolve`, on the driver): an
   inode survives iff no inode on its final parent chain was removed
   directly; pointer jumping over index arrays. The driver's part is
   O(inodes): the image must fit one NameNode's memory anyway.
5. *Image*: the survivors, sorted by ``inode_id``; ``last_inode_id`` is the
   highest id ever created. :func:`write_image` saves them with the
   NameNode's own image format (:func:`qjournal.namenode.image.image_to_bytes`),
   through :class:`qjournal.pipeline.store.OutputStore` (any Hadoop URI).

Invariants:

1. The result equals, row for row, the image a NameNode that replayed the same
   edits one by one would save at the target txid (the decisive test).
2. A checkpoint never crosses a txid hole: the target is at most the end of
   the contiguous run after the base image's txid.
3. An edit that names a parent missing from the result's tree is a
   :class:`CheckpointError` (the edits do not fit the image), never a silently
   dropped inode.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Window
from pyspark.sql import functions as F

from qjournal.errors import QJournalError, register_error
from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import Namespace
from qjournal.pipeline import fetch as fe
from qjournal.pipeline import fold as fo
from qjournal.pipeline.audit import clean_copies
from qjournal.pipeline.ingest import EDITS_PARTITIONS, spark_schema
from qjournal.pipeline.store import OutputStore, join

#: bounds of "every txid"
NO_TXID = fo.NO_TXID
MAX_TXID = (1 << 63) - 1


@register_error
class CheckpointError(QJournalError):
    """The edits cannot produce the requested image (hole, mismatch with the base image)."""


def empty_image_table(superuser: str = "root", supergroup: str = "supergroup",
                      root_mtime: int = 0) -> pa.Table:
    """The image of a freshly formatted namespace: the root directory only (the one the
    NameNode's :class:`Namespace` starts from, written by it)."""
    ns = Namespace(superuser, supergroup, root_mtime=root_mtime)
    return pa.table(ns.to_image_columns(), schema=nn_image.IMAGE_SCHEMA)


# --- step 1-2 -------------------------------------------------------------------------

def canonical_copies(manifest):
    """One copy per segment: the clean fingerprint most nodes hold (ties: smallest node).

    Args:
        manifest: the ingest manifest.

    Returns:
        ``jid, segment_start, segment_end, node, first_txid, last_txid`` per segment.
    """
    clean = clean_copies(manifest)
    votes = clean.groupBy("jid", "segment_start", "segment_end", "fingerprint").agg(
        F.count("*").alias("votes"), F.min("node").alias("node"))
    w = Window.partitionBy("jid", "segment_start").orderBy(
        F.col("votes").desc(), F.col("segment_end").desc(), F.col("node").asc())
    best = votes.withColumn("rank", F.row_number().over(w)).where(F.col("rank") == 1)
    return best.join(clean.select("jid", "segment_start", "segment_end", "node", "fingerprint",
                                  "first_txid", "last_txid"),
                      on=["jid", "segment_start", "segment_end", "node", "fingerprint"], how="inner") \
        .select("jid", "segment_start", "segment_end", "node", "first_txid", "last_txid")


def canonical_edits(edits, copies):
    """The valid records of the chosen copies.

    Args:
        edits: the edits table.
        copies: from :func:`canonical_copies`.
    """
    return edits.where(F.col("valid")).join(
        F.broadcast(copies.select("jid", "segment_start", "node")),
        on=["jid", "segment_start", "node"], how="left_semi")


def contiguous_end(ranges: list[tuple[int, int]], after_txid: int) -> int:
    """The last txid of the hole-free run starting at ``after_txid + 1``.

    Args:
        ranges: ``(first_txid, last_txid)`` of the canonical copies.
        after_txid: the base image's txid.

    Returns:
        The end of the run (``after_txid`` when txid ``after_txid + 1`` is missing).
    """
    end = after_txid
    for first, last in sorted(ranges):
        if last <= end:
            continue
        if first > end + 1:
            break
        end = last
    return end


# --- step 3-5 -------------------------------------------------------------------------

@functools.cache
def _fold_spark_schema():
    return spark_schema(fo.FOLD_SCHEMA)


def local_edit_files(edits, copies: list[tuple[str, int, str]] | None) -> list[str] | None:
    """The Parquet files of the chosen copies when the edits table is on a POSIX path, else None.

    A table under ``file:`` (a local or shared mount, which is where a cluster's
    executors wrote it) is read by the fold's tasks with Arrow's own Parquet
    reader, with no JVM row conversion; any other Hadoop filesystem goes
    through Spark's reader (``mapInArrow``).

    Args:
        edits: the edits table as read by :func:`qjournal.pipeline.ingest.read_edits`.
        copies: ``(jid, segment_start, node)`` of the copies to read (None: all).
    """
    # only the bare table: a derived frame (filtered, projected) must keep its plan
    if edits._jdf.queryExecution().analyzed().getClass().getSimpleName() != "LogicalRelation":
        return None
    files = edits.inputFiles()
    if not files or not all(f.startswith("file:") for f in files):
        return None
    want = None if copies is None else {(j, str(s), n) for j, s, n in copies}
    keep = []
    for uri in files:
        path = unquote(urlparse(uri).path)
        # partition directories: name=value with Spark's %XX escapes in the value
        part = dict(c.split("=", 1) for c in path.split("/") if "=" in c)
        key = tuple(unquote(part.get(k, "")) for k in EDITS_PARTITIONS)
        if want is None or key in want:
            keep.append((int(key[1] or 0), path))
    return [p for _s, p in sorted(keep)]


def fold_parquet_files(paths, txid_range: tuple[int, int]):
    """Task body: the edits of some edits-table files -> their fold, as Arrow IPC bytes (one blob)."""
    lo, hi = txid_range

    def valid_in_range(path: str) -> pa.Table:
        t = pq.read_table(path, columns=["valid", *fo.EDIT_COLUMNS])
        return t.filter(pc.and_(t.column("valid"), pc.and_(pc.greater(t.column("txid"), lo),
                                                           pc.less_equal(t.column("txid"), hi))))

    return fo.fold_to_ipc(valid_in_range(p) for p in paths)


def fold_journal_tasks(tasks: list[dict], settings: fe.ReadSettings, txid_range: tuple[int, int]):
    """Task body: read and decode some segments straight from the journal -> their fold (IPC bytes)."""
    return fo.fold_to_ipc(batch.filter(batch.column("valid")) for d in tasks
                          for batch in fe.read_task(fe.CopyTask.from_json(d), settings, txid_range=txid_range))


def _fold_in_tasks(sc, items: list, task_body, base_table: pa.Table) -> fo.Resolved:
    """Fold ``items`` in Spark tasks (``task_body(items of a task)`` yields IPC blobs), then the
    tasks' folds and the base image's rows on the driver, and resolve (steps 3-5)."""
    blobs = sc.parallelize(items, max(1, min(len(items), 2 * sc.defaultParallelism))).mapPartitions(
        lambda part: task_body(list(part))).collect() if items else []
    return fo.resolve(fo.fold([fo.from_ipc(b) for b in blobs] + [fo.image_updates(base_table)]))


def fold_edits(base_table: pa.Table, edits, *, jid: str | None = None,
               copies: list[tuple[str, int, str]] | None = None,
               txid_range: tuple[int, int] | None = None) -> fo.Resolved:
    """Fold the chosen copies' edits in ``txid_range`` onto a base image (steps 3-5).

    Spark tasks fold the edits (each its share of the table: Arrow and numpy
    kernels, :mod:`qjournal.pipeline.fold`); the driver folds their folds with
    the base image's rows and resolves removed subtrees.

    Args:
        base_table: the base image (image columns).
        edits: the edits table (:func:`qjournal.pipeline.ingest.read_edits`), or any
            frame of valid edits when ``copies`` is None.
        jid: the journal (with ``copies``).
        copies: ``(jid, segment_start, node)`` of the canonical copies (None: every row of ``edits``).
        txid_range: ``(after, upto)``: edits with ``after < txid <= upto`` (None: all).

    Returns:
        A :class:`qjournal.pipeline.fold.Resolved`.
    """
    sc = edits.sparkSession.sparkContext
    lo, hi = txid_range if txid_range is not None else (NO_TXID, MAX_TXID)
    files = local_edit_files(edits, copies) if copies is not None else None
    if files is not None:
        return _fold_in_tasks(sc, files, lambda paths: fold_parquet_files(paths, (lo, hi)), base_table)
    todo = edits
    if copies is not None:
        todo = canonical_edits(edits.where(F.col("jid") == jid), copies_frame(edits.sparkSession, copies))
    todo = todo.where((F.col("txid") > lo) & (F.col("txid") <= hi))
    parts = todo.select(*fo.EDIT_COLUMNS).mapInArrow(fo.fold_batches, _fold_spark_schema()).toArrow()
    return fo.resolve(fo.fold([parts, fo.image_updates(base_table)]))


def namespace_history(spark, base_table: pa.Table, edits, *, jid: str,
                      copies: list[tuple[str, int, str]], txid_range: tuple[int, int]):
    """Every inode that ever existed with its last state, birth and death txids, as a DataFrame.

    Args:
        as :func:`fold_edits`.

    Returns:
        Image columns plus ``created_txid`` (the base image's rows: -1) and
        ``dead_txid`` (null = alive at the end).
    """
    history = fold_edits(base_table, edits, jid=jid, copies=copies, txid_range=txid_range).history
    return spark.createDataFrame(history.to_pandas(), spark_schema(fo.HISTORY_SCHEMA))


# --- the stage ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What a checkpoint produced."""

    path: str
    base_txid: int
    txid: int
    num_inodes: int
    last_inode_id: int
    seconds: float


def load_base_image(base: str | None) -> tuple[nn_image.ImageInfo | None, pa.Table]:
    """The verified base image: an ``fsimage_<txid>`` path, a name dir (newest valid image), or none.

    Raises:
        CorruptSegmentError: the image fails its checksum.
        CheckpointError: a name dir without any valid image.
    """
    if base is None:
        return None, empty_image_table()
    if base.endswith(".crc"):
        base = base[:-4]
    if nn_image.parse_image_file_name(base.rsplit("/", 1)[-1]) is not None:
        info, table = nn_image.load_image(base)
        return info, table
    found = nn_image.newest_valid_image(base)
    if found is None:
        raise CheckpointError(f"no valid image in name directory {base!r}", path=base)
    info, table, _path = found
    return info, table


@dataclass(frozen=True, slots=True)
class Plan:
    """Which edits a checkpoint (or the report's namespace tables) folds.

    Attributes:
        jid: the journal.
        copies: ``(jid, segment_start, node)`` of the canonical copy of each segment.
        end: the end of the contiguous run of txids after the base image.
    """

    jid: str
    copies: list[tuple[str, int, str]]
    end: int


def copies_frame(spark, copies: list[tuple[str, int, str]]):
    """A :attr:`Plan.copies` list as a DataFrame (for :func:`canonical_edits`)."""
    return spark.createDataFrame(copies, "jid string, segment_start long, node string")


def plan(manifest, jid: str | None, base_txid: int) -> Plan:
    """Choose the journal and the canonical copies, and find the contiguous end (steps 1-2).

    Raises:
        CheckpointError: several journals and no ``jid``, or an unknown ``jid``.
    """
    jids = sorted(r[0] for r in manifest.select("jid").distinct().collect())
    if jid is None:
        if len(jids) != 1:
            raise CheckpointError(f"the edits table holds journals {jids}: choose one with --jid")
        jid = jids[0]
    elif jid not in jids:
        raise CheckpointError(f"journal id {jid!r} is not in the edits table (has {jids})", jid=jid)
    rows = canonical_copies(manifest.where(F.col("jid") == jid)).collect()
    end = contiguous_end([(r["first_txid"], r["last_txid"]) for r in rows], base_txid)
    return Plan(jid, sorted((r["jid"], r["segment_start"], r["node"]) for r in rows), end)


def checkpoint(spark, edits, manifest, *, out_name_dir: str, base: str | None = None,
               jid: str | None = None, txid: int | None = None, namespace_id: int = 0,
               cluster_id: str = "", layout_version: int = 1, progress=None) -> CheckpointResult:
    """Build and save the image at ``txid`` from a base image and the edits table.

    Args:
        spark: the session.
        edits / manifest: from the ingest.
        out_name_dir: name directory to write ``current/fsimage_<txid>`` into.
        base: base image file or name directory (None: an empty namespace at txid 0).
        jid: journal id (required when the table holds several).
        txid: target txid (default: the end of the contiguous run).
        namespace_id / cluster_id / layout_version: header when there is no base image.
        progress: optional one-line progress sink.

    Returns:
        A :class:`CheckpointResult`.

    Raises:
        CheckpointError: several journals and no ``jid``, a hole before ``txid``, or
            edits that do not fit the base image.
    """
    t0 = time.monotonic()
    say = progress or (lambda _m: None)
    info, base_table = load_base_image(base)
    base_txid = info.txid if info else 0
    p = plan(manifest, jid, base_txid)
    target = _target(p.jid, p.end, txid, base_txid)
    say(f"checkpoint: journal {p.jid}, base image txid {base_txid}, target txid {target}")
    res = fold_edits(base_table, edits, jid=p.jid, copies=p.copies, txid_range=(base_txid, target))
    return _finish(spark, res, info, p.jid, target, out_name_dir, t0, say,
                   namespace_id=namespace_id, cluster_id=cluster_id, layout_version=layout_version)


def _target(jid: str, end: int, txid: int | None, base_txid: int) -> int:
    """The checkpoint's target txid: ``txid`` or the contiguous ``end``, checked against both ends."""
    target = end if txid is None else txid
    if target > end:
        raise CheckpointError(f"journal {jid}: txids after {end} are missing (no clean copy); "
                              f"cannot checkpoint to txid {target}", jid=jid, txid=target, end=end)
    if target < base_txid:
        raise CheckpointError(f"journal {jid}: target txid {target} is older than the base image "
                              f"txid {base_txid}", jid=jid, txid=target)
    return target


def _finish(spark, res: fo.Resolved, info: nn_image.ImageInfo | None, jid: str, target: int,
            out_name_dir: str, t0: float, say, *, namespace_id: int, cluster_id: str,
            layout_version: int) -> CheckpointResult:
    """Check the resolved namespace, write the image, say so (the end of both checkpoints)."""
    base_txid = info.txid if info else 0
    if len(res.dangling):
        raise CheckpointError(f"journal {jid}: edits up to txid {target} do not fit the base image "
                              f"(txid {base_txid}): inodes {sorted(res.dangling.tolist())[:5]} hang under "
                              f"missing parents", jid=jid, txid=target)
    table = res.image
    base_last = info.last_inode_id if info else nn_ops.ROOT_INODE_ID
    last_inode_id = max(base_last, res.max_inode_id or 0)
    new_info = nn_image.ImageInfo(
        txid=target, layout_version=info.layout_version if info else layout_version,
        namespace_id=info.namespace_id if info else namespace_id,
        cluster_id=info.cluster_id if info else cluster_id, last_inode_id=last_inode_id)
    path = write_image(spark, out_name_dir, table, new_info)
    took = time.monotonic() - t0
    say(f"checkpoint: wrote {path} ({table.num_rows} inodes) in {took:.1f} s")
    return CheckpointResult(path, base_txid, target, table.num_rows, last_inode_id, took)


def replica_tasks(copies: list[fe.CopyTask]) -> list[fe.CopyTask]:
    """Finalized copies on several nodes -> one task per segment, the nodes' copies as replicas.

    Per segment start, the end most copies agree on wins (ties: the longer
    segment); its copies are read in node order, the next one when a copy
    fails its checksums (``failover``), as a reader of the committed journal does.
    """
    by_start: dict[tuple[str, int], list[fe.CopyTask]] = {}
    for t in copies:
        by_start.setdefault((t.jid, t.segment_start), []).append(t)
    out = []
    for (jid, start), group in sorted(by_start.items()):
        ends: dict[int, list[fe.CopyTask]] = {}
        for t in group:
            ends.setdefault(t.segment_end, []).append(t)
        end = max(ends, key=lambda e: (len(ends[e]), e))
        sources = tuple(src for t in sorted(ends[end], key=lambda t: t.node) for src in t.sources)
        out.append(fe.CopyTask(jid, start, end, sources, failover=True))
    return out


def checkpoint_from_journal(spark, tasks: list[fe.CopyTask], *, out_name_dir: str,
                            settings: fe.ReadSettings | None = None, base: str | None = None,
                            txid: int | None = None, namespace_id: int = 0, cluster_id: str = "",
                            layout_version: int = 1, progress=None) -> CheckpointResult:
    """Build and save the image at ``txid`` straight from a journal's segments (no edits table).

    The checkpointer's path of HDFS-1580 (use case 5): each Spark task reads
    its segments itself (a local file, or ``/getJournal`` from a JournalNode,
    checksums verified, failing over between replicas), decodes and folds them;
    the driver folds the folds onto the base image.

    Args:
        spark: the session.
        tasks: one per segment (:func:`replica_tasks` of local copies, or
            :func:`qjournal.pipeline.fetch.plan_committed`'s); one journal.
        out_name_dir / base / txid / namespace_id / cluster_id / layout_version / progress:
            as :func:`checkpoint`.
        settings: what the executors need to read (TLS configuration, batch size).

    Raises:
        CheckpointError: no segment, several journals, a hole before ``txid``, edits that
            do not fit the base image.
        TransportError: a segment none of whose replicas could be read.
    """
    t0 = time.monotonic()
    say = progress or (lambda _m: None)
    jids = sorted({t.jid for t in tasks})
    if len(jids) != 1:
        raise CheckpointError(f"a checkpoint reads one journal; the segments given belong to {jids or 'none'}")
    jid = jids[0]
    info, base_table = load_base_image(base)
    base_txid = info.txid if info else 0
    end = contiguous_end([(t.segment_start, t.segment_end) for t in tasks], base_txid)
    target = _target(jid, end, txid, base_txid)
    todo = [t.to_json() for t in tasks if t.segment_end > base_txid and t.segment_start <= target]
    say(f"checkpoint: journal {jid}, base image txid {base_txid}, target txid {target}, "
        f"{len(todo)} segments read by the executors")
    settings = settings or fe.ReadSettings()
    rng = (base_txid + 1, target)
    res = _fold_in_tasks(spark.sparkContext, todo, lambda part: fold_journal_tasks(part, settings, rng),
                         base_table)
    return _finish(spark, res, info, jid, target, out_name_dir, t0, say,
                   namespace_id=namespace_id, cluster_id=cluster_id, layout_version=layout_version)


def write_image(spark, name_dir: str, table: pa.Table, info: nn_image.ImageInfo) -> str:
    """Save rows in the NameNode's image format (header, sort, ``.crc``) under any Hadoop URI.

    The bytes and the ``.crc`` line come from :mod:`qjournal.namenode.image`; as in
    ``save_image``, the ``.crc`` file is in place before the image's own atomic
    rename, the commit point.

    Returns:
        ``<name_dir>/current/fsimage_<txid>``.
    """
    data = nn_image.image_to_bytes(table, info)
    path = join(name_dir, nn_image.CURRENT_DIR, nn_image.image_file_name(info.txid))
    with OutputStore(spark, name_dir) as store:
        store.write_bytes(path + ".crc", nn_image.crc_line(data))
        store.write_bytes(path, data)
    return path


__all__ = ["CheckpointError", "CheckpointResult", "Plan", "plan", "copies_frame", "empty_image_table",
           "canonical_copies", "canonical_edits", "contiguous_end", "local_edit_files", "fold_parquet_files",
           "fold_edits", "fold_journal_tasks", "replica_tasks", "checkpoint_from_journal", "namespace_history",
           "load_base_image", "checkpoint", "write_image"]
