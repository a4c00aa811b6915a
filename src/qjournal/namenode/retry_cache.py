"""The NameNode retry cache: a retried write gets the first answer instead of running twice.

Why: a client that lost its connection (or whose NameNode failed over) cannot
know whether its ``create`` or ``rename`` was applied. It retries with the same
``(client_id, call_id)``. Without this cache, the retry of a successful
``create`` would fail with "File exists", and a retried ``rename`` could fail
or, worse, act again. HDFS solves it with the RetryCache; so do we.

Theory of operation: every op in the edit log carries the client id and call
id of the call that produced it. The active records the answer of each
successful write under its key. The standby rebuilds the same entries while
tailing: the answer of a write is a pure function of the ops it logged
(:func:`answer_from_ops`), so after a failover the new active answers a retried
call exactly as the old one did (or would have).

Pure: no clock (``now_ms`` is passed in), no asyncio. The server keeps the
futures of calls still in progress.

Memory (what Hadoop keeps too: client id, call id, state, a small payload): an entry is its key (the
16-byte client id and the call id in one bytes object), a slot of a plain dict and of a FIFO ``deque`` (the
expiry order), and its value: for a ``create``, one bytes object packing the FileStatus fields the answer is
rebuilt from (:func:`pack_create`: ~120 B, where the status dict the answer is took ~650 B); for every other
method a tuple ``(time, method, answer)`` shared by all entries of that method recorded in the same ms (their
answers are constants). The values hold no object the cyclic garbage collector tracks.

Invariants:

1. An entry is stored only for a call whose ops are durable (the caller records
   after ``log_sync``) or, on the standby, that it read from the journal.
2. Entries expire ``expiry_ms`` after they were recorded, in the order they were recorded; the cache never
   holds more than ``max_entries`` (the oldest go first).
3. Calls without a client id (``NO_CLIENT_ID``) or with a negative call id are
   never cached.
4. A call's first entry stays: recording the same key again changes nothing (a ``mkdirs -p`` records one
   entry per op it logged, all with the same answer; a call is applied once, client_protocol invariant 2).
"""

from __future__ import annotations

import struct
from collections import deque
from typing import Any

from qjournal.errors import InvariantViolation
from qjournal.namenode.ops import (NO_CLIENT_ID, CreateOp, DeleteOp, EditOp, MkdirOp, RenameOp,
                                   SetOwnerOp, SetPermissionOp, SetReplicationOp, SetTimesOp)
from qjournal.protocol.protocols import CLIENT

#: the RPC method that logs each op class, for rebuilding answers from ops (tailer side)
_METHOD_BY_CLASS: dict[type, str] = {
    MkdirOp: CLIENT.mkdirs, CreateOp: CLIENT.create, DeleteOp: CLIENT.delete, RenameOp: CLIENT.rename,
    SetPermissionOp: CLIENT.set_permission, SetOwnerOp: CLIENT.set_owner, SetTimesOp: CLIENT.set_times,
    SetReplicationOp: CLIENT.set_replication}


def create_status(op: CreateOp) -> dict:
    """The FileStatus a ``create`` answers, built from its op only."""
    return {"path": op.path, "name": op.name, "type": "f", "permission": op.perm,
            "owner": op.owner, "group": op.group, "mtime": op.mtime, "atime": op.atime,
            "replication": op.replication, "block_size": op.block_size, "length": op.length,
            "inode_id": op.inode, "children_num": 0}


def answer_from_ops(method: str, ops: list[EditOp]) -> Any:
    """The RPC answer of a successful write, as a function of its ops (theory of operation).

    Args:
        method: the RPC method (``mkdirs``, ``create``, ...).
        ops: the ops the call logged (possibly none).
    """
    if method == CLIENT.create:
        for op in ops:
            if isinstance(op, CreateOp):
                return create_status(op)
        return None
    if method in (CLIENT.mkdirs, CLIENT.delete, CLIENT.rename):
        return True
    return None


#: RPC method -> its answer where that does not depend on the ops (every method but ``create``)
_CONSTANT_ANSWERS = {m: answer_from_ops(m, []) for m in _METHOD_BY_CLASS.values() if m != CLIENT.create}

