"""Pure tests of the pipeline (no Spark): decoder, generator, session settings, range logic."""

from __future__ import annotations

import dataclasses
import os

import pytest

from qjournal.namenode import ops as nn_ops
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline import decode as dec
from qjournal.pipeline import session as sess
from qjournal.pipeline.generate import GenOptions, HistoryGenerator, generate
from qjournal.pipeline.ingest import discover_local, file_crc32c, node_names
from qjournal.protocol import segment as seg

CTX = dict(user="alice", client_id=b"\x01" * 16, call_id=7, ts=1000)


def _segment(start: int, ops: list[nn_ops.EditOp]) -> bytes:
    recs = [(start + i, *nn_ops.encode_op(op)) for i, op in enumerate(ops)]
    return seg.encode_header() + seg.encode_records(recs)


def _ops() -> list[nn_ops.EditOp]:
    return [nn_ops.StartLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1000),
            nn_ops.MkdirOp(**CTX, inode=16386, parent=16385, name="a", path="/a", perm=0o755,
                           owner="alice", group="g", mtime=1000),
            nn_ops.SetOwnerOp(**CTX, inode=16386, path="/a", owner=None, group="h"),
            nn_ops.EndLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1000)]


def test_decode_clean_segment_gives_typed_valid_rows():
    batch = dec.decode_segment("j", "n1", 10, 13, _segment(10, _ops()))
    assert batch.schema == dec.EDITS_ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [r["txid"] for r in rows] == [10, 11, 12, 13]
    assert all(r["valid"] and r["problem"] is None for r in rows)
    assert rows[1]["op"] == "OP_MKDIR" and rows[1]["inode"] == 16386 and rows[1]["perm"] == 0o755
    assert rows[2]["owner"] is None and rows[2]["group"] == "h"  # null = unchanged
    assert rows[0]["record_offset"] == seg.HEADER_SIZE
    assert {r["node"] for r in rows} == {"n1"} and {r["segment_end"] for r in rows} == {13}


@pytest.mark.parametrize("damage, expect", [
    ("bitflip", "checksum mismatch"),
    ("truncate", "short copy"),
    ("header", "bad-header"),
    ("wrong-name", "short copy"),
])
def test_decode_damaged_copy_marks_problem_rows(damage, expect):
    data = bytearray(_segment(10, _ops()))
    end = 13
    if damage == "bitflip":
        data[seg.HEADER_SIZE + seg.REC_HEAD_SIZE + 2] ^= 0x10  # body of txid 10
    elif damage == "truncate":
        data = data[:-30]
    elif damage == "header":
        data[0:8] = b"NOTMAGIC"
    else:
        end = 20  # file name claims more txids than the copy holds
    rows = dec.decode_segment("j", "n1", 10, end, bytes(data)).to_pylist()
    bad = [r for r in rows if not r["valid"]]
    assert bad, rows
    assert any(expect in r["problem"] for r in bad), [r["problem"] for r in bad]
    assert all("j/n1/edits_" in r["problem"] for r in bad)  # names the copy


def test_decode_body_with_wrong_field_type_is_invalid_not_fatal():
    good = nn_ops.encode_body(_ops()[1])
    import msgpack

    d = msgpack.unpackb(good)
    d["inode"] = "not-an-int"
    recs = [(1, nn_ops.OP_MKDIR, good), (2, nn_ops.OP_MKDIR, msgpack.packb(d))]
    data = seg.encode_header() + seg.encode_records(recs)
    rows = dec.decode_segment("j", "n", 1, 2, data).to_pylist()
    assert rows[0]["valid"] and rows[0]["inode"] == 16386
    assert not rows[1]["valid"] and "inode" in rows[1]["problem"] and rows[1]["inode"] is None


def test_generator_is_deterministic_and_replicas_identical(tmp_path):
    a = generate(GenOptions(seed=5, txns=450, out=str(tmp_path / "a"), roll_every_txns=100))
    b = generate(GenOptions(seed=5, txns=450, out=str(tmp_path / "b"), roll_every_txns=100))
    assert a.segments == [[1, 100], [101, 200], [201, 300], [301, 400], [401, 450]]
    for s, e in a.segments:
        name = seg.segment_file_name(s, e)
        blobs = [open(os.path.join(d, "qjournal", "current", name), "rb").read()
                 for d in a.journal_dirs + b.journal_dirs]
        assert len(set(blobs)) == 1, name
        scan = seg.scan_segment(blobs[0], expected_first_txid=s)
        assert scan.clean and (scan.first_txid, scan.last_txid) == (s, e)
        recs = list(seg.iter_records(blobs[0]))
        assert recs[0].opcode == nn_ops.OP_START_LOG_SEGMENT
        assert recs[-1].opcode == (nn_ops.OP_END_LOG_SEGMENT if e - s >= 1 else nn_ops.OP_START_LOG_SEGMENT)


def test_generator_damage_is_recorded_and_present(tmp_path):
    r = generate(GenOptions(seed=9, txns=1000, out=str(tmp_path), roll_every_txns=100,
                            damage=("lagging", "bitflip", "divergent", "gap")))
    kinds = sorted({d["kind"] for d in r.damage})
    assert kinds == ["bitflip", "divergent", "gap", "lagging"]
    copies = discover_local(r.journal_dirs)
    by = {(c.node, c.segment_start): c for c in copies}
    gap = next(d for d in r.damage if d["kind"] == "gap")
    assert not any(c.segment_start == gap["segment_start"] for c in copies)
    lag = [d for d in r.damage if d["kind"] == "lagging"]
    assert all((d["node"], d["segment_start"]) not in by for d in lag)
    for kind in ("bitflip", "divergent"):
        d = next(x for x in r.damage if x["kind"] == kind)
        mine = by[(d["node"], d["segment_start"])]
        other = next(c for (n, s), c in sorted(by.items()) if s == d["segment_start"] and n != d["node"])
        assert mine.file_crc32c != other.file_crc32c
        data = open(mine.path, "rb").read()
        assert seg.scan_segment(data).clean == (kind == "divergent")


