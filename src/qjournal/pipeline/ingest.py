"""Ingest: finalized segment copies of every JournalNode into a Parquet edits table.

Why: the audit, the checkpoint and the report all work on decoded edits; this
stage decodes every node's copy of every finalized segment once and keeps it,
so later runs only decode what is new.

Theory of operation:

1. *Discover* (driver, metadata only): for JournalNode directories,
   :func:`discover_local` lists ``<edits dir>/<jid>/current/edits_<s>-<e>`` in
   each (the node is named by the directory's base name, or ``node<i>`` by
   position when base names collide) and takes each file's length and CRC32C;
   for a running cluster (``qjournal://``), :func:`qjournal.pipeline.fetch.plan_copies`
   asks each JournalNode for its manifest (RPC): no segment byte reaches the driver.
2. *Select* (:func:`select_new_segments`): a copy is new unless the manifest
   already holds the same ``(jid, node, segment_start, segment_end,
   file_crc32c)``; a copy on a running node, whose checksum is only known once
   read, is new unless the manifest holds the same name (finalized segments
   never change, seed 000 §2.7 I1).
3. *Decode*: the ``qjournal`` data source (:func:`qjournal.pipeline.source.read_tasks`)
   reads one copy per task on the executors (downloading it from its
   JournalNode when it is remote) and decodes it there, with the copy's file
   length and CRC32C beside every row.
4. *Write*: the edits table is partitioned by ``(jid, segment_start, node)``;
   dynamic partition overwrite replaces exactly the partitions of the new
   copies, so a re-run never duplicates a copy (invariant 1). The files also
   hold ``file_length`` and ``file_crc32c`` (constant per partition), which the
   table's readers, reading with the explicit edits schema, do not see.
5. *Manifest*: per-copy statistics (:func:`copy_stats`, :func:`file_stats`) merged into
   ``segments/segments.parquet`` (:func:`merge_manifest`), written atomically
   after the edits (the commit point: a crash before it re-ingests the same
   copies, which overwrites the same partitions). A copy that could not be
   fetched is left out of the manifest, so the next run tries it again.

Every write goes through Spark or :class:`qjournal.pipeline.store.OutputStore`,
so ``--out`` may be any Hadoop file system URI.

Invariants:

1. After an ingest, for each ``(jid, node, segment_start)`` in the manifest the
   edits table holds exactly one copy's rows, the one the manifest describes.
2. Only finalized segments are ingested; in-progress files are ignored.
"""

from __future__ import annotations

import dataclasses
import io
import json
import sys
import time
from dataclasses import dataclass
from typing import Callable

import crc32c as _crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from qjournal.config import Configuration
from qjournal.errors import JournalError
from qjournal.pipeline.decode import EDITS_ARROW_SCHEMA
from qjournal.pipeline.fetch import FETCH_FAILED, CopyTask, stats_schema
from qjournal.pipeline.source import dir_node_names, local_copies, read_tasks
from qjournal.pipeline.store import OutputStore, join

#: read size when checksumming segment files on the driver
_CHUNK_BYTES = 4 * 1024 * 1024

#: Arrow schema of the discovered segment files (``path``: a local path or the copy's URL;
#: length and checksum null when only reading the copy tells them)
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

#: node names of JournalNode directories (one home: :mod:`qjournal.pipeline.source`)
node_names = dir_node_names


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
class OutputLayout:
    """Where a pipeline run keeps its tables under ``--out`` (a local path or a Hadoop URI)."""

    root: str

    @property
    def edits(self) -> str:
        return join(self.root, "edits")

    @property
    def manifest(self) -> str:
        return join(self.root, "segments", "segments.parquet")

    @property
    def nodes_file(self) -> str:
        return join(self.root, "nodes.json")

    @property
    def findings(self) -> str:
        return join(self.root, "findings")

    @property
    def checkpoint_dir(self) -> str:
        return join(self.root, "checkpoint")

    @property
    def report_dir(self) -> str:
        return join(self.root, "report")


