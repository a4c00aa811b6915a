"""The checkpoint's rules as vectorised folds: edits -> per-inode last state -> image.

Why: a checkpoint (HDFS-1580 use case 5) turns a base image plus edits into the
image at a later txid. The NameNode does it one edit at a time in one process;
the pipeline does the O(edits) part (turning each edit into attribute updates
and folding them per inode) in Spark tasks, one partition of the edits table
each, and the O(inodes) part (merging the partitions' folds, resolving deleted
subtrees) once on the driver, all with Arrow and numpy kernels: no per-record
Python loop. The result has to fit one NameNode's memory anyway (it is an image
a NameNode loads), so the driver's part is bounded by what the NameNode itself
holds. This module is pure (no Spark, no files, no clock): tables in, tables
out, tested by tables against the NameNode's own replay.

Theory of operation:

1. *Updates* (:func:`updates`): every edit becomes rows ``(inode_id, txid,
   attributes)`` with null for "not set by this op": create/mkdir set every
   attribute of the new inode and the parent's mtime; rename sets the inode's
   ``parent_id``/``name`` and both parents' mtime; delete sets the parent's
   mtime; the ``set_*`` ops set their attribute (``owner``/``group`` null and
   times -1 mean unchanged, as in the Namespace). Direct removals (delete, and
   the inode a create or rename overwrote) are rows with ``removed_txid``.
2. *Fold* (:func:`fold`): per inode, each attribute's value from its update
   with the highest txid (with its txid kept, ``<attr>__txid``), the lowest txid
   that set ``type`` (``created_txid``) and the lowest removal txid. Folding is
   associative and commutative over row sets (``fold(a + b) == fold(fold(a) +
   fold(b))``, whatever the order of ``a`` and ``b``), so partitions fold on
   their own, in any order, and the driver folds their folds.
3. *Resolve* (:func:`resolve`): an inode survives iff no inode on its path to
   the root, following the *final* parent links, was removed directly. Final
   links are enough: nothing moves under a removed directory and ids are never
   reused, so the lowest removed ancestor is the first removed. Pointer jumping
   over dense index arrays finds it in ``log2(depth)`` vectorised rounds.

Invariants:

1. ``resolve(fold(updates(base, edits)))`` equals, row for row, the image a
   NameNode that replayed the same edits one by one holds (tests compare).
2. An inode whose final parent link ends at a missing inode is reported as
   dangling, never silently dropped or kept.
3. Parent links that do not reach the root within
   :data:`MAX_POINTER_JUMPING_ROUNDS` doublings (a cycle in the input) are a
   :class:`FoldError` naming inodes, never an endless loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from qjournal.errors import QJournalError, register_error
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.image import IMAGE_SCHEMA

#: bound on pointer-jumping rounds (2**64 levels: any real tree); reaching it means a cycle
MAX_POINTER_JUMPING_ROUNDS = 64

#: "no txid": below every real txid and the base image's (-1)
NO_TXID = np.iinfo(np.int64).min

#: image attributes (every image column but the key), with their Arrow types
ATTRS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (f.name, f.type) for f in IMAGE_SCHEMA if f.name != "inode_id")
ATTR_NAMES: tuple[str, ...] = tuple(a for a, _ in ATTRS)

#: the columns of the edits table the fold reads
EDIT_COLUMNS: tuple[str, ...] = (
    "txid", "opcode", "inode", "parent", "name", "perm", "owner", "group", "mtime", "atime",
    "replication", "block_size", "length", "overwrite_inode", "src_parent", "dst_parent", "dst_name")

#: a fold: one row per inode, sorted by inode_id
FOLD_SCHEMA = pa.schema(
    [("inode_id", pa.int64())]
    + [f for a, t in ATTRS for f in ((a, t), (a + "__txid", pa.int64()))]
    + [("created_txid", pa.int64()), ("removed_txid", pa.int64())])

#: the updates of :func:`updates`: one row per attribute change or removal
UPDATES_SCHEMA = pa.schema([("inode_id", pa.int64()), ("txid", pa.int64())] + list(ATTRS)
                           + [("removed_txid", pa.int64())])

#: every inode that ever existed, with its last state, birth and death
HISTORY_SCHEMA = pa.schema([("inode_id", pa.int64())] + list(ATTRS)
                           + [("created_txid", pa.int64()), ("dead_txid", pa.int64())])


@register_error
class FoldError(QJournalError):
    """The edits cannot be folded into a tree (a parent cycle)."""


# --- 1. updates -----------------------------------------------------------------------

def _np(col, fill: int = 0) -> np.ndarray:
    """An integer column as numpy (nulls as ``fill``)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if col.null_count:
        col = pc.fill_null(col, fill)
    return col.to_numpy(zero_copy_only=False)