def test_generator_ops_replay_on_a_fresh_namespace():
    from qjournal.namenode.namespace import Namespace

    g = HistoryGenerator(seed=3, users=5)
    replay = Namespace(permissions_enabled=False)
    names = set()
    for _ in range(600):
        op = g.next_op()
        names.add(op.NAME)
        replay.apply(nn_ops.decode_op(*nn_ops.encode_op(op)))
    assert replay.snapshot() == g.ns.snapshot()
    assert {"OP_MKDIR", "OP_CREATE", "OP_RENAME", "OP_DELETE", "OP_SET_TIMES"} <= names
    assert len({op.user for op in [g.next_op() for _ in range(50)]}) > 1


def test_generator_rejects_unknown_damage(tmp_path):
    with pytest.raises(ValueError, match="unknown damage kind 'melt'"):
        generate(GenOptions(seed=1, txns=10, out=str(tmp_path), damage=("melt",)))


@pytest.mark.parametrize("ranges, after, expect", [
    ([], 0, 0),
    ([(1, 10), (11, 20)], 0, 20),
    ([(1, 10), (12, 20)], 0, 10),          # hole at 11
    ([(11, 20), (1, 10)], 0, 20),          # order of input does not matter
    ([(1, 10), (11, 20)], 15, 20),         # base image inside a segment
    ([(1, 10)], 10, 10),                   # nothing after the image
    ([(5, 10)], 0, 0),                     # txid 1 missing
    ([(1, 10), (1, 10), (11, 12)], 0, 12),  # duplicates
])
def test_contiguous_end(ranges, after, expect):
    assert cp.contiguous_end(ranges, after) == expect


@pytest.mark.parametrize("master, expect", [
    ("local", 2), ("local[1]", 2), ("local[2]", 4), ("local[8]", 16), ("local[3,2]", 6),
])
def test_default_shuffle_partitions(master, expect):
    assert sess.default_shuffle_partitions(master) == expect


def test_log4j_config_is_shipped():
    text = open(sess.log4j2_config_path()).read()
    assert "rootLogger.level = error" in text


@pytest.mark.parametrize("dirs, expect", [
    (["/x/jn1", "/x/jn2/"], ["jn1", "jn2"]),
    (["/a/jn", "/b/jn"], ["node0", "node1"]),   # base names collide: by position
])
def test_node_names(dirs, expect):
    assert node_names(dirs) == expect


def test_discover_ignores_in_progress_and_names_files(tmp_path):
    cur = tmp_path / "jn1" / "j1" / "current"
    cur.mkdir(parents=True)
    (cur / seg.segment_file_name(1, 2)).write_bytes(b"x" * 5)
    (cur / seg.segment_file_name(3)).write_bytes(b"y")
    (cur / "VERSION").write_bytes(b"v")
    copies = discover_local([str(tmp_path / "jn1")])
    assert [(c.jid, c.node, c.segment_start, c.segment_end, c.file_length) for c in copies] == [
        ("j1", "jn1", 1, 2, 5)]
    assert copies[0].file_crc32c == file_crc32c(copies[0].path)[0]
    from qjournal.errors import JournalError

    with pytest.raises(JournalError, match="does not exist"):
        discover_local([str(tmp_path / "nope")])
    with pytest.raises(JournalError, match="'j2' not found"):
        discover_local([str(tmp_path / "jn1")], jid="j2")


def test_group_tasks_into_partitions_of_about_partition_bytes():
    """Consecutive copies share a Spark partition (a task's fixed cost paid once per group, not per copy):
    groups of about ``partitionBytes``, at least ``minPartitions`` when there are that many copies, order kept."""
    from qjournal.pipeline import fetch as fe
    from qjournal.pipeline.source import group_tasks

    def task(i, length):
        return fe.CopyTask("j", 100 * i + 1, 100 * i + 100, (fe.Source("n", f"/x/{i}"),), file_length=length)

    tasks = [task(i, 10) for i in range(10)]
    assert group_tasks([], 64, 1) == []
    assert group_tasks(tasks, 0, 1) == [[t] for t in tasks]               # 0: one copy per partition
    assert group_tasks(tasks, 1000, 1) == [tasks]                          # all fits in one
    halves = group_tasks(tasks, 1000, 2)                                   # parallelism asked: two
    assert halves == [tasks[:5], tasks[5:]]
    by_bytes = group_tasks(tasks, 30, 1)                                   # ~30 bytes each: 4 groups
    assert [len(g) for g in by_bytes] == [3, 2, 3, 2] and sum(by_bytes, []) == tasks
    assert group_tasks(tasks[:3], 1000, 8) == [[t] for t in tasks[:3]]    # never more groups than copies
    big_first = [task(0, 1000)] + [task(i, 10) for i in range(1, 6)]
    groups = group_tasks(big_first, 500, 3)
    assert groups[0] == [big_first[0]] and sum(groups, []) == big_first and len(groups) == 3
    unknown = fe.CopyTask("j", 1, 1000, (fe.Source("n", "http://h:1/getJournal"),))   # remote: sized by txids
    assert group_tasks([unknown, unknown], 150_000, 1) == [[unknown], [unknown]]
