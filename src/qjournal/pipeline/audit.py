"""Audit: check the ingested JournalNode copies against the invariants of HDFS-3077 §2.7.

Why: a journal can look healthy to the writer while one replica is silently
damaged, lags or (after a bad recovery) holds a finalized segment that differs
from its peers. The audit reads the manifest and the edits table written by
:mod:`qjournal.pipeline.ingest` and lists every such finding; ``qjournal
pipeline audit`` exits non-zero when an invariant is broken.

The invariants (seed 000 §2.7, plus the finalized-copy rule of §2.8):

* I1 a finalized segment is never un-finalized (only finalized copies are
  ingested, so the audit checks what follows from it: copies with the same
  start are identical, I4).
* I2 if any node has a segment starting at txid N, a majority of nodes has a
  finalized segment ending at N-1 (checked for every start but the first).
* I3 if any node has a finalized segment ending at N, a majority of nodes has a
  segment ending at N (counted over clean copies).
* I4 finalized copies of a segment with the same start txid are identical:
  same end, same records (compared record by record by checksum).

Finding kinds (``severity`` ``error`` breaks an invariant, ``warning`` does not):

=====================  ========  ===================================================
kind                   severity  meaning
=====================  ========  ===================================================
``divergent-end``      error     copies with the same start end at different txids (I4)
``divergent-records``  error     copies with the same start differ at some txid (I4)
``txid-gap``           error     txids between two segments are on no node
``overlapping``        error     two different segments cover the same txid
``invariant-2``        error     a segment starts at N but fewer than a majority end at N-1
``under-replicated``   error     a segment end is on fewer than a majority of clean copies (I3)
``checksum-failure``   warning   a copy has records failing their checksum (others still hold them)
``corrupt-copy``       warning   a copy is damaged otherwise (bad header, short, bad op body)
``missing-copy``       warning   a node lacks a segment a majority holds (a lagging replica)
=====================  ========  ===================================================

Everything here is a pure ``DataFrame -> DataFrame`` transform over the
manifest (one row per copy) and the edits table; ``audit`` unions them.
"""

from __future__ import annotations

import pyarrow as pa

#: Arrow schema of the findings table
FINDINGS_ARROW_SCHEMA = pa.schema([
    ("jid", pa.string()), ("kind", pa.string()), ("severity", pa.string()),
    ("invariant", pa.string()), ("node", pa.string()),
    ("segment_start", pa.int64()), ("segment_end", pa.int64()), ("txid", pa.int64()),
    ("detail", pa.string()),
])
FINDINGS_COLUMNS = tuple(FINDINGS_ARROW_SCHEMA.names)

ERROR, WARNING = "error", "warning"


def majority(num_nodes: int) -> int:
    """Smallest majority of ``num_nodes`` nodes."""
    return num_nodes // 2 + 1


def _finding(df, kind: str, severity: str, invariant: str | None, *, node=None, segment_start=None,
             segment_end=None, txid=None, detail=None):
    """Project ``df`` onto the findings schema (columns given as Column or None)."""
    from pyspark.sql import functions as F

    def col(c, typ):
        return (c if c is not None else F.lit(None)).cast(typ)

    return df.select(
        F.col("jid").cast("string").alias("jid"), F.lit(kind).alias("kind"),
        F.lit(severity).alias("severity"), F.lit(invariant).cast("string").alias("invariant"),
        col(node, "string").alias("node"), col(segment_start, "long").alias("segment_start"),
        col(segment_end, "long").alias("segment_end"), col(txid, "long").alias("txid"),
        col(detail, "string").alias("detail"))


def clean_copies(manifest):
    """Copies whose every record verified and that run exactly from start to end.

    Args:
        manifest: the ingest manifest.

    Returns:
        The manifest rows of clean copies.
    """
    from pyspark.sql import functions as F

    return manifest.where((F.col("num_invalid") == 0) & (F.col("first_txid") == F.col("segment_start"))
                          & (F.col("last_txid") == F.col("segment_end")))