def _valid(col) -> np.ndarray:
    """Where a column is not null, as a numpy bool array."""
    if not col.null_count:
        return np.ones(len(col), dtype=bool)
    return np.asarray(pc.is_valid(col).to_numpy(zero_copy_only=False), dtype=bool)


def _rows(edits: pa.Table, mask: np.ndarray, inode_col: str, removed: bool = False,
          **set_cols) -> pa.Table | None:
    """Updates for the edits where ``mask``: ``inode_id`` from ``inode_col``, the given attributes set
    (``removed``: direct removals, ``removed_txid`` = the edit's txid).

    ``set_cols`` maps an attribute to an edits column name, or to a constant
    (``("lit", value)``), or to ``("unless", column, sentinel)`` (null where the
    column equals the sentinel).
    """
    idx = np.flatnonzero(mask)
    if not len(idx):
        return None
    sub = edits.take(pa.array(idx))
    n = len(idx)
    out = {"inode_id": sub.column(inode_col).cast(pa.int64()), "txid": sub.column("txid").cast(pa.int64())}
    for a, t in ATTRS:
        spec = set_cols.get(a)
        if spec is None:
            out[a] = pa.nulls(n, t)
        elif isinstance(spec, tuple) and spec[0] == "lit":
            out[a] = pa.array(np.full(n, spec[1]) if t != pa.string() else [spec[1]] * n, t)
        elif isinstance(spec, tuple) and spec[0] == "unless":
            col = sub.column(spec[1]).cast(t)
            out[a] = pc.if_else(pc.equal(col, spec[2]), pa.scalar(None, t), col)
        else:
            out[a] = sub.column(spec).cast(t)
    out["removed_txid"] = out["txid"] if removed else pa.nulls(n, pa.int64())
    return pa.table(out, schema=UPDATES_SCHEMA)


def updates(edits: pa.Table | pa.RecordBatch) -> pa.Table:
    """Every attribute change and direct removal of ``edits`` (step 1).

    Args:
        edits: rows with at least :data:`EDIT_COLUMNS` (valid records only, in any order).

    Returns:
        A table with :data:`UPDATES_SCHEMA`.
    """
    if isinstance(edits, pa.RecordBatch):
        edits = pa.Table.from_batches([edits])
    edits = edits.select(list(EDIT_COLUMNS))
    op = _np(edits.column("opcode"))
    mk, cr = op == nn_ops.OP_MKDIR, op == nn_ops.OP_CREATE
    de, rn = op == nn_ops.OP_DELETE, op == nn_ops.OP_RENAME
    over = (cr | rn) & (_np(edits.column("overwrite_inode")) != 0)
    zero = ("lit", 0)
    parts = [
        _rows(edits, mk, "inode", parent_id="parent", name="name", type=("lit", "d"), permission="perm",
              owner="owner", group="group", mtime="mtime", atime=zero, replication=zero,
              block_size=zero, length=zero),
        _rows(edits, cr, "inode", parent_id="parent", name="name", type=("lit", "f"), permission="perm",
              owner="owner", group="group", mtime="mtime", atime="atime", replication="replication",
              block_size="block_size", length="length"),
        _rows(edits, mk | cr | de, "parent", mtime="mtime"),
        _rows(edits, rn, "inode", parent_id="dst_parent", name="dst_name"),
        _rows(edits, rn, "src_parent", mtime="mtime"),
        _rows(edits, rn, "dst_parent", mtime="mtime"),
        _rows(edits, op == nn_ops.OP_SET_PERMISSION, "inode", permission="perm"),
        _rows(edits, op == nn_ops.OP_SET_OWNER, "inode", owner="owner", group="group"),
        _rows(edits, op == nn_ops.OP_SET_TIMES, "inode", mtime=("unless", "mtime", -1),
              atime=("unless", "atime", -1)),
        _rows(edits, op == nn_ops.OP_SET_REPLICATION, "inode", replication="replication"),
        _rows(edits, de, "inode", removed=True),
        _rows(edits, over, "overwrite_inode", removed=True),
    ]
    parts = [p for p in parts if p is not None]
    if not parts:
        return UPDATES_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def image_updates(image: pa.Table, txid: int = -1) -> pa.Table:
    """A base image as updates at ``txid`` (lower than any edit's)."""
    n = image.num_rows
    cols = {"inode_id": image.column("inode_id").cast(pa.int64()),
            "txid": pa.array(np.full(n, txid, dtype=np.int64))}
    cols.update({a: image.column(a).cast(t) for a, t in ATTRS})
    cols["removed_txid"] = pa.nulls(n, pa.int64())
    return pa.table(cols, schema=UPDATES_SCHEMA)


