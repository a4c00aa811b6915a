"""The checkpoint's fold (pure Arrow/numpy) against the NameNode's own replay, by tables.

No Spark here: the fold's rules are pure, so they are tested on generated
histories and hand-built ops, split into partitions folded in a seeded random
order (the fold is associative and commutative), against the image of a
Namespace that applied the same edits one by one.
"""

from __future__ import annotations

import os
import random

import numpy as np
import pyarrow as pa
import pytest

from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import Namespace
from qjournal.pipeline import decode as dec
from qjournal.pipeline import fold as fo
from qjournal.pipeline.generate import GenOptions, generate
from qjournal.protocol import segment as seg

from .scenarios import tricky_history


def _image(ns: Namespace) -> pa.Table:
    return pa.table(ns.to_image_columns(), schema=nn_image.IMAGE_SCHEMA)


def _edits(ops: list[nn_ops.EditOp], start: int = 1) -> pa.Table:
    recs = [(start + i, *nn_ops.encode_op(op)) for i, op in enumerate(ops)]
    data = seg.encode_header() + seg.encode_records(recs)
    return pa.Table.from_batches([dec.decode_segment("j", "n1", start, start + len(ops) - 1, data)])


def _checkpoint(base: pa.Table, edits: pa.Table, rng: random.Random, parts: int) -> fo.Resolved:
    """Split the edits into ``parts`` random slices, fold each, fold the folds in a random order."""
    n = edits.num_rows
    cuts = sorted(rng.sample(range(1, n), min(parts - 1, n - 1))) if n > 1 else []
    rows = np.arange(n)
    rng.shuffle(rows)  # partitions need not be txid ranges: any split folds the same
    slices = [edits.take(pa.array(np.sort(s))) for s in np.split(rows, cuts)]
    folds = [fo.fold(fo.updates(s)) for s in slices] + [fo.fold(fo.image_updates(base))]
    rng.shuffle(folds)
    return fo.resolve(fo.fold(folds))


def test_hand_built_history_matches_replay():
    ns, ops = tricky_history()
    base = _image(Namespace(permissions_enabled=False))
    edits = _edits(ops)
    for seed in range(5):
        got = _checkpoint(base, edits, random.Random(seed), parts=4)
        assert got.image.equals(_image(ns)), f"seed {seed}"
        assert len(got.dangling) == 0
        assert got.max_inode_id == ns.last_inode_id
    # the history: every inode that ever existed, with its birth and death
    hist = fo.resolve(fo.fold([fo.updates(edits), fo.image_updates(base)])).history
    dead = {r["inode_id"]: r["dead_txid"] for r in hist.to_pylist()}
    assert dead[16386] == 7 and dead[16388] == 12 and dead[16390] == 9 and dead[16385] is None
    assert len(hist) == ns.last_inode_id - nn_ops.ROOT_INODE_ID + 1


def test_resolve_marks_subtrees_dangling_and_cycles():
    def folded(rows: list[tuple[int, int, int | None]]) -> pa.Table:
        upd = pa.table({"inode_id": [r[0] for r in rows], "txid": [1] * len(rows),
                        **{a: pa.nulls(len(rows), t) for a, t in fo.ATTRS},
                        "removed_txid": [r[2] for r in rows]}, schema=fo.UPDATES_SCHEMA)
        upd = upd.set_column(upd.schema.get_field_index("parent_id"), "parent_id",
                             pa.array([r[1] for r in rows], pa.int64()))
        upd = upd.set_column(upd.schema.get_field_index("type"), "type", pa.array(["d"] * len(rows)))
        return fo.fold(upd)

    got = fo.resolve(folded([(16385, 0, None), (1, 16385, None), (2, 1, 40), (3, 2, None), (4, 3, None),
                             (5, 16385, None), (6, 99, None), (7, 6, None)]))
    dead = dict(zip(got.history.column("inode_id").to_pylist(), got.history.column("dead_txid").to_pylist()))
    assert dead == {16385: None, 1: None, 2: 40, 3: 40, 4: 40, 5: None, 6: None, 7: None}
    assert sorted(got.dangling.tolist()) == [6, 7]
    assert sorted(got.image.column("inode_id").to_pylist()) == [1, 5, 16385]
    with pytest.raises(fo.FoldError, match="cycle"):
        fo.resolve(folded([(16385, 0, None), (1, 2, None), (2, 1, None)]))


def test_fold_is_order_free_on_ties_and_keeps_the_latest():
    rows = pa.table({"inode_id": [9, 9, 9], "txid": [5, 3, 5],
                     **{a: pa.nulls(3, t) for a, t in fo.ATTRS}, "removed_txid": [None, 4, None]},
                    schema=fo.UPDATES_SCHEMA)
    rows = rows.set_column(rows.schema.get_field_index("mtime"), "mtime", pa.array([50, 30, 50], pa.int64()))
    one = fo.fold(rows)
    assert one.column("mtime").to_pylist() == [50] and one.column("mtime__txid").to_pylist() == [5]
    assert one.column("removed_txid").to_pylist() == [4]
    assert fo.fold([fo.fold(rows.slice(2)), fo.fold(rows.slice(0, 2))]).equals(one)


@pytest.mark.parametrize("seed", [11, 12])
def test_generated_history_matches_replay(tmp_path, seed):
    print(f"seed={seed}")
    res = generate(GenOptions(seed=seed, txns=6000, out=str(tmp_path), nodes=1, roll_every_txns=1000,
                              image_txids=(2500, 6000)))
    cur = os.path.join(res.journal_dirs[0], "qjournal", "current")
    batches = []
    for s, e in res.segments:
        with open(os.path.join(cur, seg.segment_file_name(s, e)), "rb") as f:
            batches.append(dec.decode_segment("qjournal", "jn1", s, e, f.read()))
    edits = pa.Table.from_batches(batches)
    assert all(edits.column("valid").to_pylist())
    rng = random.Random(seed)
    _info0, img0 = nn_image.load_image(nn_image.image_path(res.name_dir, 2500))
    _info1, img1 = nn_image.load_image(nn_image.image_path(res.name_dir, 6000))
    later = edits.filter(pa.compute.greater(edits.column("txid"), 2500))
    got = _checkpoint(img0, later, rng, parts=7)
    assert got.image.equals(img1.select(got.image.column_names).cast(got.image.schema))
    empty = pa.table(Namespace().to_image_columns(), schema=nn_image.IMAGE_SCHEMA)
    assert _checkpoint(empty, edits, rng, parts=5).image.equals(got.image)


@pytest.mark.parametrize("spread", [1, 1 << 30])
def test_positions_dense_table_and_sparse_search_agree(spread):
    rng = np.random.default_rng(5)
    ids = np.unique(rng.integers(1, 5000, 3000)) * spread
    wanted = np.concatenate([ids[rng.integers(0, len(ids), 500)], rng.integers(-5, 5001 * spread, 500)])
    pos, found = fo._positions(ids, wanted)
    where = {v: i for i, v in enumerate(ids.tolist())}
    assert found.tolist() == [w in where for w in wanted.tolist()]
    assert [p for p, f in zip(pos.tolist(), found.tolist()) if f] == [where[w] for w in wanted.tolist() if w in where]