def damaged_copies(manifest):
    """Findings for copies with problems (``checksum-failure`` / ``corrupt-copy``)."""
    from pyspark.sql import functions as F

    bad = manifest.where(F.col("num_invalid") > 0)
    checksum = bad.where(F.col("problem").contains("checksum"))
    other = bad.where(~F.col("problem").contains("checksum"))
    detail = F.format_string("%d problem row(s); first: %s; valid records %s..%s",
                             F.col("num_invalid"), F.col("problem"),
                             F.coalesce(F.col("first_txid").cast("string"), F.lit("none")),
                             F.coalesce(F.col("last_txid").cast("string"), F.lit("none")))
    kw = dict(node=F.col("node"), segment_start=F.col("segment_start"),
              segment_end=F.col("segment_end"), detail=detail)
    return _finding(checksum, "checksum-failure", WARNING, None, **kw).unionByName(
        _finding(other, "corrupt-copy", WARNING, None, **kw))


def divergent_ends(manifest):
    """Copies with the same start but different ends (I4)."""
    from pyspark.sql import functions as F

    per = manifest.groupBy("jid", "segment_start").agg(
        F.countDistinct("segment_end").alias("n_ends"),
        F.array_sort(F.collect_list(F.concat_ws("=", "node", F.col("segment_end").cast("string"))))
        .alias("ends"))
    bad = per.where(F.col("n_ends") > 1)
    return _finding(bad, "divergent-end", ERROR, "I4", segment_start=F.col("segment_start"),
                    detail=F.concat(F.lit("finalized copies end at different txids: "),
                                    F.array_join("ends", ", ")))


def divergent_records(manifest, edits):
    """Copies with the same start and end whose records differ (I4), one finding per segment.

    Only segments whose copies disagree on their fingerprint are compared record
    by record (a semi join keeps the shuffle small).

    Args:
        manifest: the ingest manifest.
        edits: the edits table.
    """
    from pyspark.sql import functions as F

    suspects = manifest.where(F.col("fingerprint").isNotNull()).groupBy(
        "jid", "segment_start", "segment_end").agg(F.countDistinct("fingerprint").alias("n"))
    suspects = suspects.where(F.col("n") > 1).select("jid", "segment_start", "segment_end")
    rows = edits.where(F.col("valid")).join(F.broadcast(suspects),
                                            on=["jid", "segment_start", "segment_end"], how="left_semi")
    per_txid = rows.groupBy("jid", "segment_start", "segment_end", "txid").agg(
        F.countDistinct("checksum").alias("n_sums"),
        F.array_sort(F.collect_list(F.concat_ws("=", "node", F.format_string("%08x", "checksum"))))
        .alias("sums"))
    diff = per_txid.where(F.col("n_sums") > 1)
    per_seg = diff.groupBy("jid", "segment_start", "segment_end").agg(
        F.min("txid").alias("first_txid"), F.count("*").alias("n_txids"),
        F.min_by("sums", "txid").alias("sums"))
    return _finding(per_seg, "divergent-records", ERROR, "I4", segment_start=F.col("segment_start"),
                    segment_end=F.col("segment_end"), txid=F.col("first_txid"),
                    detail=F.format_string("finalized copies differ at %d txid(s), first at txid %d: %s",
                                           F.col("n_txids"), F.col("first_txid"),
                                           F.array_join("sums", ", ")))


