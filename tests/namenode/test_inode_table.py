"""The inode table (``namenode/inode_table.py``): the same rows as a dict model under random adds, inserts below
the highest id, changes and deletes, with chunks small enough to split, compact and merge; snapshots never change."""

from __future__ import annotations

import random

import pytest

from qjournal.namenode.inode_table import DEAD, Attrs, InodeTable

A = Attrs(False, 0o644, "u", "g", 3, 128)
B = Attrs(True, 0o755, "u", "g", 0, 0)


def rows_of(t: InodeTable) -> list:
    return list(t.rows())


@pytest.mark.parametrize("seed", range(12))
def test_random_changes_match_a_dict_model(seed):
    print("seed", seed)
    rng = random.Random(seed)
    t = InodeTable(chunk_rows=rng.choice((2, 3, 8, 32)))
    model: dict[int, tuple] = {}
    snaps: list[tuple] = []
    next_id = 100
    for step in range(1500):
        r = rng.random()
        if r < 0.45 or not model:
            next_id += rng.choice((1, 1, 1, 2, 5))
            iid = next_id
            if r < 0.05:  # below the highest id: an id never handed out yet (a hole)
                holes = [i for i in range(90, next_id) if i not in model]
                if holes:
                    iid = rng.choice(holes)
            row = (rng.randrange(50), f"n{iid}", rng.choice((A, B)), rng.randrange(10**6), 0, rng.randrange(9))
            t.add(iid, row[0], row[1], row[2], row[3], row[4], row[5])
            model[iid] = row
        elif r < 0.75:
            iid = rng.choice(sorted(model))
            t.delete(iid)
            del model[iid]
        else:
            iid = rng.choice(sorted(model))
            p, n, a, m, at, ln = model[iid]
            what = rng.randrange(4)
            if what == 0:
                t.set_mtime(iid, m + 1)
                m += 1
            elif what == 1:
                a = a._replace(perm=rng.randrange(512))
                t.set_attrs(iid, a)
            elif what == 2:
                t.move(iid, p + 1, n + "x")
                p, n = p + 1, n + "x"
            else:
                t.set_length(iid, ln + 7)
                ln += 7
            model[iid] = (p, n, a, m, at, ln)
        if rng.random() < 0.02:
            snaps.append((t.snapshot(), sorted((i,) + model[i] for i in model)))
        t.check()
    assert rows_of(t) == sorted((i,) + model[i] for i in model)
    assert len(t) == len(model)
    for iid in list(model)[:50]:
        assert iid in t and t.get(iid) == model[iid]
        assert t.attrs(iid) == model[iid][2] and t.parent(iid) == model[iid][0]
    assert t.get(10**9) is None and 10**9 not in t and "x" not in t
    for snap, want in snaps:  # copy on write: each snapshot still holds the rows of its instant
        got = []
        for ids, parents, names, attrs, mtimes, atimes, lengths in snap.chunks:
            for k in range(len(ids)):
                if attrs[k] != DEAD:
                    got.append((ids[k], parents[k], names[k], snap.attr_list[attrs[k]], mtimes[k], atimes[k],
                                lengths[k]))
        assert got == want
        assert snap.rows == len(want)


def test_deleting_most_rows_frees_their_chunks():
    t = InodeTable(chunk_rows=64)
    for i in range(1, 6401):
        t.add(i, 0, f"f{i}", A, i, i, 0)
    assert len(t._chunks) == 100
    for i in range(1, 6401):
        if i % 100:  # one row in a hundred kept (a job's _SUCCESS marker among its temporary files)
            t.delete(i)
    t.check()
    assert len(t) == 64 and len(t._chunks) <= 2  # memory follows the live rows, not the ids handed out
    assert [r[0] for r in t.rows()] == list(range(100, 6401, 100))


def test_changes_raise_for_a_missing_row():
    t = InodeTable()
    t.add(5, 0, "a", A, 1, 1, 0)
    t.delete(5)
    for call in (lambda: t.delete(5), lambda: t.set_mtime(5, 1), lambda: t.move(5, 1, "b")):
        with pytest.raises(KeyError):
            call()
    t.add(5, 0, "again", A, 1, 1, 0)  # a dead row's id taken again (the namespace refuses that; the table allows it)
    assert t.get(5)[1] == "again"
    t.check()


def test_load_rows_fills_chunks_and_stays_ordered():
    from array import array
    t = InodeTable(chunk_rows=4)
    t.add(1, 0, "", B, 0, 0, 0)
    i = t.attrs_index(A)
    ids = array("q", [3, 4, 5, 9, 10, 11, 12])
    n = len(ids)
    t.load_rows(ids, array("q", [1] * n), [f"f{x}" for x in ids], array("I", [i] * n), array("q", range(n)),
                array("q", range(n)), array("q", [0] * n))
    t.check()
    assert [r[0] for r in t.rows()] == [1, 3, 4, 5, 9, 10, 11, 12]
    assert t.get(9) == (1, "f9", A, 3, 3, 0)