def file_crc32c(path: str) -> tuple[int, int]:
    """CRC32C and length of a local file, read in chunks.

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
                   names: list[str] | None = None) -> list[CopyTask]:
    """Find the finalized segment copies under JournalNode directories, with length and CRC32C (step 1).

    Args:
        journal_dirs: one ``dfs.journalnode.edits.dir`` per node.
        jid: only this journal id (default: every journal found).
        names: node names (default :func:`node_names`).

    Returns:
        Copy tasks sorted by (jid, segment_start, node).

    Raises:
        JournalError: a directory does not exist, or ``jid`` is found nowhere.
    """
    out = []
    for t in local_copies(journal_dirs, names or node_names(journal_dirs), jid):
        crc, length = file_crc32c(t.path)
        out.append(dataclasses.replace(t, file_length=length, file_crc32c=crc))
    return out


def segment_files_frame(spark, copies: list[CopyTask]):
    """The discovered copies as a DataFrame with :data:`SEGMENT_FILES_ARROW_SCHEMA`."""
    rows = [(c.jid, c.node, c.segment_start, c.segment_end, c.path, c.file_length,
             c.file_crc32c) for c in copies]
    return spark.createDataFrame(rows, spark_schema(SEGMENT_FILES_ARROW_SCHEMA))


def empty_manifest(spark):
    """An empty manifest DataFrame."""
    return spark.createDataFrame([], spark_schema(MANIFEST_ARROW_SCHEMA))


def read_manifest(spark, layout: OutputLayout):
    """The manifest of earlier runs (empty when there is none)."""
    with OutputStore(spark, layout.root) as store:
        if not store.exists(layout.manifest):
            return empty_manifest(spark)
    return spark.read.schema(spark_schema(MANIFEST_ARROW_SCHEMA)).parquet(layout.manifest)


def read_edits(spark, layout: OutputLayout, *, with_file_stats: bool = False):
    """The edits table with its explicit schema.

    Args:
        with_file_stats: also the copies' ``file_length`` and ``file_crc32c`` (step 4).

    Raises:
        JournalError: nothing has been ingested under ``layout.root`` yet.
    """
    with OutputStore(spark, layout.root) as store:
        if not store.exists(layout.edits):
            raise JournalError(f"no edits table under {layout.root!r}: run `qjournal pipeline ingest` first",
                               path=layout.root)
    schema = stats_schema() if with_file_stats else EDITS_ARROW_SCHEMA
    return spark.read.schema(spark_schema(schema)).parquet(layout.edits)


# --- transforms (pure DataFrame -> DataFrame) --------------------------------------

def select_new_segments(discovered, manifest):
    """Copies not yet ingested with the same end and file checksum (step 2).

    A copy whose checksum is not known yet (null: a copy on a running node) is
    matched by its name alone.

    Args:
        discovered: DataFrame with :data:`SEGMENT_FILES_ARROW_SCHEMA`.
        manifest: DataFrame with :data:`MANIFEST_ARROW_SCHEMA`.

    Returns:
        The rows of ``discovered`` to decode.
    """
    from pyspark.sql import functions as F

    d, m = discovered.alias("d"), manifest.alias("m")
    keys = ["jid", "node", "segment_start", "segment_end"]
    cond = [F.col(f"d.{k}") == F.col(f"m.{k}") for k in keys]
    cond.append(F.col("d.file_crc32c").isNull() | (F.col("d.file_crc32c") == F.col("m.file_crc32c")))
    return d.join(m, on=cond, how="left_anti").select(*[F.col(f"d.{c}") for c in discovered.columns])


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


def file_stats(edits):
    """Per copy, the file length and CRC32C its rows carry (null: the copy could not be fetched).

    Args:
        edits: rows with :func:`qjournal.pipeline.fetch.stats_schema`.

    Returns:
        ``jid, node, segment_start, segment_end, file_length, file_crc32c, problem`` per copy.
    """
    from pyspark.sql import functions as F

    return edits.groupBy("jid", "node", "segment_start", "segment_end").agg(
        F.max("file_length").alias("file_length"), F.max("file_crc32c").alias("file_crc32c"),
        F.min("problem").alias("problem"))


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

@dataclass(frozen=True, slots=True)
class IngestResult:
    """What an ingest did (``failed``: ``node segment: problem`` of copies that could not be fetched)."""

    discovered: int
    ingested: int
    skipped: int
    records: int
    seconds: float
    failed: tuple[str, ...] = ()


def _refuse_old_node_names(store: "OutputStore", layout: OutputLayout, nodes: list[str]) -> None:
    """Refuse tables written before nodes were named ``host:port`` (they were ``host_port``): mixing both
    spellings would count every JournalNode twice in the audit. The tables are derived from the journal, so
    a fresh ``--out`` rebuilds them.

    Raises:
        JournalError: the output's ``nodes.json`` names a node ``host_port`` that is ``host:port`` now.
    """
    try:
        old = list(json.loads(store.read_bytes(layout.nodes_file))["nodes"])
    except (FileNotFoundError, OSError, ValueError, KeyError):
        return
    renamed = sorted(n for n in old if ":" not in n and "_" in n and n.rsplit("_", 1)[0] + ":" + n.rsplit("_", 1)[1]
                     in nodes)
    if renamed:
        raise JournalError(f"{layout.root} holds tables of an older qjournal that named JournalNodes host_port "
                           f"({', '.join(renamed[:3])}); nodes are host:port now: ingest into a new --out (the "
                           f"tables are rebuilt from the journal)", path=layout.nodes_file)


def ingest(spark, copies: list[CopyTask], layout: OutputLayout, nodes: list[str],
           progress: Progress = stderr_progress, conf: Configuration | None = None) -> IngestResult:
    """Run steps 2-5 for discovered copies.

    Args:
        spark: the session (:mod:`qjournal.pipeline.session`).
        copies: from :func:`discover_local` or :func:`qjournal.pipeline.fetch.plan_copies`.
        layout: output tables.
        nodes: every configured node name (the audit needs the count of nodes).
        progress: one-line progress sink.
        conf: the configuration executors fetch with (TLS, chunk size, timeouts).

    Returns:
        Counts and time.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    with OutputStore(spark, layout.root) as store:
        _refuse_old_node_names(store, layout, nodes)
        store.write_bytes(layout.nodes_file, json.dumps({"nodes": list(nodes)}).encode())
    discovered = segment_files_frame(spark, copies)
    manifest = read_manifest(spark, layout)
    new_rows = select_new_segments(discovered, manifest).orderBy("jid", "segment_start", "node").collect()
    n_new = len(new_rows)
    progress(f"ingest: {len(copies)} finalized segment copies found, {n_new} new")
    n_records = 0
    failed: list[str] = []
    if n_new:
        by_key = {(c.jid, c.node, c.segment_start): c for c in copies}
        tasks = [by_key[(r["jid"], r["node"], r["segment_start"])] for r in new_rows]
        edits = read_tasks(spark, tasks, file_stats=True, conf=conf)
        edits.write.mode("overwrite").partitionBy(*EDITS_PARTITIONS).parquet(layout.edits)
        progress(f"ingest: decoded and wrote {n_new} copies in {time.monotonic() - t0:.1f} s")
        new_files = spark.createDataFrame(new_rows, spark_schema(SEGMENT_FILES_ARROW_SCHEMA))
        written = read_edits(spark, layout, with_file_stats=True).join(
            F.broadcast(new_files.select(*COPY_KEY, "segment_end")),
            on=COPY_KEY + ["segment_end"], how="left_semi")
        # the new copies' rows as the table holds them, read once for both the file statistics and the
        # manifest's decoded columns (each a pass over every new file otherwise)
        written = written.persist(StorageLevel.MEMORY_AND_DISK)
        files = file_stats(written).collect()
        failed = [f"{r['node']} {r['segment_start']}-{r['segment_end']}: {r['problem']}"
                  for r in files if r["file_length"] is None]
        read_ok = spark.createDataFrame(
            [(r["jid"], r["node"], r["segment_start"], r["segment_end"], r["file_length"], r["file_crc32c"])
             for r in files if r["file_length"] is not None],
            "jid string, node string, segment_start long, segment_end long, file_length long, "
            "file_crc32c long")
        fresh = new_files.drop("file_length", "file_crc32c").join(
            read_ok, on=["jid", "node", "segment_start", "segment_end"], how="inner")
        # every new copy key leaves the old manifest; the failed ones come back on the next run
        merged = merge_manifest(manifest.join(new_files.select(*COPY_KEY), on=COPY_KEY, how="left_anti"),
                                fresh, copy_stats(written))
        table = merged.orderBy("jid", "segment_start", "node").toArrow()
        keys = {(r["jid"], r["node"], r["segment_start"]) for r in new_rows}
        n_records = sum(n for j, nd, s, n in zip(table.column("jid").to_pylist(),
                                                 table.column("node").to_pylist(),
                                                 table.column("segment_start").to_pylist(),
                                                 table.column("num_records").to_pylist())
                        if (j, nd, s) in keys)
        written.unpersist()
        write_manifest(spark, layout, table)
    else:
        with OutputStore(spark, layout.root) as store:
            if not store.exists(layout.manifest):
                write_manifest(spark, layout, pa.Table.from_batches([], MANIFEST_ARROW_SCHEMA))
    for f in failed:
        progress(f"ingest: not ingested (tried again by the next run): {f}")
    took = time.monotonic() - t0
    progress(f"ingest: done, {n_records} records in {n_new - len(failed)} new copies, {took:.1f} s")
    return IngestResult(len(copies), n_new - len(failed), len(copies) - n_new, n_records, took, tuple(failed))


