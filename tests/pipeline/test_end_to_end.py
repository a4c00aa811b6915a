"""End to end on generated journals: the decisive checkpoint test, the audit, the report, the CLI.

The decisive test: for a generated history, the image the pipeline builds at
txid N equals, row for row (and header for header), the image the NameNode's
own Namespace saves at N; and a Namespace loaded from the pipeline's image plus
the later edits reaches the same state as one that replayed everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

import pytest

from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import Namespace
from qjournal.pipeline import audit as au
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline import ingest as ing
from qjournal.pipeline import report as rep
from qjournal.pipeline import run as runner
from qjournal.protocol import segment as seg

pytestmark = pytest.mark.slow


def _tables(spark, layout):
    return ing.read_edits(spark, layout), ing.read_manifest(spark, layout)


def test_incremental_ingest_adds_only_new_copies(spark, clean_history, clean_ingested):
    layout, (first, second, again) = clean_ingested
    n_copies = 3 * len(clean_history.segments)
    n_first = 3 * sum(1 for s, _e in clean_history.segments if s < 600)
    assert 0 < n_first < n_copies
    assert (first.ingested, second.ingested, again.ingested) == (n_first, n_copies - n_first, 0)
    assert again.skipped == n_copies
    edits, manifest = _tables(spark, layout)
    assert manifest.count() == n_copies
    # every copy exactly once: 3 nodes x 1200 txids, all valid
    assert edits.count() == 3 * clean_history.last_txid
    assert edits.where("not valid").count() == 0
    assert edits.select("node", "txid").distinct().count() == 3 * clean_history.last_txid


def test_decisive_pipeline_image_equals_namenode_image(spark, clean_history, clean_ingested, tmp_path):
    layout, _ = clean_ingested
    edits, manifest = _tables(spark, layout)
    nn = os.path.join(clean_history.name_dir, "current")
    # from the NameNode's empty image (txid 0) to 600, then from the pipeline's own 600 to 1200
    r1 = cp.checkpoint(spark, edits, manifest, out_name_dir=str(tmp_path), txid=600,
                       base=os.path.join(nn, nn_image.image_file_name(0)))
    r2 = cp.checkpoint(spark, edits, manifest, out_name_dir=str(tmp_path), base=r1.path)
    assert (r1.txid, r2.txid) == (600, 1200)
    for r in (r1, r2):
        got_info, got = nn_image.load_image(r.path)          # verifies .crc, sort order
        want_info, want = nn_image.load_image(os.path.join(nn, nn_image.image_file_name(r.txid)))
        assert got_info == want_info
        assert got.num_rows == want.num_rows > 1
        assert got.equals(want), f"image at txid {r.txid} differs"

    # A NameNode started from the pipeline's image 600 plus edits 601..1200 == full replay.
    info, table = nn_image.load_image(r1.path)
    from_image = Namespace.from_image_columns(table.to_pydict(), info.last_inode_id,
                                              permissions_enabled=False)
    full = Namespace(permissions_enabled=False)
    jn1 = os.path.join(clean_history.journal_dirs[0], "qjournal", "current")
    for s, e in clean_history.segments:
        with open(os.path.join(jn1, seg.segment_file_name(s, e)), "rb") as f:
            for rec in seg.iter_records(f.read()):
                op = nn_ops.decode_op(rec.opcode, rec.body, rec.txid)
                full.apply(op)
                if rec.txid > 600:
                    from_image.apply(op)
    assert from_image.snapshot() == full.snapshot()


def test_checkpoint_refuses_to_cross_a_gap(spark, damaged_history, damaged_ingested, tmp_path):
    edits, manifest = _tables(spark, damaged_ingested)
    gap = next(d for d in damaged_history.damage if d["kind"] == "gap")
    with pytest.raises(cp.CheckpointError, match=f"txids after {gap['segment_start'] - 1} are missing"):
        cp.checkpoint(spark, edits, manifest, out_name_dir=str(tmp_path), txid=damaged_history.last_txid)


def _audit(spark, layout):
    edits, manifest = _tables(spark, layout)
    nodes = ing.read_nodes(spark, layout)
    nodes_df = spark.createDataFrame([(n,) for n in nodes], "node string")
    return au.audit(manifest, edits, nodes_df, len(nodes)).collect()


def test_audit_is_silent_on_a_clean_journal(spark, clean_ingested):
    layout, _ = clean_ingested
    assert _audit(spark, layout) == []


def test_audit_finds_every_injected_damage(spark, damaged_history, damaged_ingested):
    found = _audit(spark, damaged_ingested)
    by_kind: dict[str, list] = {}
    for f in found:
        by_kind.setdefault(f["kind"], []).append(f)
    print(sorted((f["kind"], f["node"], f["segment_start"]) for f in found))
    for d in damaged_history.damage:
        if d["kind"] == "lagging":
            assert any(f["node"] == d["node"] and f["segment_start"] == d["segment_start"]
                       for f in by_kind["missing-copy"]), d
        elif d["kind"] == "bitflip":
            assert any(f["node"] == d["node"] and f["segment_start"] == d["segment_start"]
                       for f in by_kind["checksum-failure"]), d
        elif d["kind"] == "divergent":
            assert any(f["segment_start"] == d["segment_start"] and f["txid"] == d["txid"]
                       and d["node"] in f["detail"] for f in by_kind["divergent-records"]), d
        elif d["kind"] == "gap":
            assert any(f["txid"] == d["segment_start"] for f in by_kind["txid-gap"]), d
            assert any(f["segment_start"] == d["segment_end"] + 1 for f in by_kind["invariant-2"]), d
    # nothing beyond what was injected (and its direct consequences)
    assert sorted(by_kind) == ["checksum-failure", "divergent-records", "invariant-2", "missing-copy",
                               "txid-gap"]
    assert {f["severity"] for f in by_kind["missing-copy"] + by_kind["checksum-failure"]} == {au.WARNING}
    assert {f["severity"] for f in by_kind["divergent-records"] + by_kind["txid-gap"]} == {au.ERROR}


def _args(**kw):
    p = argparse.ArgumentParser()
    runner.add_arguments(p)
    argv = [kw.pop("stage")]
    for k, v in kw.items():
        argv += [f"--{k.replace('_', '-')}", str(v)] if v is not True else [f"--{k.replace('_', '-')}"]
    return p.parse_args(argv)


def test_cli_audit_exit_status(spark, clean_ingested, damaged_ingested, capsys):
    clean_layout, _ = clean_ingested
    assert runner.run(_args(stage="audit", out=clean_layout.root, quiet=True)) == 0
    assert runner.run(_args(stage="audit", out=damaged_ingested.root, quiet=True)) == runner.EXIT_AUDIT_FAILED
    out = capsys.readouterr().out
    assert "ERROR" in out and "txid-gap" in out


def test_cli_reports_bad_input(tmp_path, capsys):
    rc = runner.run(_args(stage="ingest", journal_dirs=str(tmp_path / "missing"), out=str(tmp_path / "o"),
                          quiet=True))
    assert rc == runner.EXIT_USAGE
    assert "does not exist" in capsys.readouterr().err


def test_report_writes_tables_plots_and_page(spark, clean_history, clean_ingested, tmp_path):
    import pandas as pd

    layout, _ = clean_ingested
    edits, manifest = _tables(spark, layout)
    out = str(tmp_path / "report")
    res = rep.write_report(spark, edits, manifest, None, out)
    page = open(res.html_path, encoding="utf-8").read()
    assert page.count("data:image/png;base64,") == 5
    assert set(res.tables) >= {"ops_over_time", "top_directories", "user_activity",
                               "namespace_by_directory", "namespace_growth"}
    _info, image = nn_image.load_image(os.path.join(clean_history.name_dir, "current",
                                                    nn_image.image_file_name(clean_history.last_txid)))
    growth = pd.read_parquet(os.path.join(out, "namespace_growth.parquet"))
    assert int(growth["inodes"].iloc[-1]) == image.num_rows  # size at the end == the final image
    files = sum(1 for t in image.column("type").to_pylist() if t == "f")
    by_dir = pd.read_parquet(os.path.join(out, "namespace_by_directory.parquet"))
    assert 0 < by_dir["files"].sum() <= files
    ops = pd.read_parquet(os.path.join(out, "ops_over_time.parquet"))
    markers = 2 * len(clean_history.segments)
    assert ops["count"].sum() == clean_history.last_txid - markers
    users = pd.read_parquet(os.path.join(out, "user_activity.parquet"))
    assert users["user"].nunique() > 3


def test_fold_reads_files_and_spark_frames_alike(spark, clean_history, clean_ingested):
    """The checkpoint's two ways into the edits table fold to the same namespace: Arrow's Parquet
    reader over the table's files (a ``file:`` table) and Spark's reader (any other Hadoop URI,
    or a derived frame)."""
    layout, _ = clean_ingested
    edits, manifest = _tables(spark, layout)
    p = cp.plan(manifest, None, 0)
    files = cp.local_edit_files(edits, p.copies)
    assert files and len(files) == len(clean_history.segments)  # one canonical copy per segment
    assert cp.local_edit_files(edits.where("valid"), p.copies) is None
    base = cp.empty_image_table()
    via_files = cp.fold_edits(base, edits, jid=p.jid, copies=p.copies, txid_range=(0, 900))
    via_spark = cp.fold_edits(base, edits.where("true"), jid=p.jid, copies=p.copies, txid_range=(0, 900))
    assert via_files.history.sort_by("inode_id").equals(via_spark.history.sort_by("inode_id"))
    assert via_files.image.num_rows > 1


def test_checkpoint_straight_from_the_journal(spark, clean_history, damaged_history, tmp_path):
    """No edits table: the executors read, decode and fold the segments; the same image as the
    NameNode's, through the CLI's stage; a flipped bit on one copy fails over to the next replica,
    and a missing segment stops the checkpoint before it."""
    nn = os.path.join(clean_history.name_dir, "current")
    out = tmp_path / "direct"
    rc = runner.main(["checkpoint", "--journal-dirs", ",".join(clean_history.journal_dirs), "--out", str(out),
                      "--master", "local[2]", "--quiet", "--txid", "1200",
                      "--image", os.path.join(nn, nn_image.image_file_name(600))])
    assert rc == 0
    got_info, got = nn_image.load_image(os.path.join(out, "checkpoint", "current", nn_image.image_file_name(1200)))
    want_info, want = nn_image.load_image(os.path.join(nn, nn_image.image_file_name(1200)))
    assert got_info == want_info and got.equals(want)

    dirs = damaged_history.journal_dirs
    tasks = cp.replica_tasks(ing.discover_local(dirs, None, ing.node_names(dirs)))
    assert all(len(t.sources) >= 2 for t in tasks)
    flip = next(d for d in damaged_history.damage if d["kind"] == "bitflip")
    gap = next(d for d in damaged_history.damage if d["kind"] == "gap")
    assert flip["segment_start"] < gap["segment_start"]
    # the damaged copy first: its task must fail over to a good replica
    tasks = [dataclasses.replace(t, sources=tuple(sorted(t.sources, key=lambda s: s.node != flip["node"])))
             if t.segment_start == flip["segment_start"] else t for t in tasks]
    assert any(t.sources[0].node == flip["node"] for t in tasks if t.segment_start == flip["segment_start"])
    r = cp.checkpoint_from_journal(spark, tasks, out_name_dir=str(tmp_path / "d"), txid=gap["segment_start"] - 1)
    assert r.txid == gap["segment_start"] - 1 and r.num_inodes > 1
    with pytest.raises(cp.CheckpointError, match=f"txids after {gap['segment_start'] - 1} are missing"):
        cp.checkpoint_from_journal(spark, tasks, out_name_dir=str(tmp_path / "e"), txid=damaged_history.last_txid)