def gaps_and_overlaps(manifest):
    """Txids on no node between segments, and different segments covering the same txid."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ranges = manifest.select("jid", "segment_start", "segment_end").distinct()
    w = Window.partitionBy("jid").orderBy("segment_start", "segment_end")
    prev = ranges.withColumn(
        "prev_end", F.max("segment_end").over(w.rowsBetween(Window.unboundedPreceding, -1)))
    gap = prev.where(F.col("segment_start") > F.col("prev_end") + 1)
    overlap = prev.where(F.col("segment_start") <= F.col("prev_end"))
    return _finding(gap, "txid-gap", ERROR, "I2", segment_start=F.col("segment_start"),
                    segment_end=F.col("segment_end"), txid=F.col("prev_end") + 1,
                    detail=F.format_string("txids %d..%d are on no node", F.col("prev_end") + 1,
                                           F.col("segment_start") - 1)).unionByName(
        _finding(overlap, "overlapping", ERROR, "I4", segment_start=F.col("segment_start"),
                 segment_end=F.col("segment_end"),
                 detail=F.format_string("segment %d..%d overlaps an earlier segment ending at %d",
                                        F.col("segment_start"), F.col("segment_end"), F.col("prev_end"))))


def replication_findings(manifest, nodes_df, num_nodes: int):
    """I2, I3 and missing copies, counted over clean copies.

    Args:
        manifest: the ingest manifest.
        nodes_df: one row per configured node (column ``node``).
        num_nodes: how many JournalNodes the journal has.
    """
    from pyspark.sql import functions as F

    need = majority(num_nodes)
    clean = clean_copies(manifest)
    ends = clean.groupBy("jid", "segment_end").agg(F.countDistinct("node").alias("n_clean"))
    ranges = manifest.select("jid", "segment_start", "segment_end").distinct()

    # I3: every end of a finalized segment is on a majority of clean copies.
    i3 = ranges.join(ends, on=["jid", "segment_end"], how="left").where(
        F.coalesce("n_clean", F.lit(0)) < need)
    under = _finding(i3, "under-replicated", ERROR, "I3", segment_start=F.col("segment_start"),
                     segment_end=F.col("segment_end"),
                     detail=F.format_string("a finalized segment ends at txid %d on %d clean copies; "
                                            "a majority is %d of %d", F.col("segment_end"),
                                            F.coalesce("n_clean", F.lit(0)), F.lit(need), F.lit(num_nodes)))

    # I2: every start but the first has a majority of clean copies ending just before it.
    first = ranges.groupBy("jid").agg(F.min("segment_start").alias("first_start"))
    starts = ranges.select("jid", "segment_start").distinct().join(first, on="jid", how="inner") \
        .where(F.col("segment_start") > F.col("first_start"))
    prev_ends = ends.select("jid", (F.col("segment_end") + 1).alias("segment_start"), "n_clean")
    i2 = starts.join(prev_ends, on=["jid", "segment_start"], how="left").where(
        F.coalesce("n_clean", F.lit(0)) < need)
    inv2 = _finding(i2, "invariant-2", ERROR, "I2", segment_start=F.col("segment_start"),
                    txid=F.col("segment_start") - 1,
                    detail=F.format_string("a segment starts at txid %d but %d clean copies end at %d; "
                                           "a majority is %d of %d", F.col("segment_start"),
                                           F.coalesce("n_clean", F.lit(0)), F.col("segment_start") - 1,
                                           F.lit(need), F.lit(num_nodes)))

    # Missing copies: a node lacks a segment that some node has.
    expected = ranges.crossJoin(nodes_df.select("node"))
    missing = expected.join(manifest.select("jid", "node", "segment_start", "segment_end"),
                            on=["jid", "node", "segment_start", "segment_end"], how="left_anti")
    miss = _finding(missing, "missing-copy", WARNING, None, node=F.col("node"),
                    segment_start=F.col("segment_start"), segment_end=F.col("segment_end"),
                    detail=F.format_string("node %s has no copy of segment %d..%d", F.col("node"),
                                           F.col("segment_start"), F.col("segment_end")))
    return under.unionByName(inv2).unionByName(miss)


def audit(manifest, edits, nodes_df, num_nodes: int):
    """Every finding, sorted by journal, segment, severity and kind.

    Args:
        manifest: the ingest manifest (:data:`qjournal.pipeline.ingest.MANIFEST_ARROW_SCHEMA`).
        edits: the edits table.
        nodes_df: configured nodes (column ``node``).
        num_nodes: node count for the majority.

    Returns:
        A DataFrame with :data:`FINDINGS_ARROW_SCHEMA`.
    """
    parts = [damaged_copies(manifest), divergent_ends(manifest), divergent_records(manifest, edits),
             gaps_and_overlaps(manifest), replication_findings(manifest, nodes_df, num_nodes)]
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out.orderBy("jid", "segment_start", "severity", "kind", "node", "txid")


__all__ = ["FINDINGS_ARROW_SCHEMA", "FINDINGS_COLUMNS", "ERROR", "WARNING", "majority",
           "clean_copies", "damaged_copies", "divergent_ends", "divergent_records",
           "gaps_and_overlaps", "replication_findings", "audit"]
