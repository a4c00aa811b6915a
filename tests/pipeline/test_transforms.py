"""Transform tests on small in-memory frames (Spark's testing guide: assertDataFrameEqual)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.testing import assertDataFrameEqual

from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import Namespace
from qjournal.pipeline import audit as au
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline import decode as dec
from qjournal.pipeline import ingest as ing
from qjournal.protocol import segment as seg

from .scenarios import tricky_history

pytestmark = pytest.mark.slow


def _edits_frame(spark, ops: list[nn_ops.EditOp], start: int = 1, node: str = "n1"):
    recs = [(start + i, *nn_ops.encode_op(op)) for i, op in enumerate(ops)]
    data = seg.encode_header() + seg.encode_records(recs)
    batch = dec.decode_segment("j", node, start, start + len(ops) - 1, data)
    return spark.createDataFrame(pa.Table.from_batches([batch]))


def test_apply_edits_matches_namespace_replay(spark):
    """The Spark side of the fold (mapInArrow tasks, then the driver) on a hand-built history."""
    ns, ops = tricky_history()
    base = pa.table(Namespace(permissions_enabled=False).to_image_columns(), schema=nn_image.IMAGE_SCHEMA)
    edits = _edits_frame(spark, ops).repartition(3)  # folded by three tasks, then on the driver
    res = cp.fold_edits(base, edits)
    assert res.image.equals(pa.table(ns.to_image_columns(), schema=nn_image.IMAGE_SCHEMA))
    assert sorted(res.dangling.tolist()) == []
    assert res.max_inode_id == ns.last_inode_id


def test_select_new_segments_and_merge_manifest(spark):
    files_schema = ing.spark_schema(ing.SEGMENT_FILES_ARROW_SCHEMA)
    discovered = spark.createDataFrame([
        ("j", "n1", 1, 10, "/p1", 100, 111),   # unchanged: skipped
        ("j", "n2", 1, 10, "/p2", 100, 222),   # checksum changed: re-ingested
        ("j", "n1", 11, 20, "/p3", 100, 333),  # new
    ], files_schema)
    manifest = spark.createDataFrame([
        ("j", "n1", 1, 10, "/p1", 100, 111, 1, 10, 10, 0, "f1", None),
        ("j", "n2", 1, 10, "/p2", 100, 999, 1, 10, 10, 0, "f9", None),
    ], ing.spark_schema(ing.MANIFEST_ARROW_SCHEMA))
    new = ing.select_new_segments(discovered, manifest)
    assertDataFrameEqual(new, discovered.where("path != '/p1'"))
    stats = spark.createDataFrame([("j", "n2", 1, 10, 1, 10, 10, 0, "f2", None),
                                   ("j", "n1", 11, 20, 11, 20, 10, 0, "f3", None)],
                                  "jid string, node string, segment_start long, segment_end long, "
                                  "first_txid long, last_txid long, num_records long, num_invalid long, "
                                  "fingerprint string, problem string")
    merged = ing.merge_manifest(manifest, new, stats)
    assertDataFrameEqual(merged.select("node", "segment_start", "file_crc32c", "fingerprint"),
                         spark.createDataFrame([("n1", 1, 111, "f1"), ("n2", 1, 222, "f2"),
                                                ("n1", 11, 333, "f3")],
                                               "node string, segment_start long, file_crc32c long, "
                                               "fingerprint string"))


def _manifest(spark, rows):
    """rows: (node, start, end, first, last, n_invalid, fingerprint, problem)."""
    full = [("j", n, s, e, f"/{n}/{s}", 1, 1, f, l, (l - f + 1) if f else 0, bad, fp, prob)
            for n, s, e, f, l, bad, fp, prob in rows]
    return spark.createDataFrame(full, ing.spark_schema(ing.MANIFEST_ARROW_SCHEMA))


def _kinds(df):
    return sorted((r["kind"], r["node"], r["segment_start"]) for r in df.collect())


def test_audit_clean_manifest_has_no_findings(spark):
    rows = [(n, s, s + 9, s, s + 9, 0, f"fp{s}", None) for n in ("n1", "n2", "n3") for s in (1, 11, 21)]
    m = _manifest(spark, rows)
    nodes = spark.createDataFrame([("n1",), ("n2",), ("n3",)], "node string")
    edits = spark.createDataFrame([], ing.spark_schema(dec.EDITS_ARROW_SCHEMA))
    assert au.audit(m, edits, nodes, 3).count() == 0


def test_audit_replication_gap_and_divergent_end(spark):
    rows = [(n, 1, 10, 1, 10, 0, "a", None) for n in ("n1", "n2", "n3")]
    rows += [("n1", 11, 20, 11, 20, 0, "b", None)]                      # only one copy: I3, missing x2
    rows += [("n2", 11, 15, 11, 15, 0, "c", None)]                      # divergent end
    rows += [(n, 31, 40, 31, 40, 0, "d", None) for n in ("n1", "n2", "n3")]  # gap 21..30
    rows += [("n3", 41, 50, 41, 44, 1, "e", "x: corrupt at byte 9: checksum mismatch")]
    rows += [(n, 41, 50, 41, 50, 0, "f", None) for n in ("n1", "n2")]
    m = _manifest(spark, rows)
    nodes = spark.createDataFrame([("n1",), ("n2",), ("n3",)], "node string")
    kinds = _kinds(au.damaged_copies(m))
    assert kinds == [("checksum-failure", "n3", 41)]
    assert _kinds(au.divergent_ends(m)) == [("divergent-end", None, 11)]
    assert _kinds(au.gaps_and_overlaps(m)) == [("overlapping", None, 11), ("txid-gap", None, 31)]
    rep = _kinds(au.replication_findings(m, nodes, 3))
    assert ("under-replicated", None, 11) in rep and ("under-replicated", None, 11) in rep
    assert ("invariant-2", None, 31) in rep      # nobody ends at 30
    assert ("missing-copy", "n3", 11) in rep
    assert not any(k == "under-replicated" and s == 41 for k, _n, s in rep)  # 2 clean of 3 suffice


def test_audit_divergent_records_compares_checksums(spark):
    ops = [nn_ops.StartLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1),
           nn_ops.SetTimesOp("u", b"\0" * 16, 1, 5, inode=16385, path="/", mtime=5, atime=-1),
           nn_ops.EndLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1)]
    other = list(ops)
    other[1] = nn_ops.SetTimesOp("u", b"\0" * 16, 1, 5, inode=16385, path="/", mtime=6, atime=-1)
    e = _edits_frame(spark, ops, node="n1").unionByName(_edits_frame(spark, ops, node="n2")) \
        .unionByName(_edits_frame(spark, other, node="n3"))
    m = ing.copy_stats(e).join(spark.createDataFrame([], ing.spark_schema(ing.SEGMENT_FILES_ARROW_SCHEMA))
                               .select("jid", "node", "segment_start", "segment_end", "path",
                                       "file_length", "file_crc32c"),
                               on=["jid", "node", "segment_start", "segment_end"], how="left")
    got = au.divergent_records(m, e).collect()
    assert [(r["kind"], r["txid"]) for r in got] == [("divergent-records", 2)]
    assert "n3=" in got[0]["detail"] and "n1=" in got[0]["detail"]


def test_ingest_refuses_tables_with_the_old_node_spelling(spark, tmp_path):
    """Nodes are ``host:port`` in the tables (as ``qjournal log status`` prints them); an output written when they
    were ``host_port`` is refused with what to do, rather than counted twice by the audit."""
    from qjournal.errors import JournalError
    from qjournal.pipeline.store import OutputStore

    layout = ing.OutputLayout(str(tmp_path / "out"))
    nodes = ["127.0.0.1:8485", "127.0.0.1:8486"]
    with OutputStore(spark, layout.root) as store:
        ing._refuse_old_node_names(store, layout, nodes)          # a new output: nothing to refuse
        store.write_bytes(layout.nodes_file, b'{"nodes": ["127.0.0.1:8485", "127.0.0.1:8486"]}')
        ing._refuse_old_node_names(store, layout, nodes)          # written by this version
        store.write_bytes(layout.nodes_file, b'{"nodes": ["127.0.0.1_8485", "127.0.0.1_8486"]}')
        with pytest.raises(JournalError, match="host_port .*127.0.0.1_8485.*new --out"):
            ing._refuse_old_node_names(store, layout, nodes)
