"""The inode table: every inode's fields in flat arrays, in inode-id order, shared copy-on-write with checkpoints.

Why: a NameNode holds every inode in memory. As one Python object each (its slots, its id and times as int
objects, an entry in an id -> object dict) an inode cost ~380 B, was one more object for every full collection of
the garbage collector to scan (seconds at 10^7 inodes), and a checkpoint had to copy the whole tree into Python
lists on the event loop. Here an inode is a row of typed arrays (8 B per int field, 4 B for its attributes) plus
its name, the one str object its parent directory's children dict also keys on: ~200 B per file in all and no
object the collector tracks; an image is read and written by whole columns; and a checkpoint takes a snapshot in
O(chunks) that a thread serialises while the event loop goes on applying edits.

Theory of operation:

* A row is (id, parent, name, attrs, mtime, atime, length). ``attrs`` indexes :attr:`InodeTable.attr_list`, the
  distinct :class:`Attrs` tuples (is_dir, permission, owner, group, replication, block size), each stored once (a
  namespace has few; a row changes its tuple, never the tuple itself). Index 0 (:data:`DEAD`) marks a deleted row.
* Rows live in chunks of at most ``chunk_rows`` rows, ids increasing within a chunk and from chunk to chunk.
  ``_firsts[i]`` is chunk i's first id (alive or dead), so ``bisect`` finds the chunk of an id; a chunk whose
  ids are consecutive (``dense``) finds the row by subtraction, another by ``bisect``. A new id above every id
  held (the namespace hands them out in increasing order, its invariant 3) is appended to the last chunk.
* Deleting a row marks it dead; a chunk whose dead rows reach half of it is rewritten without them (merged into
  its predecessor when both fit in one chunk), so memory follows the live rows, not every id ever handed out.
* Copy on write: :meth:`InodeTable.snapshot` starts a new generation and keeps the chunks as they are; a chunk
  of an older generation is copied before its next change (invariant 3), so the snapshot's rows never change and
  a thread can read them while the event loop applies new edits.

Pure: no I/O, no clock; the image module turns a :class:`TableSnapshot` into Parquet and Parquet batches into
:meth:`InodeTable.load_rows` calls.

Invariants:

1. Ids strictly increase along the chunks and within each; ``_firsts[i] == chunks[i].ids[0]``; no chunk is empty.
2. ``len(table)`` counts the rows whose attrs are not DEAD; a chunk's ``dead`` counts its dead rows, always less
   than half of its rows after a change returns.
3. A chunk of a generation older than the table's is never changed (a snapshot holds it).
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left, bisect_right
from typing import Iterator, NamedTuple, Sequence

#: the attrs index of a deleted row
DEAD = 0
#: rows per chunk: a copy-on-write copy or a compaction moves at most this many rows (~0.4 MB)
CHUNK_ROWS = 8192


class Attrs(NamedTuple):
    """What inodes share: one tuple per distinct combination, stored once in the table."""

    is_dir: bool
    perm: int
    owner: str
    group: str
    replication: int
    block_size: int


#: the fields of a row in a chunk's ``vals`` (``W`` int64 values per row, after its id in ``ids``)
PARENT, ATTRS, MTIME, ATIME, LENGTH = range(5)
W = 5
#: one row's ``vals`` as bytes in the arrays' own layout (one ``frombytes`` appends a row: 0.14 µs, where
#: ``extend`` of a tuple takes 0.4 µs and five ``append`` calls 0.28 µs)
_pack_row = struct.Struct("=5q").pack


class _Chunk:
    """Up to ``chunk_rows`` consecutive rows (module docstring): their ids (``bisect`` looks them up), their
    other int fields interleaved in one array (``W`` per row: one ``extend`` appends a row) and their names."""

    __slots__ = ("ids", "vals", "names", "dead", "gen", "dense")

    def __init__(self, gen: int, ids: array, vals: array, names: list, dead: int = 0,
                 dense: bool | None = None) -> None:
        self.ids = ids
        self.vals = vals
        self.names = names
        self.dead = dead
        self.gen = gen
        self.dense = (ids[-1] - ids[0] == len(ids) - 1) if dense is None else dense

    @classmethod
    def empty(cls, gen: int) -> "_Chunk":
        return cls(gen, array("q"), array("q"), [], 0, True)

    def copy(self, gen: int) -> "_Chunk":
        return _Chunk(gen, self.ids[:], self.vals[:], self.names[:], self.dead, self.dense)

    def live_only(self, gen: int) -> "_Chunk | None":
        """This chunk without its dead rows (None when none is left)."""
        vals = self.vals
        keep = [k for k in range(len(self.ids)) if vals[k * W + ATTRS] != DEAD]
        if not keep:
            return None
        out = array("q")
        for k in keep:
            out.extend(vals[k * W:k * W + W])
        ids, names = self.ids, self.names
        return _Chunk(gen, array("q", [ids[k] for k in keep]), out, [names[k] for k in keep], 0)


class TableSnapshot:
    """The rows of a table at one instant (copy on write: nothing here changes again, invariant 3).

    Attributes:
        chunks: ``(ids, parents, names, attrs, mtimes, atimes, lengths)`` per chunk, in id order; dead rows
            (attrs :data:`DEAD`, name None) are still in them.
        attr_list: the attrs tuples the ``attrs`` indexes name (index 0: None, the dead marker).
        rows: the live rows in all.
    """

    def __init__(self, chunks: list[_Chunk], attr_list: list, rows: int) -> None:
        self._chunks = chunks
        self.attr_list = attr_list
        self.rows = rows

    @property
    def chunks(self) -> Iterator[tuple[array, array, list, array, array, array, array]]:
        """``(ids, parents, names, attrs, mtimes, atimes, lengths)`` of each chunk in id order, each a column
        of its own (copied out of the chunk's interleaved fields when asked for); dead rows (attrs
        :data:`DEAD`, name None) are in them too."""
        for c in self._chunks:
            v = c.vals
            yield c.ids, v[PARENT::W], c.names, v[ATTRS::W], v[MTIME::W], v[ATIME::W], v[LENGTH::W]


class InodeTable:
    """The rows of every inode (module docstring).

    Args:
        chunk_rows: rows per chunk (tests use small chunks to exercise splits and compaction).
    """

    def __init__(self, chunk_rows: int = CHUNK_ROWS) -> None:
        self.chunk_rows = chunk_rows
        #: attrs index -> Attrs (index 0: the dead marker)
        self.attr_list: list = [None]
        self._attr_index: dict[Attrs, int] = {}
        self._chunks: list[_Chunk] = []
        self._firsts: list[int] = []
        self._gen = 0
        self._live = 0
        #: the last chunk while it is of this generation and not full (``add``'s fast path), and its last id;
        #: None after any change that could replace or fill it
        self._tail: _Chunk | None = None
        self._tail_last = 0

    # ------------------------------------------------------------------ attrs
    def attrs_index(self, attrs: tuple) -> int:
        """The index of ``attrs`` (an :class:`Attrs` or a plain tuple of its fields; added on first use)."""
        i = self._attr_index.get(attrs)  # type: ignore[call-overload]
        if i is None:
            a = Attrs(*attrs)
            i = self._attr_index[a] = len(self.attr_list)
            self.attr_list.append(a)
        return i

    # ----------------------------------------------------------------- lookup
    def __len__(self) -> int:
        return self._live

    def _find(self, iid: int) -> tuple[int, int]:
        """(chunk index, row) of the live row of ``iid``, or (-1, -1)."""
        ci = bisect_right(self._firsts, iid) - 1
        if ci < 0:
            return -1, -1
        ch = self._chunks[ci]
        ids = ch.ids
        if ch.dense:
            pos = iid - ids[0]
            if pos >= len(ids) or ch.vals[pos * W + ATTRS] == DEAD:
                return -1, -1
            return ci, pos
        pos = bisect_left(ids, iid)
        if pos == len(ids) or ids[pos] != iid or ch.vals[pos * W + ATTRS] == DEAD:
            return -1, -1
        return ci, pos

    def __contains__(self, iid: object) -> bool:
        return type(iid) is int and self._find(iid)[0] >= 0

    def attrs(self, iid: int) -> Attrs | None:
        """The attrs of a live inode, or None."""
        ci, pos = self._find(iid)
        if ci < 0:
            return None
        return self.attr_list[self._chunks[ci].vals[pos * W + ATTRS]]

    def get(self, iid: int) -> tuple[int, str, Attrs, int, int, int] | None:
        """``(parent, name, attrs, mtime, atime, length)`` of a live inode, or None."""
        ci, pos = self._find(iid)
        if ci < 0:
            return None
        ch = self._chunks[ci]
        parent, a, mtime, atime, length = ch.vals[pos * W:pos * W + W]
        return parent, ch.names[pos], self.attr_list[a], mtime, atime, length

    def parent_name(self, iid: int) -> tuple[int, str] | None:
        """``(parent, name)`` of a live inode, or None."""
        ci, pos = self._find(iid)
        if ci < 0:
            return None
        ch = self._chunks[ci]
        return ch.vals[pos * W + PARENT], ch.names[pos]

    def parent(self, iid: int) -> int | None:
        ci, pos = self._find(iid)
        return None if ci < 0 else self._chunks[ci].vals[pos * W + PARENT]

    def max_id(self) -> int:
        """The highest id held (alive or dead), 0 for an empty table."""
        return self._chunks[-1].ids[-1] if self._chunks else 0

    def ids(self) -> Iterator[int]:
        """The live ids in increasing order."""
        for ch in self._chunks:
            for iid, a in zip(ch.ids, ch.vals[ATTRS::W]):
                if a != DEAD:
                    yield iid

    def rows(self) -> Iterator[tuple[int, int, str, Attrs, int, int, int]]:
        """``(id, parent, name, attrs, mtime, atime, length)`` of every live row, in id order."""
        al = self.attr_list
        for ch in self._chunks:
            v = ch.vals
            for iid, p, n, a, m, t, ln in zip(ch.ids, v[PARENT::W], ch.names, v[ATTRS::W], v[MTIME::W],
                                              v[ATIME::W], v[LENGTH::W]):
                if a != DEAD:
                    yield iid, p, n, al[a], m, t, ln

    # ---------------------------------------------------------------- changes
    def _writable(self, ci: int) -> _Chunk:
        """Chunk ``ci``, copied first if a snapshot holds it (invariant 3)."""
        ch = self._chunks[ci]
        if ch.gen != self._gen:
            ch = self._chunks[ci] = ch.copy(self._gen)
            self._tail = None
        return ch

    def _live_pos(self, iid: int) -> tuple[_Chunk, int]:
        ci, pos = self._find(iid)
        if ci < 0:
            raise KeyError(iid)
        return self._writable(ci), pos

    def set_mtime(self, iid: int, mtime: int) -> None:
        """Raises KeyError: no live row ``iid`` (so do the other setters)."""
        ch, pos = self._live_pos(iid)
        ch.vals[pos * W + MTIME] = mtime

    def set_atime(self, iid: int, atime: int) -> None:
        ch, pos = self._live_pos(iid)
        ch.vals[pos * W + ATIME] = atime

    def set_attrs(self, iid: int, attrs: Attrs) -> None:
        i = self.attrs_index(attrs)
        ch, pos = self._live_pos(iid)
        ch.vals[pos * W + ATTRS] = i

    def set_length(self, iid: int, length: int) -> None:
        ch, pos = self._live_pos(iid)
        ch.vals[pos * W + LENGTH] = length

    def move(self, iid: int, parent: int, name: str) -> None:
        """A rename: the row's new parent and name."""
        ch, pos = self._live_pos(iid)
        ch.vals[pos * W + PARENT] = parent
        ch.names[pos] = name

    def add(self, iid: int, parent: int, name: str, attrs: tuple, mtime: int, atime: int, length: int,
            parent_mtime: int | None = None) -> None:
        """Add the row of ``iid`` (not live; a dead row of that id is replaced), and set its parent's mtime to
        ``parent_mtime`` when given (what a create or mkdir does, in one call: the replay's hot path).

        Raises:
            KeyError: ``parent_mtime`` given and no live row ``parent`` (nothing was added).
        """
        a = self._attr_index.get(attrs)  # type: ignore[call-overload]
        if a is None:
            a = self.attrs_index(attrs)
        if parent_mtime is not None:  # _find, inline (the hot path of a replay)
            ci = bisect_right(self._firsts, parent) - 1
            pch = self._chunks[ci] if ci >= 0 else None
            if pch is None:
                raise KeyError(parent)
            if pch.dense:
                pos = parent - pch.ids[0]
                if pos >= len(pch.ids):
                    raise KeyError(parent)
            else:
                pos = bisect_left(pch.ids, parent)
                if pos == len(pch.ids) or pch.ids[pos] != parent:
                    raise KeyError(parent)
            pos = pos * W
            if pch.vals[pos + ATTRS] == DEAD:
                raise KeyError(parent)
            if pch.gen != self._gen:
                pch = self._writable(ci)
            pch.vals[pos + MTIME] = parent_mtime
        tail = self._tail
        if tail is not None and iid > self._tail_last:  # the last chunk, writable and not full
            tail.ids.append(iid)
            tail.vals.frombytes(_pack_row(parent, a, mtime, atime, length))
            tail.names.append(name)
            if iid != self._tail_last + 1:
                tail.dense = False
            self._tail_last = iid
            self._live += 1
            if len(tail.ids) >= self.chunk_rows:
                self._tail = None
            return
        chunks = self._chunks
        if not chunks or iid > chunks[-1].ids[-1]:
            ch = chunks[-1] if chunks else None
            if ch is not None and len(ch.ids) < self.chunk_rows:
                if ch.gen != self._gen:
                    ch = self._writable(len(chunks) - 1)
                if ch.dense and iid != ch.ids[-1] + 1:
                    ch.dense = False
            else:
                ch = _Chunk.empty(self._gen)
                chunks.append(ch)
                self._firsts.append(iid)
            ch.ids.append(iid)
            ch.vals.frombytes(_pack_row(parent, a, mtime, atime, length))
            ch.names.append(name)
            self._live += 1
            if len(ch.ids) < self.chunk_rows:
                self._tail, self._tail_last = ch, iid
            return
        self._insert(iid, parent, name, a, mtime, atime, length)

    def _insert(self, iid: int, parent: int, name: str, a: int, mtime: int, atime: int, length: int) -> None:
        """An id below the highest held: into its chunk, in order (rare: ids are handed out increasing)."""
        self._tail = None
        ci = max(0, bisect_right(self._firsts, iid) - 1)
        ch = self._writable(ci)
        pos = bisect_left(ch.ids, iid)
        if pos < len(ch.ids) and ch.ids[pos] == iid:  # a dead row of this id
            assert ch.vals[pos * W + ATTRS] == DEAD, f"inode table: row {iid} is live"
            ch.dead -= 1
            ch.vals[pos * W:pos * W + W] = array("q", (parent, a, mtime, atime, length))
            ch.names[pos] = name
        else:
            ch.ids.insert(pos, iid)
            ch.vals[pos * W:pos * W] = array("q", (parent, a, mtime, atime, length))
            ch.names.insert(pos, name)
            ch.dense = ch.ids[-1] - ch.ids[0] == len(ch.ids) - 1
            self._firsts[ci] = ch.ids[0]
            if len(ch.ids) > self.chunk_rows:
                self._split(ci)
        self._live += 1

    def _split(self, ci: int) -> None:
        ch = self._chunks[ci]
        h = len(ch.ids) // 2
        lo = _Chunk(self._gen, ch.ids[:h], ch.vals[:h * W], ch.names[:h],
                    sum(1 for a in ch.vals[ATTRS:h * W:W] if a == DEAD))
        hi = _Chunk(self._gen, ch.ids[h:], ch.vals[h * W:], ch.names[h:], ch.dead - lo.dead)
        self._chunks[ci:ci + 1] = [lo, hi]
        self._firsts[ci:ci + 1] = [lo.ids[0], hi.ids[0]]
        for k in (ci + 1, ci):  # a half may hold most of the dead rows (invariant 2)
            if self._chunks[k].dead * 2 >= len(self._chunks[k].ids):
                self._compact(k)

    def delete(self, iid: int) -> None:
        """Mark the row of ``iid`` dead (compacting its chunk when half of it is dead).

        Raises:
            KeyError: no live row ``iid``.
        """
        self._tail = None
        ci, pos = self._find(iid)
        if ci < 0:
            raise KeyError(iid)
        ch = self._writable(ci)
        ch.vals[pos * W + ATTRS] = DEAD
        ch.names[pos] = None
        ch.dead += 1
        self._live -= 1
        if ch.dead * 2 >= len(ch.ids):
            self._compact(ci)

    def _compact(self, ci: int) -> None:
        """Rewrite chunk ``ci`` without its dead rows, dropping it when empty and merging it into its predecessor
        when both fit in one chunk (invariants 1, 2)."""
        self._tail = None
        ch = self._chunks[ci].live_only(self._gen)
        if ch is None:
            del self._chunks[ci]
            del self._firsts[ci]
            return
        if ci > 0 and len(self._chunks[ci - 1].ids) + len(ch.ids) <= self.chunk_rows:
            prev = self._writable(ci - 1)
            dense = prev.dense and ch.ids[0] == prev.ids[-1] + 1 and ch.dense
            prev.ids.extend(ch.ids)
            prev.vals.extend(ch.vals)
            prev.names.extend(ch.names)
            prev.dense = dense
            del self._chunks[ci]
            del self._firsts[ci]
            return
        self._chunks[ci] = ch
        self._firsts[ci] = ch.ids[0]

    def load_rows(self, ids: array, parents: array, names: list, attrs: array, mtimes: array, atimes: array,
                  lengths: array) -> None:
        """Append rows already known to be in increasing id order above every row held (the image loader and
        the namespace check that), as whole chunks. ``attrs`` are indexes of :attr:`attr_list`, none DEAD."""
        self._tail = None
        n = len(ids)
        if n == 0:
            return
        assert ids[0] > self.max_id(), "inode table: load_rows below the rows held"
        vals = array("q", bytes(8 * W * n))
        for k, col in ((PARENT, parents), (ATTRS, attrs), (MTIME, mtimes), (ATIME, atimes), (LENGTH, lengths)):
            vals[k::W] = col if col.typecode == "q" else array("q", col)
        step = self.chunk_rows
        start = 0
        if self._chunks and len(self._chunks[-1].ids) < step:  # fill the last chunk first
            ch = self._writable(len(self._chunks) - 1)
            take = min(n, step - len(ch.ids))
            dense = ch.dense and ids[0] == ch.ids[-1] + 1
            ch.ids.extend(ids[:take])
            ch.vals.extend(vals[:take * W])
            ch.names.extend(names[:take])
            ch.dense = dense and ch.ids[-1] - ch.ids[0] == len(ch.ids) - 1
            start = take
        while start < n:
            end = min(n, start + step)
            ch = _Chunk(self._gen, ids[start:end], vals[start * W:end * W], names[start:end])
            self._chunks.append(ch)
            self._firsts.append(ch.ids[0])
            start = end
        self._live += n

    # --------------------------------------------------------------- snapshot
    def snapshot(self) -> TableSnapshot:
        """The rows as they are now, for a thread to read while the table changes (copy on write)."""
        self._tail = None
        self._gen += 1
        return TableSnapshot(list(self._chunks), list(self.attr_list), self._live)

    def check(self) -> None:
        """Invariants 1 and 2 (tests).

        Raises:
            AssertionError: naming the first one broken.
        """
        prev = 0
        live = 0
        for ci, ch in enumerate(self._chunks):
            n = len(ch.ids)
            assert n > 0, f"chunk {ci} is empty"
            assert self._firsts[ci] == ch.ids[0], f"chunk {ci}: first {self._firsts[ci]} != {ch.ids[0]}"
            assert len(ch.names) == n and len(ch.vals) == n * W, f"chunk {ci}: columns of other lengths than {n}"
            for iid in ch.ids:
                assert iid > prev, f"chunk {ci}: id {iid} after {prev}"
                prev = iid
            dead = sum(1 for a in ch.vals[ATTRS::W] if a == DEAD)
            assert dead == ch.dead, f"chunk {ci}: {dead} dead rows, counted {ch.dead}"
            assert dead * 2 < n, f"chunk {ci}: {dead} of {n} rows dead"
            if ch.dense:
                assert ch.ids[-1] - ch.ids[0] == n - 1, f"chunk {ci} is not dense"
            live += n - dead
        assert live == self._live, f"{live} live rows, counted {self._live}"


def column(values: Sequence[int], typecode: str = "q") -> array:
    """An array of ``values`` (the loaders' columns)."""
    return values if isinstance(values, array) and values.typecode == typecode else array(typecode, values)


__all__ = ["InodeTable", "TableSnapshot", "Attrs", "DEAD", "CHUNK_ROWS", "column"]