def write_manifest(spark, layout: OutputLayout, table: pa.Table) -> None:
    """Write the manifest atomically (the ingest's commit point)."""
    sink = io.BytesIO()
    pq.write_table(table.cast(MANIFEST_ARROW_SCHEMA), sink)
    with OutputStore(spark, layout.root) as store:
        store.write_bytes(layout.manifest, sink.getvalue())


def read_nodes(spark, layout: OutputLayout) -> list[str]:
    """The node names recorded by the last ingest.

    Raises:
        JournalError: no ingest has run under ``layout.root``.
    """
    with OutputStore(spark, layout.root) as store:
        try:
            return list(json.loads(store.read_bytes(layout.nodes_file))["nodes"])
        except FileNotFoundError:
            raise JournalError(f"{layout.nodes_file} is missing: run `qjournal pipeline ingest` first",
                               path=layout.nodes_file) from None


__all__ = ["OutputLayout", "IngestResult", "SEGMENT_FILES_ARROW_SCHEMA", "FETCH_FAILED",
           "MANIFEST_ARROW_SCHEMA", "node_names", "discover_local", "file_crc32c",
           "segment_files_frame", "select_new_segments", "copy_stats", "file_stats", "merge_manifest",
           "ingest", "read_manifest", "read_edits", "read_nodes",
           "write_manifest", "spark_schema", "stderr_progress", "no_progress", "empty_manifest"]