#: a create's entry: time, inode, mtime, atime, length, block size (int64), permission, replication (uint16),
#: owner and group (indexes into the cache's table of names), then the path's UTF-8 bytes
_CREATE = struct.Struct(">qqqqqqHHII")


def pack_create(now_ms: int, op: CreateOp, name_index: dict[str, int], names: list[str]) -> bytes:
    """The entry value of a ``create`` (module docstring, "Memory"): what :func:`unpack_create` rebuilds the
    answer from. ``name_index``/``names`` intern the owner and group (a namespace has few)."""
    o = name_index.get(op.owner)
    if o is None:
        o = name_index[op.owner] = len(names)
        names.append(op.owner)
    g = name_index.get(op.group)
    if g is None:
        g = name_index[op.group] = len(names)
        names.append(op.group)
    return _CREATE.pack(now_ms, op.inode, op.mtime, op.atime, op.length, op.block_size, op.perm, op.replication,
                        o, g) + op.path.encode("utf-8", "surrogatepass")


def unpack_create(v: bytes, names: list[str]) -> dict:
    """The FileStatus of a packed ``create`` entry (equal to :func:`create_status` of its op)."""
    _t, inode, mtime, atime, length, bs, perm, rep, o, g = _CREATE.unpack_from(v)
    path = v[_CREATE.size:].decode("utf-8", "surrogatepass")
    return {"path": path, "name": path.rsplit("/", 1)[-1], "type": "f", "permission": perm,
            "owner": names[o], "group": names[g], "mtime": mtime, "atime": atime,
            "replication": rep, "block_size": bs, "length": length, "inode_id": inode, "children_num": 0}


_CREATE_METHOD = CLIENT.create


def _entry_time(v: Any) -> int:
    return _CREATE.unpack_from(v)[0] if type(v) is bytes else v[0]


def _key(client_id: bytes, call_id: int) -> bytes | tuple[bytes, int]:
    """The entry key of a call: its 16-byte client id and 8-byte call id in one bytes object (a
    tuple holds two more objects, which the cyclic garbage collector scans: replay makes one key
    per edit), or the pair for other shapes (never equal to a bytes key)."""
    if len(client_id) == 16 and 0 <= call_id < _CALL_ID_LIMIT:
        return client_id + call_id.to_bytes(8, "big")
    return (client_id, call_id)


_CALL_ID_LIMIT = 2 ** 64


