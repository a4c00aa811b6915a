"""ClientProtocol on the NameNode: the namespace calls of ``hdfs dfs`` and the DFS client.

Why a module: the client calls are the NameNode's request path, and every one
of them follows the same few rules (below), which are easier to check in one
short file than spread through the daemon. HDFS's ``NameNodeRpcServer`` (its
ClientProtocol half) in front of ``FSNamesystem``.

Theory of operation:

* Identity (``nn.identify``, :mod:`qjournal.security.identity`): with TLS on, the
  caller is its certificate's user with the server's groups, and a call whose
  ``user`` names anyone else is refused (``AuthorizationError``, Hadoop's
  impersonation message); claimed ``groups`` are ignored. With TLS off every call
  carries ``user`` and ``groups`` (simple authentication). Either way the
  identity is decided before the HA gate and turned into the namespace's
  ``CallContext`` with the time of the call.
* A read: the HA gate (``check_operation``: the active, an observer, or the
  standby with stale reads allowed); on an observer the observer read rule
  (``observer_rules.py``: answer, wait for the tailer, or refuse with the
  retriable ``ObserverRetryOnActiveError``); then the pure namespace answers;
  on the active the answer is sent only after the edit log's read barrier
  (invariant 3).
* State ids (HDFS-12943's alignment context). A caller that sends
  ``state_id`` (the highest it has seen; the DFS client always does) gets
  ``{"result": <answer>, "state_id": <txid>}``, and a typed error from the
  namespace carries the ``state_id`` field: the txid of the namespace state the
  answer reflects (invariant 5). A caller that sends none gets the bare answer.
* ``msync``: the active answers its last written txid once it passed the read
  barrier (durable, still the writer); every other state refuses it.
* A write: the HA gate, the retry cache (a retried ``(client_id, call_id)``
  gets its first answer), the safe-mode check (invariant 6), then
  ``FSEditLog.log_edit`` + ``log_sync``; the
  answer (a function of the ops, ``retry_cache.answer_from_ops``) is recorded
  in the retry cache and returned. A retry that arrives while its first
  attempt is still syncing waits for that attempt's answer.

Invariants:

1. A write is answered only after its txid is durable on the journal set
   (FSEditLog invariant 2); an answer is never sent from a NameNode whose
   journal failed (the daemon's invariant 1).
2. One ``(client_id, call_id)`` is applied at most once: by the retry cache
   across calls, by the in-flight table within the time of one call.
3. The active answers a read only once what it read is durable and it was still
   the writer after the read arrived (``FSEditLog.read_barrier``): a client never
   reads what is later lost, nor a state older than a write acknowledged before
   its read began (PRODUCT requirement 7; a fenced old active that still believes
   it is active cannot pass the barrier). A standby serves reads only with
   ``dfs.ha.allow.stale.reads``, which gives up this guarantee by name.
4. A write that logs nothing (refused: no such file, exists, permission; or a
   no-op: mkdirs of an existing directory, delete of a missing path) answered
   from the namespace alone, so it passes the read barrier of invariant 3 first.
   (The whole-cluster simulator found a deposed active, fenced by a no-op fence
   method and not yet told, refusing a rename of a file the new active had
   created: seeds 2156, 2715, 2940.)
5. A state id is never above what the answer may show and never names an edit
   that may be lost: on the active the last written txid when the answer was
   read, made durable by the read barrier (or the write's txid, after its sync)
   before the answer leaves; elsewhere the tailer's applied txid, which is
   committed. So a client that reads on any NameNode with the highest state id
   it has seen reads its writes and never goes back in time.
6. In safe mode (``ha_state`` invariant 4) no write is applied: the check runs
   inside the mutation, under the namespace lock, so a write that passed the HA
   gate before safe mode was entered is refused too. A retry of a write that was
   already answered still gets its answer from the retry cache (as HDFS, whose
   retry cache is consulted before the safe-mode check).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Protocol

from qjournal.errors import InvalidRequestError, ObserverRetryOnActiveError, QJournalError, StandbyError
from qjournal.namenode.editlog import EditLogFatalError, FSEditLog
from qjournal.namenode.ha_state import HAState, OpCategory, check_safe_mode
from qjournal.namenode.namespace import CallContext, Namespace, check_int, check_name
from qjournal.namenode.observer_rules import ReadDecision, observer_read_decision
from qjournal.namenode.retry_cache import RetryCache, answer_from_ops
from qjournal.namenode.state_id import AppliedTxidWaiters
from qjournal.protocol.protocols import CLIENT
from qjournal.security.groups import MAX_GROUPS
from qjournal.security.identity import Caller



class Namesystem(Protocol):
    """What the ClientProtocol needs of its NameNode, and nothing more (HDFS's FSNamesystem; the daemon
    implements it)."""

    #: the namespace (None until the image is loaded)
    namespace: Namespace | None
    #: the open edit log (the active only)
    editlog: FSEditLog | None
    retry_cache: RetryCache
    state: HAState
    #: the journal failure that stops the NameNode, if any
    fatal_error: BaseException | None
    #: "NameNode <id>", for messages
    label: str
    #: safe mode (``ha_state`` invariant 4)
    safe_mode: bool
    clock_ms: Callable[[], int]
    #: durations: retry-cache expiry, the observer's read wait (issue 28, H1: never the wall clock)
    monotonic_ms: Callable[[], int]
    #: dfs.namenode.observer.read.wait.ms
    observer_read_wait_ms: int
    #: woken by the tailer after each applied batch
    applied_waiters: AppliedTxidWaiters

    @property
    def last_applied_txid(self) -> int:
        """The txid of the namespace state (the active: last written)."""

    def check_operation(self, category: OpCategory, method: str) -> None:
        """The HA gate. Raises StandbyError when this NameNode does not serve ``category``."""

    async def identify(self, user: Any, groups: Any) -> Caller:
        """Who calls (module docstring: Identity). Raises AuthenticationError, AuthorizationError."""


def call_context(now_ms: int, user: Any, groups: Any, client_id: Any = b"", call_id: Any = -1) -> CallContext:
    """The namespace's view of a caller (simple authentication: the ``user`` and ``groups`` it sends).

    Raises:
        InvalidRequestError: a malformed user, group list, client id or call id.
    """
    check_name(user, "user")
    if not isinstance(groups, (list, tuple)) or len(groups) > MAX_GROUPS:
        raise InvalidRequestError(f"invalid groups: a list of at most {MAX_GROUPS} names expected")
    for g in groups:
        check_name(g, "group")
    if not isinstance(client_id, bytes) or len(client_id) not in (0, 16):
        raise InvalidRequestError("client_id must be 16 bytes")
    check_int(call_id, "call_id", "call", -(2 ** 63))
    return CallContext(user, tuple(sorted(groups)), client_id or b"\x00" * 16, call_id, now_ms)


class ClientProtocolHandler:
    """The ClientProtocol calls of one NameNode (module docstring).

    Args:
        nn: the NameNode, through the narrow :class:`Namesystem`.
    """

    #: the protocol this handler serves (its calls run concurrently; the RPC server decodes their arguments)
    rpc_protocols = (CLIENT,)

    def __init__(self, nn: Namesystem) -> None:
        self.nn = nn
        #: calls being applied (by retry-cache key) -> the future a retry of theirs waits on (None until one does)
        self._inflight: dict[bytes | tuple[bytes, int], asyncio.Future | None] = {}

    async def _ctx(self, user: Any, groups: Any, client_id: Any = b"", call_id: Any = -1) -> CallContext:
        caller = await self.nn.identify(user, groups)
        return call_context(self.nn.clock_ms(), caller.user, caller.groups, client_id, call_id)

    @staticmethod
    def _reply(answer: Any, server_state_id: int, client_state_id: Any) -> Any:
        """The answer, wrapped with the server's state id for a caller that sent one (invariant 5)."""
        if client_state_id is None:
            return answer
        return {"result": answer, "state_id": server_state_id}

    @staticmethod
    def _check_state_id(client_state_id: Any) -> int | None:
        if client_state_id is None:
            return None
        check_int(client_state_id, "state_id", "call", -1)
        return int(client_state_id)

    async def _write(self, method: str, target: Any, user: Any, groups: Any, client_id: Any, call_id: Any,
                     mutation: Callable[[CallContext], list], state_id: Any = None) -> Any:
        """The write path (module docstring): apply, log and sync one write, answered with the state id
        when the caller sent one. ``target`` is the path the call names (for a refusal in safe mode).
        One coroutine for the whole of it: every create passes here."""
        client_sid = self._check_state_id(state_id)
        nn = self.nn
        sid = 0  # the state id the answer (or the typed error) reflects
        try:
            caller = await nn.identify(user, groups)
            ctx = call_context(nn.clock_ms(), caller.user, caller.groups, client_id, call_id)
            nn.check_operation(OpCategory.WRITE, method)
            retry_cache = nn.retry_cache
            key = retry_cache.key(ctx.client_id, ctx.call_id)  # None: a call never cached
            # entries expire by the monotonic clock: a wall clock that jumps must not expire them (H1)
            now_ms = nn.monotonic_ms()
            hit, answer = retry_cache.lookup_key(key, method, now_ms)
            if hit:  # recorded after its sync: everything up to synced_txid is durable
                sid = nn.editlog.synced_txid if nn.editlog is not None else nn.last_applied_txid
                return self._reply(answer, sid, client_sid)
            if key is not None:
                inflight = self._inflight
                if key in inflight:  # invariant 2: a retry waits for the first attempt's answer
                    first = inflight[key]
                    if first is None:
                        first = inflight[key] = asyncio.get_running_loop().create_future()
                    answer = await asyncio.shield(first)
                    sid = nn.editlog.synced_txid if nn.editlog is not None else nn.last_applied_txid
                    return self._reply(answer, sid, client_sid)
                inflight[key] = None  # a future only once a retry waits (most calls have none)
            try:
                el = nn.editlog
                if el is None:
                    raise StandbyError(f"{nn.label}: not active", state=nn.state.value)
                refused = False
                where = str(target)

                def attempt() -> list:
                    nonlocal sid, refused
                    try:
                        # invariant 6: under the namespace lock, where the op is applied
                        check_safe_mode(nn.safe_mode, OpCategory.WRITE, method, where, nn.label)
                        return mutation(ctx)
                    except QJournalError:  # the namespace refused: nothing was applied
                        # a flag, not the error: a frame of this call holding the error its traceback holds
                        # would be a reference cycle, garbage only the cyclic collector frees
                        refused = True
                        sid = el.last_written_txid  # the state the refusal was read from
                        raise

                try:
                    txid, ops = await el.log_edit(attempt)
                except QJournalError:
                    if refused:  # invariant 4: a refusal is an answer read from the namespace
                        await el.read_barrier()
                    raise
                if ops:
                    await el.log_sync(txid)
                    sid = txid
                else:  # invariant 4: nothing to log (mkdirs of a directory, delete of nothing)
                    sid = el.last_written_txid
                    await el.read_barrier()
                if nn.fatal_error is not None:  # invariant 1
                    raise EditLogFatalError(f"{nn.label}: journal failed: {nn.fatal_error}")
                answer = answer_from_ops(method, ops)
                retry_cache.record_ops(key, method, ops, now_ms)
            except BaseException as e:
                fut = self._inflight.pop(key, None) if key is not None else None
                if fut is not None and not fut.done():
                    fut.set_exception(e)
                    fut.exception()  # retrieved: other waiters get it through shield
                raise
            fut = self._inflight.pop(key, None) if key is not None else None
            if fut is not None:
                fut.set_result(answer)
        except QJournalError as e:
            if client_sid is not None and not isinstance(e, StandbyError) and sid:
                e.fields.setdefault("state_id", sid)
            raise
        return self._reply(answer, sid, client_sid)

    # ------------------------------------------------------- ClientProtocol
    # Every call takes ``state_id``: the highest state id the caller has seen (module docstring);
    # with it the answer comes back as ``{"result", "state_id"}``.
    async def rpc_mkdirs(self, path: str, perm: int = 0o755, create_parent: bool = True,
                         user: str = "", groups: list = (), client_id: bytes = b"", call_id: int = -1,
                         state_id: int | None = None) -> Any:
        """mkdir (``create_parent``: -p).

        Returns:
            True.

        Raises:
            FileAlreadyExistsError, FileNotFoundError_, NotADirectoryError_,
            PermissionDeniedError, InvalidRequestError, StandbyError (not active),
            EditLogFatalError (the journal failed: not durable).
        """
        return await self._write(CLIENT.mkdirs, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.mkdirs(ctx, path, perm, create_parent),
                                 state_id)

    async def rpc_create(self, path: str, perm: int = 0o644, overwrite: bool = False,
                         replication: int = 3, block_size: int = 134217728, user: str = "",
                         groups: list = (), client_id: bytes = b"", call_id: int = -1,
                         state_id: int | None = None) -> Any:
        """Create an empty file.

        Returns:
            Its FileStatus dict.

        Raises:
            as :meth:`rpc_mkdirs`.
        """
        return await self._write(CLIENT.create, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.create(ctx, path, perm, bool(overwrite),
                                                                      replication, block_size),
                                 state_id)

    async def rpc_delete(self, path: str, recursive: bool = False, user: str = "", groups: list = (),
                         client_id: bytes = b"", call_id: int = -1, state_id: int | None = None) -> Any:
        """Delete a file or (``recursive``) a directory tree.

        Returns:
            True.

        Raises:
            FileNotFoundError_, DirectoryNotEmptyError, PermissionDeniedError,
            StandbyError, EditLogFatalError.
        """
        return await self._write(CLIENT.delete, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.delete(ctx, path, bool(recursive)), state_id)

    async def rpc_rename(self, src: str, dst: str, overwrite: bool = False, user: str = "",
                         groups: list = (), client_id: bytes = b"", call_id: int = -1,
                         state_id: int | None = None) -> Any:
        """Rename ``src`` to ``dst`` (into ``dst`` when it is a directory).

        Returns:
            True.

        Raises:
            FileNotFoundError_, FileAlreadyExistsError, InvalidRequestError,
            PermissionDeniedError, StandbyError, EditLogFatalError.
        """
        return await self._write(CLIENT.rename, src, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.rename(ctx, src, dst, bool(overwrite)), state_id)

    async def rpc_set_permission(self, path: str, perm: int, user: str = "", groups: list = (),
                                 client_id: bytes = b"", call_id: int = -1, state_id: int | None = None) -> Any:
        """chmod. Returns None. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        return await self._write(CLIENT.set_permission, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.set_permission(ctx, path, perm), state_id)

    async def rpc_set_owner(self, path: str, owner: str | None = None, group: str | None = None,
                            user: str = "", groups: list = (), client_id: bytes = b"",
                            call_id: int = -1, state_id: int | None = None) -> Any:
        """chown. Returns None. Raises FileNotFoundError_, PermissionDeniedError, StandbyError."""
        return await self._write(CLIENT.set_owner, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.set_owner(ctx, path, owner, group), state_id)

    async def rpc_set_times(self, path: str, mtime: int = -1, atime: int = -1, user: str = "",
                            groups: list = (), client_id: bytes = b"", call_id: int = -1,
                            state_id: int | None = None) -> Any:
        """Set mtime/atime (-1 = unchanged). Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self._write(CLIENT.set_times, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.set_times(ctx, path, mtime, atime), state_id)

    async def rpc_set_replication(self, path: str, replication: int, user: str = "",
                                  groups: list = (), client_id: bytes = b"", call_id: int = -1,
                                  state_id: int | None = None) -> Any:
        """setrep on a file. Returns None. Raises FileNotFoundError_, InvalidRequestError, PermissionDeniedError."""
        return await self._write(CLIENT.set_replication, path, user, groups, client_id, call_id,
                                 lambda ctx: self.nn.namespace.set_replication(ctx, path, replication), state_id)

    async def _observer_wait(self, method: str, client_state_id: int | None) -> None:
        """Hold a read on an observer until it applied the client's state id (``observer_rules``).

        Raises:
            ObserverRetryOnActiveError: not applied within ``observer_read_wait_ms`` (rule 4).
            StandbyError: the NameNode left the observer state meanwhile.
        """
        nn = self.nn
        limit_ms = nn.observer_read_wait_ms
        t0 = nn.monotonic_ms()
        waited_ms = 0
        while True:
            decision = observer_read_decision(client_state_id, nn.last_applied_txid, waited_ms, limit_ms)
            if decision == ReadDecision.SERVE:
                return
            if decision == ReadDecision.RETRY_ELSEWHERE:
                raise ObserverRetryOnActiveError(
                    f"{nn.label} (observer) has applied txid {nn.last_applied_txid}, behind the client's "
                    f"state id {client_state_id}, after waiting {nn.monotonic_ms() - t0} ms "
                    f"(dfs.namenode.observer.read.wait.ms = {limit_ms}); retry on another NameNode",
                    state=nn.state.value, state_id=nn.last_applied_txid,
                    client_state_id=client_state_id, waited_ms=nn.monotonic_ms() - t0)
            assert client_state_id is not None
            reached = await nn.applied_waiters.wait_for(client_state_id, limit_ms - waited_ms)
            nn.check_operation(OpCategory.READ, method)  # still an observer?
            # not reached: the wait ran out (or no room to park another read): rule 4 decides next
            waited_ms = nn.monotonic_ms() - t0 if reached else limit_ms

    async def _read(self, method: str, user: Any, groups: Any, answer: Callable[[CallContext], Any],
                    state_id: Any = None) -> Any:
        """The read path: the HA gate, the observer rule, the answer, then (active) the read barrier
        (invariants 3 and 5)."""
        nn = self.nn
        client_sid = self._check_state_id(state_id)
        ctx = await self._ctx(user, groups)
        nn.check_operation(OpCategory.READ, method)
        if nn.state == HAState.OBSERVER:
            await self._observer_wait(method, client_sid)
        sid = nn.last_applied_txid  # no await between this and the answer
        try:
            result = answer(ctx)
        except QJournalError as e:
            if client_sid is not None:
                e.fields.setdefault("state_id", sid)
            raise
        el = nn.editlog
        if el is not None and nn.state == HAState.ACTIVE:
            await el.read_barrier()
        return self._reply(result, sid, client_sid)

    async def rpc_get_file_info(self, path: str, user: str = "", groups: list = (),
                                state_id: int | None = None) -> Any:
        """stat.

        Returns:
            The FileStatus dict, or None when the path does not exist.

        Raises:
            PermissionDeniedError, StandbyError (standby without stale reads),
            ObserverRetryOnActiveError (an observer behind the client's state id),
            EditLogFatalError (the active could not pass its read barrier).
        """
        return await self._read(CLIENT.get_file_info, user, groups,
                                lambda ctx: self.nn.namespace.get_file_info(ctx, path),  # type: ignore[union-attr]
                                state_id)

    async def rpc_check_access(self, path: str, access: int, user: str = "", groups: list = (),
                               state_id: int | None = None) -> Any:
        """HDFS checkAccess: None when the caller may ``access`` (READ/WRITE/EXECUTE bits) the path.

        Raises:
            FileNotFoundError_, PermissionDeniedError, InvalidRequestError, StandbyError,
            ObserverRetryOnActiveError, EditLogFatalError.
        """
        return await self._read(CLIENT.check_access, user, groups,
                                lambda ctx: self.nn.namespace.check_access(ctx, path, access),  # type: ignore[union-attr]
                                state_id)

    async def rpc_list_status(self, path: str, user: str = "", groups: list = (),
                              state_id: int | None = None) -> Any:
        """ls. Returns FileStatus dicts sorted by name. Raises FileNotFoundError_, PermissionDeniedError,
        StandbyError, ObserverRetryOnActiveError, EditLogFatalError."""
        return await self._read(CLIENT.list_status, user, groups,
                                lambda ctx: self.nn.namespace.list_status(ctx, path),  # type: ignore[union-attr]
                                state_id)

    async def rpc_get_listing(self, path: str, start_after: str = "", limit: int | None = None,
                              user: str = "", groups: list = (), state_id: int | None = None) -> Any:
        """One batch of ls (HDFS getListing): children after ``start_after``, at most ``limit``.

        Returns:
            ``{"entries": [FileStatus dicts], "remaining": int}``.

        Raises:
            as :meth:`rpc_list_status`, and InvalidRequestError (bad ``start_after`` or ``limit``).
        """
        return await self._read(CLIENT.get_listing, user, groups,
                                lambda ctx: self.nn.namespace.get_listing(  # type: ignore[union-attr]
                                    ctx, path, start_after, limit),
                                state_id)

    async def rpc_get_content_summary(self, path: str, user: str = "", groups: list = (),
                                      state_id: int | None = None) -> Any:
        """du/count. Returns the summary dict. Raises FileNotFoundError_, PermissionDeniedError, StandbyError,
        ObserverRetryOnActiveError, EditLogFatalError."""
        return await self._read(CLIENT.get_content_summary, user, groups,
                                lambda ctx: self.nn.namespace.get_content_summary(ctx, path),  # type: ignore[union-attr]
                                state_id)

    async def rpc_msync(self, user: str = "", groups: list = (), state_id: int | None = None) -> Any:
        """ClientProtocol msync: the active's latest state id (HDFS-13688).

        Returns:
            With ``state_id``: ``{"result": None, "state_id": <txid>}``; without: the txid.
            The txid is the last written one when the call arrived, durable and confirmed
            (the read barrier): a read on an observer with it sees every write acknowledged
            before the msync began.

        Raises:
            StandbyError: not the active (observers and standbys refuse it), EditLogFatalError.
        """
        nn = self.nn
        client_sid = self._check_state_id(state_id)
        await self._ctx(user, groups)
        nn.check_operation(OpCategory.MSYNC, CLIENT.msync)
        el = nn.editlog
        if el is None:
            raise StandbyError(f"{nn.label}: not active", state=nn.state.value)
        sid = el.last_written_txid
        await el.read_barrier()
        return sid if client_sid is None else self._reply(None, sid, client_sid)


__all__ = ["ClientProtocolHandler", "Namesystem", "MAX_GROUPS", "call_context"]
