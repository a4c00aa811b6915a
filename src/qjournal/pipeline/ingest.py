"""Ingest: finalized segments from JournalNode directories into a Parquet edits table.

Why: the audit, the checkpoint and the report all work on decoded edits; this
stage decodes every node's copy of every finalized segment once and keeps it,
so later runs only decode what is new.

Theory of operation:

1. *Discover* (driver, metadata only): list ``<edits dir>/<jid>/current/edits_<s>-<e>``
   in each JournalNode directory (one directory per node; the node is named by
   the directory's base name, or ``node<i>`` by position when base names
   collide) and take each file's length and CRC32C. For a running cluster,
   :mod:`qjournal.pipeline.fetch` first copies the segments into a staging
   area with the same layout.
2. *Select* (:func:`select_new_segments`): a copy is new unless the manifest
   already holds the same ``(jid, node, segment_start, segment_end,
   file_crc32c)``.
3. *Decode*: ``binaryFile`` reads the new files; ``mapInArrow`` runs
   :func:`qjournal.pipeline.decode.decode_path_batches` (one Arrow batch per file).
4. *Write*: the edits table is partitioned by ``(jid, segment_start, node)``;
   dynamic partition overwrite replaces exactly the partitions of the new
   copies, so a re-run never duplicates a copy (invariant 1).
5. *Manifest*: per-copy statistics (:func:`copy_stats`) merged into
   ``segments/segments.parquet`` (:func:`merge_manifest`), written atomically
   after the edits (the commit point: a crash before it re-ingests the same
   copies, which overwrites the same partitions).

Invariants:

1. After an ingest, for each ``(jid, node, segment_start)`` the edits table
   holds exactly one copy's rows, the one the manifest describes.
2. Only finalized segments are ingested; in-progress files are ignored.
"""

from __future__ import annotations

import functools
import io
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Callable

import crc32c as _crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from qjournal.errors import JournalError
from qjournal.pipeline.decode import EDITS_ARROW_SCHEMA, decode_path_batches
from qjournal.protocol.segment import parse_segment_file_name
from qjournal.util.fs import atomic_write

#: read size when checksumming segment files on the driver
_CHUNK_BYTES = 4 * 1024 * 1024
#: smallest input partition when decoding (below this, task overhead dominates)
_MIN_PARTITION_BYTES = 1024 * 1024

#: Arrow schema of the discovered segment files
SEGMENT_FILES_ARROW_SCHEMA = pa.schema([
    ("jid", pa.string()), ("node", pa.string()),
    ("segment_start", pa.int64()), ("segment_end", pa.int64()),
    ("path", pa.string()), ("file_length", pa.int64()), ("file_crc32c", pa.int64()),
])

#: Arrow schema of the manifest (one row per ingested segment copy)
MANIFEST_ARROW_SCHEMA = pa.schema(list(SEGMENT_FILES_ARROW_SCHEMA) + [
    ("first_txid", pa.int64()), ("last_txid", pa.int64()),
    ("num_records", pa.int64()), ("num_invalid", pa.int64()),
    ("fingerprint", pa.string()), ("problem", pa.string()),
])

COPY_KEY = ["jid", "node", "segment_start"]
EDITS_PARTITIONS = ["jid", "segment_start", "node"]

Progress = Callable[[str], None]


def spark_schema(arrow_schema: pa.Schema):
    """The Spark ``StructType`` of an Arrow schema (one definition for both)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(arrow_schema)


def stderr_progress(message: str) -> None:
    """Default progress sink: one line on stderr."""
    print(f"pipeline: {message}", file=sys.stderr, flush=True)


def no_progress(_message: str) -> None:
    """Progress sink that drops everything (tests)."""


@dataclass(frozen=True, slots=True)
class SegmentCopy:
    """One node's copy of one finalized segment on local disk."""

    jid: str
    node: str
    segment_start: int
    segment_end: int
    path: str
    file_length: int
    file_crc32c: int


@dataclass(frozen=True, slots=True)
class OutputLayout:
    """Where a pipeline run keeps its tables under ``--out``."""

    root: str

    @property
    def edits(self) -> str:
        return os.path.join(self.root, "edits")

    @property
    def manifest(self) -> str:
        return os.path.join(self.root, "segments", "segments.parquet")

    @property
    def nodes_file(self) -> str:
        return os.path.join(self.root, "nodes.json")

    @property
    def findings(self) -> str:
        return os.path.join(self.root, "findings")

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.root, "checkpoint")

    @property
    def report_dir(self) -> str:
        return os.path.join(self.root, "report")