class RetryCache:
    """``(client_id, call_id) -> answer`` with expiry and a size bound (invariant 2).

    Args:
        expiry_ms: ``dfs.namenode.retrycache.expirytime.millis``.
        max_entries: ``qjournal.namenode.retrycache.max-entries``.
    """

    def __init__(self, expiry_ms: int = 600_000, max_entries: int = 1_000_000) -> None:
        self.expiry_ms = expiry_ms
        self.max_entries = max_entries
        #: key -> a packed create (bytes) or ``(time, method, answer)``
        self._entries: dict[bytes | tuple[bytes, int], Any] = {}
        #: the keys in the order they were recorded (invariant 2)
        self._order: deque = deque()
        self.hits = 0
        #: entries with a constant answer, by method, for the time ``_shared_ms``
        self._shared: dict[str, tuple[int, str, Any]] = {}
        self._shared_ms: int | None = None
        #: owners and groups of the packed creates (``pack_create``)
        self._names: list[str] = []
        self._name_index: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def cacheable(client_id: bytes, call_id: int) -> bool:
        """Invariant 3."""
        return bool(client_id) and client_id != NO_CLIENT_ID and call_id >= 0

    def key(self, client_id: bytes, call_id: int) -> bytes | tuple[bytes, int] | None:
        """The entry key of a call, None for a call never cached (invariant 3): the server computes it
        once per write for :meth:`lookup_key`, :meth:`record_ops` and its table of calls in flight."""
        return _key(client_id, call_id) if self.cacheable(client_id, call_id) else None

    def lookup(self, client_id: bytes, call_id: int, method: str, now_ms: int) -> tuple[bool, Any]:
        """``(True, answer)`` for a cached call of the same method, else ``(False, None)``."""
        return self.lookup_key(self.key(client_id, call_id), method, now_ms)

    def lookup_key(self, key: bytes | tuple[bytes, int] | None, method: str, now_ms: int) -> tuple[bool, Any]:
        """:meth:`lookup` by the call's :meth:`key`."""
        if key is None:
            return False, None
        self.expire(now_ms)
        e = self._entries.get(key)
        if e is None:
            return False, None
        if type(e) is bytes:  # a packed create
            if method != CLIENT.create:
                return False, None
            self.hits += 1
            return True, unpack_create(e, self._names)
        if e[1] != method:
            return False, None
        self.hits += 1
        return True, e[2]

    def record(self, client_id: bytes, call_id: int, method: str, answer: Any, now_ms: int) -> None:
        """Store the answer of a successful, durable call (invariant 1).

        Raises:
            InvariantViolation: ``answer`` is bytes or an op (no RPC write answers one).
        """
        self.record_key(self.key(client_id, call_id), method, answer, now_ms)

    def record_key(self, key: bytes | tuple[bytes, int] | None, method: str, answer: Any, now_ms: int) -> None:
        """:meth:`record` by the call's :meth:`key` (None: not cached).

        Raises:
            InvariantViolation: as :meth:`record`.
        """
        if isinstance(answer, (bytes, EditOp)):
            raise InvariantViolation(f"retry cache: {method} answered a {type(answer).__name__}")
        if key is not None:
            self._store(key, (now_ms, method, answer))

    def record_ops(self, key: bytes | tuple[bytes, int] | None, method: str, ops: list[EditOp],
                   now_ms: int) -> None:
        """Store the entry of a successful, durable call by the ops it logged (the active's write path; its
        answer is ``answer_from_ops(method, ops)``, which :meth:`lookup` gives back; invariant 1)."""
        if key is None:
            return
        if method == CLIENT.create:
            for op in ops:
                if type(op) is CreateOp:
                    self._store(key, pack_create(now_ms, op, self._name_index, self._names))
                    return
            self._store(key, (now_ms, method, answer_from_ops(method, ops)))
            return
        self._store(key, self._constant(method, now_ms))

    def _constant(self, method: str, now_ms: int) -> tuple[int, str, Any]:
        """The entry of a method whose answer is a constant: one tuple per (time, method), shared."""
        if now_ms != self._shared_ms:
            self._shared_ms, self._shared = now_ms, {}
        entry = self._shared.get(method)
        if entry is None:
            entry = self._shared[method] = (now_ms, method, _CONSTANT_ANSWERS.get(method))
        return entry

    def _store(self, key: bytes | tuple[bytes, int], entry: Any) -> None:
        entries = self._entries
        if key in entries:  # invariant 4: the first entry stays
            return
        entries[key] = entry
        order = self._order
        order.append(key)
        while len(entries) > self.max_entries:
            del entries[order.popleft()]

    def record_op(self, op: EditOp, now_ms: int, body: bytes | None = None) -> None:
        """Rebuild the entry of the call that logged ``op`` (tailer and replay side).

        A call that logged several ops (``mkdirs -p``) gets the same answer from each (invariant 4: the first
        one stays). ``body`` (the op's record body) is accepted for the tailer's call and not kept: a
        create's entry is packed from the op (module docstring, "Memory").
        """
        method = _METHOD_BY_CLASS.get(type(op))
        if method is None:
            return
        cid, call = op.client_id, op.call_id
        if len(cid) == 16 and 0 <= call < _CALL_ID_LIMIT and cid != NO_CLIENT_ID:  # key(), inline: the replay
            key: Any = cid + call.to_bytes(8, "big")
        else:
            key = self.key(cid, call)
            if key is None:
                return
        entries = self._entries
        if key in entries:  # invariant 4
            return
        if method is _CREATE_METHOD:
            entries[key] = pack_create(now_ms, op, self._name_index, self._names)  # type: ignore[arg-type]
        else:
            entries[key] = self._constant(method, now_ms)
        order = self._order
        order.append(key)
        if len(entries) > self.max_entries:
            del entries[order.popleft()]

    def expire(self, now_ms: int) -> None:
        """Drop entries recorded more than ``expiry_ms`` before ``now_ms`` (invariant 2)."""
        limit = now_ms - self.expiry_ms
        entries, order = self._entries, self._order
        while order:
            key = order[0]
            if _entry_time(entries[key]) > limit:
                break
            order.popleft()
            del entries[key]


__all__ = ["RetryCache", "answer_from_ops", "create_status", "pack_create", "unpack_create"]
