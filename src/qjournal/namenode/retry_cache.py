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

Invariants:

1. An entry is stored only for a call whose ops are durable (the caller records
   after ``log_sync``) or, on the standby, that it read from the journal.
2. Entries expire ``expiry_ms`` after they were recorded; the cache never holds
   more than ``max_entries`` (the oldest go first).
3. Calls without a client id (``NO_CLIENT_ID``) or with a negative call id are
   never cached.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from qjournal.errors import InvariantViolation
from qjournal.namenode.ops import (NO_CLIENT_ID, OP_CREATE, CreateOp, DeleteOp, EditOp, MkdirOp, RenameOp,
                                   SetOwnerOp, SetPermissionOp, SetReplicationOp, SetTimesOp, decode_op)
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
        self._entries: OrderedDict[bytes | tuple[bytes, int], tuple[int, str, Any]] = OrderedDict()
        self.hits = 0
        #: record_op's entries with a constant answer, by method, for the time ``_shared_ms``
        self._shared: dict[str, tuple[int, str, Any]] = {}
        self._shared_ms: int | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def cacheable(client_id: bytes, call_id: int) -> bool:
        """Invariant 3."""
        return bool(client_id) and client_id != NO_CLIENT_ID and call_id >= 0

    def key(self, client_id: bytes, call_id: int) -> bytes | tuple[bytes, int] | None:
        """The entry key of a call, None for a call never cached (invariant 3): the server computes it
        once per write for :meth:`lookup_key`, :meth:`record_key` and its table of calls in flight."""
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
        if e is None or e[1] != method:
            return False, None
        self.hits += 1
        answer = e[2]
        if type(answer) is bytes:  # a create's record body, from record_op
            answer = decode_op(OP_CREATE, answer)
        if isinstance(answer, EditOp):  # recorded by record_op: the answer is built now
            answer = answer_from_ops(method, [answer])
        return True, answer

    def record(self, client_id: bytes, call_id: int, method: str, answer: Any, now_ms: int) -> None:
        """Store the answer of a successful, durable call (invariant 1).

        Raises:
            InvariantViolation: ``answer`` is bytes or an op (those mean "build it from the op" in an
                entry of :meth:`record_op`; no RPC write answers one).
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

    def _store(self, key: bytes | tuple[bytes, int], entry: tuple[int, str, Any]) -> None:
        entries = self._entries
        if key in entries:
            del entries[key]  # a re-recorded call moves to the end (the newest)
        entries[key] = entry
        while len(entries) > self.max_entries:
            entries.popitem(last=False)

    def record_op(self, op: EditOp, now_ms: int, body: bytes | None = None) -> None:
        """Rebuild the entry of the call that logged ``op`` (tailer and replay side).

        A call that logged several ops (``mkdirs -p``) gets the same answer
        from each, so recording each is harmless. Replay records one entry per
        edit and few are ever looked up, so a ``create``'s entry keeps the op's
        record ``body`` when given (one bytes object, which the cyclic garbage
        collector never scans, unlike the op and its fields) or else the op, and
        :meth:`lookup` builds its FileStatus from it (``answer_from_ops``); the
        other methods' answers are constants.
        """
        method = _METHOD_BY_CLASS.get(type(op))
        if method is None:
            return
        key = self.key(op.client_id, op.call_id)
        if key is None:
            return
        if method == CLIENT.create:
            entry: tuple[int, str, Any] = (now_ms, method, op if body is None else body)
        else:  # one entry tuple per (time, method), shared: fewer objects for the garbage collector
            if now_ms != self._shared_ms:
                self._shared_ms, self._shared = now_ms, {}
            entry = self._shared.get(method)  # type: ignore[assignment]
            if entry is None:
                entry = self._shared[method] = (now_ms, method, _CONSTANT_ANSWERS[method])
        self._store(key, entry)

    def expire(self, now_ms: int) -> None:
        """Drop entries recorded more than ``expiry_ms`` before ``now_ms``."""
        limit = now_ms - self.expiry_ms
        while self._entries:
            key, (t, _m, _a) = next(iter(self._entries.items()))
            if t > limit:
                break
            self._entries.popitem(last=False)


__all__ = ["RetryCache", "answer_from_ops", "create_status"]