def node_names(journal_dirs: list[str]) -> list[str]:
    """Node names for JournalNode directories: base names, or ``node<i>`` if they collide.

    Args:
        journal_dirs: one ``dfs.journalnode.edits.dir`` per node, in order.

    Returns:
        One name per directory, same order.
    """
    bases = [os.path.basename(os.path.normpath(d)) or f"node{i}" for i, d in enumerate(journal_dirs)]
    if len(set(bases)) == len(bases):
        return bases
    return [f"node{i}" for i in range(len(journal_dirs))]


def file_crc32c(path: str) -> tuple[int, int]:
    """CRC32C and length of a file, read in chunks.

    Returns:
        ``(crc, length)``.
    """
    crc = 0
    n = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK_BYTES)
            if not chunk:
                return crc, n
            crc = _crc32c.crc32c(chunk, crc)
            n += len(chunk)


def discover_local(journal_dirs: list[str], jid: str | None = None,
                   names: list[str] | None = None) -> list[SegmentCopy]:
    """Find the finalized segment copies under JournalNode directories (step 1).

    Args:
        journal_dirs: one ``dfs.journalnode.edits.dir`` per node.
        jid: only this journal id (default: every journal found).
        names: node names (default :func:`node_names`).

    Returns:
        Copies sorted by (jid, segment_start, node).

    Raises:
        JournalError: a directory does not exist, or ``jid`` is found nowhere.
    """
    names = names or node_names(journal_dirs)
    out: list[SegmentCopy] = []
    seen_jid = False
    for d, node in zip(journal_dirs, names):
        if not os.path.isdir(d):
            raise JournalError(f"journal directory {d!r} (node {node}) does not exist", path=d)
        for j in sorted(os.listdir(d)):
            cur = os.path.join(d, j, "current")
            if (jid is not None and j != jid) or not os.path.isdir(cur):
                continue
            seen_jid = True
            for name in sorted(os.listdir(cur)):
                parsed = parse_segment_file_name(name)
                if parsed is None or parsed.end_txid is None:
                    continue  # invariant 2: finalized segments only
                path = os.path.abspath(os.path.join(cur, name))
                crc, length = file_crc32c(path)
                out.append(SegmentCopy(j, node, parsed.start_txid, parsed.end_txid, path, length, crc))
    if jid is not None and not seen_jid:
        raise JournalError(f"journal id {jid!r} not found in any of {journal_dirs}", jid=jid)
    out.sort(key=lambda c: (c.jid, c.segment_start, c.node))
    return out


def segment_files_frame(spark, copies: list[SegmentCopy]):
    """The discovered copies as a DataFrame with :data:`SEGMENT_FILES_ARROW_SCHEMA`."""
    rows = [(c.jid, c.node, c.segment_start, c.segment_end, c.path, c.file_length, c.file_crc32c)
            for c in copies]
    return spark.createDataFrame(rows, spark_schema(SEGMENT_FILES_ARROW_SCHEMA))


def empty_manifest(spark):
    """An empty manifest DataFrame."""
    return spark.createDataFrame([], spark_schema(MANIFEST_ARROW_SCHEMA))


def read_manifest(spark, layout: OutputLayout):
    """The manifest of earlier runs (empty when there is none)."""
    if not os.path.exists(layout.manifest):
        return empty_manifest(spark)
    return spark.read.schema(spark_schema(MANIFEST_ARROW_SCHEMA)).parquet(layout.manifest)


def read_edits(spark, layout: OutputLayout):
    """The edits table with its explicit schema.

    Raises:
        JournalError: nothing has been ingested under ``layout.root`` yet.
    """
    if not os.path.isdir(layout.edits):
        raise JournalError(f"no edits table under {layout.root!r}: run `qjournal pipeline ingest` first",
                           path=layout.root)
    return spark.read.schema(spark_schema(EDITS_ARROW_SCHEMA)).parquet(layout.edits)


# --- transforms (pure DataFrame -> DataFrame) --------------------------------------