def as_fold_rows(upd: pa.Table) -> pa.Table:
    """Updates in the fold's shape (not yet one row per inode): each attribute's txid where set."""
    txid = _np(upd.column("txid"))
    cols = {"inode_id": upd.column("inode_id")}
    for a, _t in ATTRS:
        col = upd.column(a)
        cols[a] = col
        cols[a + "__txid"] = pa.array(np.where(_valid(col), txid, NO_TXID))
    cols["created_txid"] = pa.array(np.where(_valid(upd.column("type")), txid, NO_TXID))
    rem = upd.column("removed_txid")
    cols["removed_txid"] = pa.array(np.where(_valid(rem), _np(rem, 0), NO_TXID))
    return pa.table(cols, schema=FOLD_SCHEMA)


# --- 2. fold --------------------------------------------------------------------------

def _group_last(key: np.ndarray, starts: np.ndarray, group_of: np.ndarray, order: np.ndarray,
                tx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the row (original index) with the highest ``tx`` (the later row on ties).

    Returns:
        ``(groups, rows)``: the groups that have a row with ``tx != NO_TXID`` and their chosen rows.
    """
    tx_sorted = tx[order]
    best = np.maximum.reduceat(tx_sorted, starts)
    hit = (tx_sorted == best[group_of]) & (tx_sorted != NO_TXID)
    pos = np.flatnonzero(hit)
    grp = group_of[pos]
    last = np.r_[grp[1:] != grp[:-1], True] if len(grp) else np.zeros(0, bool)
    return grp[last], order[pos[last]]


def _scatter(n: int, groups: np.ndarray, values: pa.Array, typ: pa.DataType) -> pa.Array:
    """An array of ``n`` nulls with ``values`` placed at ``groups`` (ascending)."""
    if len(groups) == n:
        return values.cast(typ)
    # indices into values, -1 -> null: take with a null index gives null
    idx = np.full(n, -1, dtype=np.int64)
    idx[groups] = np.arange(len(groups))
    idx_arr = pa.array(idx, mask=idx < 0)
    return values.take(idx_arr).cast(typ)


def fold(rows: pa.Table | list[pa.Table]) -> pa.Table:
    """Fold rows of :data:`FOLD_SCHEMA` (or updates) into one row per inode (step 2).

    Args:
        rows: fold tables and/or update tables (any order; see the module's invariant on associativity).

    Returns:
        A table with :data:`FOLD_SCHEMA`, sorted by ``inode_id``, unique ``inode_id``.
    """
    tables = rows if isinstance(rows, list) else [rows]
    tables = [as_fold_rows(t) if "txid" in t.schema.names else t.select(FOLD_SCHEMA.names)
              for t in tables]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return FOLD_SCHEMA.empty_table()
    t = pa.concat_tables(tables).combine_chunks()
    key = _np(t.column("inode_id"))
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    starts = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    n = len(starts)
    group_of = np.repeat(np.arange(n), np.diff(np.r_[starts, len(key_sorted)]))
    out: dict[str, pa.Array] = {"inode_id": pa.array(key_sorted[starts])}
    for a, typ in ATTRS:
        tx = _np(t.column(a + "__txid"), NO_TXID)
        groups, chosen = _group_last(key, starts, group_of, order, tx)
        chosen_arr = pa.array(chosen)
        out[a] = _scatter(n, groups, t.column(a).take(chosen_arr), typ)
        txs = np.full(n, NO_TXID, dtype=np.int64)
        txs[groups] = tx[chosen]
        out[a + "__txid"] = pa.array(txs)
    for c in ("created_txid", "removed_txid"):
        v = _np(t.column(c), NO_TXID)[order]
        v = np.where(v == NO_TXID, np.iinfo(np.int64).max, v)
        m = np.minimum.reduceat(v, starts)
        out[c] = pa.array(np.where(m == np.iinfo(np.int64).max, NO_TXID, m))
    return pa.table(out, schema=FOLD_SCHEMA)


#: a :class:`Folder` folds what it holds once this many update rows are pending
FOLD_EVERY_ROWS = 1 << 20


class Folder:
    """Folds edits as they come, in bounded memory (a task's whole share, batch by batch)."""

    def __init__(self, fold_every_rows: int = FOLD_EVERY_ROWS) -> None:
        self.fold_every_rows = fold_every_rows
        self._parts: list[pa.Table] = []
        self._pending = 0

    def add(self, edits: pa.Table | pa.RecordBatch) -> None:
        """Add valid edits (rows with :data:`EDIT_COLUMNS`)."""
        if not edits.num_rows:
            return
        upd = updates(edits)
        self._parts.append(upd)
        self._pending += upd.num_rows
        if self._pending >= self.fold_every_rows:
            self._parts = [fold(self._parts)]
            self._pending = 0

    def result(self) -> pa.Table | None:
        """The fold of everything added (None: nothing was)."""
        return fold(self._parts) if self._parts else None


def fold_all(edits: Iterable[pa.Table | pa.RecordBatch]) -> pa.Table | None:
    """The fold of every table or batch of valid edits in ``edits`` (a :class:`Folder`'s bounded memory);
    None when there were none."""
    folder = Folder()
    for e in edits:
        folder.add(e)
    return folder.result()


def fold_batches(batches):
    """``mapInArrow`` body: the edits of one partition -> its fold (one batch, or none)."""
    folded = fold_all(batches)
    if folded is not None:
        yield from folded.to_batches()


def fold_to_ipc(edits: Iterable[pa.Table | pa.RecordBatch]):
    """Task body of the driver-side merge: the edits of a task -> its fold as one IPC blob (or none)."""
    folded = fold_all(edits)
    if folded is not None:
        yield to_ipc(folded)


#: a task's fold crosses the JVM to the driver compressed: about a third of the bytes, and
#: faster to write than uncompressed (measured on the folds of 10^7 edits, docs/performance.md)
IPC_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def to_ipc(table: pa.Table) -> bytes:
    """A table as (LZ4-compressed) Arrow IPC stream bytes (a task's fold on its way to the driver)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=IPC_OPTIONS) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(blob: bytes) -> pa.Table:
    """The table of :func:`to_ipc` bytes."""
    return pa.ipc.open_stream(blob).read_all()


# --- 3. resolve -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Resolved:
    """The outcome of :func:`resolve`.

    Attributes:
        image: the surviving inodes, image columns, sorted by ``inode_id``.
        history: every inode that ever existed (:data:`HISTORY_SCHEMA`).
        dangling: inode ids whose final parent chain ends at a missing inode.
        max_inode_id: the highest id of any inode that ever existed (None: none).
    """

    image: pa.Table
    history: pa.Table
    dangling: np.ndarray
    max_inode_id: int | None


def _positions(ids: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``wanted`` is in the sorted unique ``ids``: ``(positions, found)``.

    Inode ids are dense (allocated one after another), so a direct table over
    their range is the fast way; sparse ids fall back to a binary search.
    """
    n = len(ids)
    if not n:
        return np.zeros(len(wanted), np.int64), np.zeros(len(wanted), bool)
    lo, hi = int(ids[0]), int(ids[-1])
    if hi - lo <= 4 * n + (1 << 20):
        table = np.full(hi - lo + 1, -1, dtype=np.int64)
        table[ids - lo] = np.arange(n)
        inside = (wanted >= lo) & (wanted <= hi)
        pos = np.where(inside, table[np.clip(wanted - lo, 0, hi - lo)], -1)
        return np.maximum(pos, 0), pos >= 0
    pos = np.searchsorted(ids, wanted)
    found = (pos < n) & (ids[np.minimum(pos, n - 1)] == wanted)
    return np.where(found, pos, 0), found


def resolve(folded: pa.Table) -> Resolved:
    """Mark removed subtrees and build the image (step 3).

    Args:
        folded: one :func:`fold` of the base image's and all the edits' updates.

    Raises:
        FoldError: the parent links do not reach the root (a cycle).
    """
    existed = folded.filter(pc.is_valid(folded.column("type")))
    ids = _np(existed.column("inode_id"))
    n = len(ids)
    parent = _np(existed.column("parent_id"), 0)
    removed = _np(existed.column("removed_txid"), NO_TXID)
    # anc: index of the next ancestor to look at; -1 = the root reached (or the chain stopped)
    pidx, found = _positions(ids, parent)
    dead = removed.copy()
    # a removed inode stops where it is (its own removal is its death); the others climb
    dangling = (parent != 0) & ~found & (dead == NO_TXID)
    anc = np.where(found & (dead == NO_TXID), pidx, -1)
    for _round in range(MAX_POINTER_JUMPING_ROUNDS):
        moving = np.flatnonzero(anc >= 0)
        if not len(moving):
            break
        p = anc[moving]
        # synchronous round: read the previous round's values of the ancestors
        p_dead, p_anc, p_dangling = dead[p], anc[p], dangling[p]
        dead[moving] = p_dead
        dangling[moving] |= p_dangling
        # a dead ancestor's anc is -1 (dead nodes never climb), so a node that just
        # inherited a death stops too
        anc[moving] = p_anc
    else:
        raise FoldError(f"parent links do not reach the root after {MAX_POINTER_JUMPING_ROUNDS} "
                        f"pointer-jumping rounds: the edits form a cycle (inodes "
                        f"{ids[anc >= 0][:5].tolist()})")
    alive = dead == NO_TXID
    image_cols = {"inode_id": existed.column("inode_id")}
    image_cols.update({a: existed.column(a) for a in ATTR_NAMES})
    everything = pa.table(image_cols)
    image = everything.filter(pa.array(alive & ~dangling))
    history = everything.append_column("created_txid", existed.column("created_txid")) \
        .append_column("dead_txid", pa.array(dead, mask=dead == NO_TXID))
    return Resolved(image=image, history=history.cast(HISTORY_SCHEMA),
                    dangling=ids[dangling], max_inode_id=int(ids[-1]) if n else None)


__all__ = ["ATTRS", "ATTR_NAMES", "EDIT_COLUMNS", "FOLD_SCHEMA", "UPDATES_SCHEMA", "HISTORY_SCHEMA",
           "MAX_POINTER_JUMPING_ROUNDS", "NO_TXID", "FoldError", "Resolved", "updates", "image_updates",
           "as_fold_rows", "fold", "Folder", "FOLD_EVERY_ROWS", "fold_all", "fold_batches", "fold_to_ipc", "to_ipc", "from_ipc", "resolve"]