def select_new_segments(discovered, manifest):
    """Copies not yet ingested with the same end and file checksum (step 2).

    Args:
        discovered: DataFrame with :data:`SEGMENT_FILES_ARROW_SCHEMA`.
        manifest: DataFrame with :data:`MANIFEST_ARROW_SCHEMA`.

    Returns:
        The rows of ``discovered`` to decode.
    """
    keys = ["jid", "node", "segment_start", "segment_end", "file_crc32c"]
    return discovered.join(manifest.select(*keys), on=keys, how="left_anti").select(*discovered.columns)


def copy_stats(edits):
    """Per-copy statistics of decoded edits (the manifest's decoded columns).

    ``fingerprint`` is a SHA-256 over the copy's valid ``(txid, checksum)``
    sequence: two copies with the same fingerprint hold the same records.

    Args:
        edits: DataFrame with :data:`EDITS_ARROW_SCHEMA`.

    Returns:
        One row per ``(jid, node, segment_start, segment_end)``.
    """
    from pyspark.sql import functions as F

    valid = F.col("valid")
    pair = F.struct("txid", "checksum")
    return edits.groupBy("jid", "node", "segment_start", "segment_end").agg(
        F.min(F.when(valid, F.col("txid"))).alias("first_txid"),
        F.max(F.when(valid, F.col("txid"))).alias("last_txid"),
        F.sum(F.when(valid, 1).otherwise(0)).cast("long").alias("num_records"),
        F.sum(F.when(valid, 0).otherwise(1)).cast("long").alias("num_invalid"),
        F.sha2(F.concat_ws(",", F.transform(
            F.array_sort(F.collect_list(F.when(valid, pair))),
            lambda p: F.concat_ws(":", p["txid"].cast("string"), p["checksum"].cast("string")))), 256)
        .alias("fingerprint"),
        # the first damage in file order (later problem rows are its consequences)
        F.min_by(F.col("problem"), F.when(~valid, F.col("record_offset"))).alias("problem"),
    )


def merge_manifest(manifest, new_files, stats):
    """The manifest after an ingest: new copies replace old rows of the same copy key.

    Args:
        manifest: the previous manifest.
        new_files: the copies just decoded (:data:`SEGMENT_FILES_ARROW_SCHEMA`).
        stats: :func:`copy_stats` of their edits.

    Returns:
        A DataFrame with :data:`MANIFEST_ARROW_SCHEMA`.
    """
    from pyspark.sql import functions as F

    cols = MANIFEST_ARROW_SCHEMA.names
    fresh = new_files.join(stats, on=["jid", "node", "segment_start", "segment_end"], how="left")
    # A copy with no decoded row at all (cannot happen by decode invariant 2) would show as 0 records.
    fresh = fresh.withColumn("num_records", F.coalesce("num_records", F.lit(0).cast("long"))) \
                 .withColumn("num_invalid", F.coalesce("num_invalid", F.lit(0).cast("long")))
    kept = manifest.join(new_files.select(*COPY_KEY), on=COPY_KEY, how="left_anti")
    return kept.select(*cols).unionByName(fresh.select(*cols))


# --- the stage -----------------------------------------------------------------

def decode_files(spark, files):
    """Read segment files with ``binaryFile`` and decode them with ``mapInArrow`` (step 3).

    The copy identity of each file travels to the executors inside the
    decoder's closure (path -> key), so reading and decoding is one narrow
    stage without a join.

    Args:
        files: DataFrame with :data:`SEGMENT_FILES_ARROW_SCHEMA` (its rows are collected).

    Returns:
        The decoded edits (:data:`EDITS_ARROW_SCHEMA`).
    """

    rows = files.select("jid", "node", "segment_start", "segment_end", "path", "file_length") \
        .orderBy("path").collect()
    keys = {f"file:{r['path']}": (r["jid"], r["node"], r["segment_start"], r["segment_end"])
            for r in rows}
    # Segment files are not splittable: Spark packs whole files into partitions of
    # up to maxPartitionBytes. Size them so every core gets about two partitions.
    total = sum(r["file_length"] for r in rows)
    slots = 2 * max(1, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(max(_MIN_PARTITION_BYTES, -(-total // slots))))
    spark.conf.set("spark.sql.files.openCostInBytes", str(_MIN_PARTITION_BYTES // 16))
    raw = spark.read.format("binaryFile").load([_hadoop_path(r["path"]) for r in rows])
    return raw.select("path", "content").mapInArrow(
        functools.partial(decode_path_batches, keys), spark_schema(EDITS_ARROW_SCHEMA))


_GLOB_CHARS = re.compile(r"([\[\]\*\?\{\}\\])")


def _hadoop_path(path: str) -> str:
    """A local path with Hadoop glob characters escaped (``binaryFile`` globs its paths)."""
    return _GLOB_CHARS.sub(r"\\\1", path)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest did."""

    discovered: int
    ingested: int
    skipped: int
    records: int
    seconds: float


def ingest(spark, copies: list[SegmentCopy], layout: OutputLayout, nodes: list[str],
           progress: Progress = stderr_progress) -> IngestResult:
    """Run steps 2-5 for discovered copies.

    Args:
        spark: the session (:mod:`qjournal.pipeline.session`).
        copies: from :func:`discover_local` (or the staging area of a fetch).
        layout: output tables.
        nodes: every configured node name (the audit needs the count of nodes).
        progress: one-line progress sink.

    Returns:
        Counts and time.
    """
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    os.makedirs(layout.root, exist_ok=True)
    atomic_write(layout.nodes_file, json.dumps({"nodes": list(nodes)}).encode())
    discovered = segment_files_frame(spark, copies)
    manifest = read_manifest(spark, layout)
    new_rows = select_new_segments(discovered, manifest).orderBy("jid", "segment_start", "node").collect()
    n_new = len(new_rows)
    progress(f"ingest: {len(copies)} finalized segment copies found, {n_new} new")
    n_records = 0
    if n_new:
        new_files = spark.createDataFrame(new_rows, spark_schema(SEGMENT_FILES_ARROW_SCHEMA))
        edits = decode_files(spark, new_files)
        edits.write.mode("overwrite").partitionBy(*EDITS_PARTITIONS).parquet(layout.edits)
        progress(f"ingest: decoded and wrote {n_new} copies in {time.monotonic() - t0:.1f} s")
        written = read_edits(spark, layout).join(
            F.broadcast(new_files.select(*COPY_KEY, "segment_end")),
            on=COPY_KEY + ["segment_end"], how="left_semi")
        merged = merge_manifest(manifest, new_files, copy_stats(written))
        table = merged.orderBy("jid", "segment_start", "node").toArrow()
        keys = {(r["jid"], r["node"], r["segment_start"]) for r in new_rows}
        n_records = sum(n for j, nd, s, n in zip(table.column("jid").to_pylist(),
                                                 table.column("node").to_pylist(),
                                                 table.column("segment_start").to_pylist(),
                                                 table.column("num_records").to_pylist())
                        if (j, nd, s) in keys)
        write_manifest(layout, table)
    elif not os.path.exists(layout.manifest):
        write_manifest(layout, pa.Table.from_batches([], MANIFEST_ARROW_SCHEMA))
    took = time.monotonic() - t0
    progress(f"ingest: done, {n_records} records in {n_new} new copies, {took:.1f} s")
    return IngestResult(len(copies), n_new, len(copies) - n_new, n_records, took)


def write_manifest(layout: OutputLayout, table: pa.Table) -> None:
    """Write the manifest atomically (the ingest's commit point)."""

    os.makedirs(os.path.dirname(layout.manifest), exist_ok=True)
    sink = io.BytesIO()
    pq.write_table(table.cast(MANIFEST_ARROW_SCHEMA), sink)
    atomic_write(layout.manifest, sink.getvalue())


def read_nodes(layout: OutputLayout) -> list[str]:
    """The node names recorded by the last ingest.

    Raises:
        JournalError: no ingest has run under ``layout.root``.
    """
    try:
        with open(layout.nodes_file, "rb") as f:
            return list(json.loads(f.read())["nodes"])
    except FileNotFoundError:
        raise JournalError(f"{layout.nodes_file} is missing: run `qjournal pipeline ingest` first",
                           path=layout.nodes_file) from None


__all__ = ["SegmentCopy", "OutputLayout", "IngestResult", "SEGMENT_FILES_ARROW_SCHEMA",
           "MANIFEST_ARROW_SCHEMA", "node_names", "discover_local", "file_crc32c",
           "segment_files_frame", "select_new_segments", "copy_stats", "merge_manifest",
           "decode_files", "ingest", "read_manifest", "read_edits", "read_nodes",
           "write_manifest", "spark_schema", "stderr_progress", "no_progress", "empty_manifest"]
