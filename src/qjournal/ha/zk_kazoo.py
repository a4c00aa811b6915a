"""The kazoo implementation of :class:`~qjournal.ha.zk_client.ZooKeeperClient`, and kazoo-only tools.

Why a module of its own: kazoo runs its own threads and speaks in its own
exception and state types. This is the one place that knows it: every kazoo
operation is issued with its ``*_async`` call and its result is bridged onto the
asyncio loop with ``loop.call_soon_threadsafe``; every connection-state change
and every watch is bridged the same way (contract 1 of ``zk_client``); every
kazoo exception is turned into the typed ``Zk*Error`` tree (contract 2). Nothing
else in qjournal imports kazoo, except the blocking command-line tools here
(``format_zk``, ``expire_session``) and tests that play an intruder.

Invariants:

1. Kazoo threads never touch client state or call user code directly: they only
   schedule calls on the loop.
2. Every operation ends within ``op_timeout_s`` (``ZkOperationTimeoutError``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError, ConnectionClosedError, ConnectionLoss, KazooException, NoAuthError, NodeExistsError,
    NoNodeError, NotEmptyError, SessionExpiredError,
)
from kazoo.protocol.states import KazooState
from kazoo.security import ACL, Id

from qjournal.errors import (
    ElectorError, ZkBadVersionError, ZkConnectionLossError, ZkError, ZkNoAuthError, ZkNodeExistsError,
    ZkNoNodeError, ZkNotEmptyError, ZkOperationTimeoutError, ZkSessionExpiredError,
)
from qjournal.ha.zk_client import Conn, ListenerCallback, WatchCallback, WatchEvent, ZkAcl, ZkStat

__all__ = ["KazooZooKeeper", "format_zk", "expire_session"]

log = logging.getLogger("qjournal.ha.zk_kazoo")

_CONN = {KazooState.CONNECTED: Conn.CONNECTED, KazooState.SUSPENDED: Conn.SUSPENDED,
         KazooState.LOST: Conn.LOST}

#: kazoo exception type -> our typed error (contract 2); order matters for subclasses
_ERRORS: tuple[tuple[type[BaseException], type[ZkError]], ...] = (
    (NoNodeError, ZkNoNodeError), (NodeExistsError, ZkNodeExistsError),
    (BadVersionError, ZkBadVersionError), (NotEmptyError, ZkNotEmptyError), (NoAuthError, ZkNoAuthError),
    (SessionExpiredError, ZkSessionExpiredError), (ConnectionLoss, ZkConnectionLossError),
    (ConnectionClosedError, ZkConnectionLossError),
)


def _kazoo_acls(acls: Any) -> list[ACL] | None:
    if not acls:
        return None
    return [ACL(a.perms, Id(a.id.scheme, a.id.id)) for a in acls]


def typed_error(exc: BaseException, op: str, path: str, session: int | None) -> ZkError:
    """The ``Zk*Error`` for a kazoo exception (anything unknown is a plain :class:`ZkError`)."""
    cls = next((ours for theirs, ours in _ERRORS if isinstance(exc, theirs)), ZkError)
    sid = f"{session:#x}" if session else None
    return cls(f"ZooKeeper {op} {path}: {type(exc).__name__}{': ' + str(exc) if str(exc) else ''} "
               f"(session {sid})", path=path, op=op, session=sid)


class KazooZooKeeper:
    """A :class:`~qjournal.ha.zk_client.ZooKeeperClient` on kazoo.

    Args:
        hosts: the connect string (``h1:p1,h2:p2``).
        session_timeout_ms: the session timeout asked of the server.
        auth: ``[(scheme, credential)]`` added to the session (``ha.zookeeper.auth``).
        default_acl: ACL of created znodes when a call gives none.
        op_timeout_s: deadline of every operation (invariant 2).
        tls: kazoo's TLS options (``ElectorSettings.tls``; {} or None: plain).
    """

    def __init__(self, hosts: str, session_timeout_ms: int, auth: list | None = None,
                 default_acl: Any = None, op_timeout_s: float | None = None, tls: dict | None = None) -> None:
        self.hosts = hosts
        self._op_timeout_s = op_timeout_s or session_timeout_ms / 1000.0
        self._kz = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000.0,
                               auth_data=list(auth or []) or None, default_acl=_kazoo_acls(default_acl),
                               **(tls or {}))
        self._kz.add_listener(self._on_kazoo_state)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = Conn.LOST
        self._session_id: int | None = None
        self._listeners: list[ListenerCallback] = []

    # -- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> Conn:
        return self._state

    @property
    def session_id(self) -> int | None:
        return self._session_id

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return self._kz.client_id

    def add_listener(self, listener: ListenerCallback) -> None:
        self._listeners.append(listener)

    def _call_in_loop(self, fn: Callable, *args: Any) -> None:
        """Kazoo thread: schedule ``fn(*args)`` on the loop (invariant 1)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass  # the loop is shutting down

    def _on_kazoo_state(self, state: KazooState) -> None:
        self._call_in_loop(self._set_state, _CONN[state])

    def _set_state(self, state: Conn) -> None:
        if state is Conn.CONNECTED:
            cid = self._kz.client_id
            self._session_id = cid[0] if cid else None
        self._state = state
        for listener in list(self._listeners):
            listener(state)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, timeout_s: float) -> None:
        """Connect. Raises ZkConnectionLossError: no session within ``timeout_s``."""
        self._loop = asyncio.get_running_loop()
        event = self._kz.start_async()
        ok = await asyncio.to_thread(event.wait, timeout_s)
        if not ok or not self._kz.connected:
            await self.close()
            raise ZkConnectionLossError(f"no ZooKeeper connection to {self.hosts} within {timeout_s}s",
                                        hosts=self.hosts)
        cid = self._kz.client_id
        self._session_id = cid[0] if cid else None
        self._state = Conn.CONNECTED

    async def close(self) -> None:
        """Close the session and the client (blocking kazoo calls run in a thread)."""
        def _stop() -> None:
            try:
                self._kz.stop()
            finally:
                self._kz.close()
        try:
            await asyncio.to_thread(_stop)
        except Exception as e:  # noqa: BLE001 - closing a broken client may fail any way
            log.warning("closing the ZooKeeper client of %s: %r", self.hosts, e)
        self._state = Conn.LOST

    # -- operations ----------------------------------------------------------------------------
    async def _op(self, op: str, path: str, async_result: Any) -> Any:
        """Bridge a kazoo ``IAsyncResult`` to the loop with the op timeout (invariants 1, 2)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def _deliver(ar: Any) -> None:
            if fut.done():
                return
            if ar.successful():
                fut.set_result(ar.value)
            else:
                fut.set_exception(typed_error(ar.exception, op, path, self._session_id))

        async_result.rawlink(lambda ar: self._call_in_loop(_deliver, ar))
        try:
            return await asyncio.wait_for(fut, self._op_timeout_s)
        except asyncio.TimeoutError:
            sid = f"{self._session_id:#x}" if self._session_id else None
            raise ZkOperationTimeoutError(f"ZooKeeper {op} {path}: no answer within {self._op_timeout_s}s "
                                          f"(session {sid})", path=path, op=op, session=sid) from None

    def _watch(self, watch: WatchCallback | None) -> Callable | None:
        if watch is None:
            return None
        return lambda ev: self._call_in_loop(watch, WatchEvent(str(getattr(ev, "type", "NONE")),
                                                               str(getattr(ev, "path", "") or "")))

    async def create(self, path: str, data: bytes, acl: Any = None, ephemeral: bool = False) -> str:
        return await self._op("create", path, self._kz.create_async(path, data, acl=_kazoo_acls(acl),
                                                                    ephemeral=ephemeral))

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, ZkStat]:
        data, st = await self._op("get", path, self._kz.get_async(path, watch=self._watch(watch)))
        return data, ZkStat(st.version, st.ephemeralOwner)

    async def exists(self, path: str, watch: WatchCallback | None = None) -> ZkStat | None:
        st = await self._op("exists", path, self._kz.exists_async(path, watch=self._watch(watch)))
        return None if st is None else ZkStat(st.version, st.ephemeralOwner)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZkStat:
        st = await self._op("set", path, self._kz.set_async(path, data, version=version))
        return ZkStat(st.version, st.ephemeralOwner)

    async def delete(self, path: str, version: int = -1) -> None:
        await self._op("delete", path, self._kz.delete_async(path, version=version))


# ---------------------------------------------------------------- blocking tools (CLI, tests)

def format_zk(quorum: str, znode_dir: str, parent_znode: str, acls: Any = None, auth: list | None = None,
              session_timeout_ms: int = 10000, force: bool = False, timeout_s: float = 15.0,
              tls: dict | None = None) -> str:
    """Create the nameservice znode ``znode_dir`` (``qjournal zkfc -formatZK``). Blocking.

    Args:
        quorum: connect string.
        znode_dir: ``<parent>/<nameservice>``.
        parent_znode: ``ha.zookeeper.parent-znode``.
        acls: ACL of the created znodes; auth: session credentials; tls: kazoo's TLS options.
        force: delete an existing nameservice znode (and its children) first.
        timeout_s: connect deadline.

    Returns:
        A one-line description of what was done.

    Raises:
        ElectorError: the znode exists and ``force`` was not given, or ZooKeeper failed.
    """
    zk = KazooClient(hosts=quorum, timeout=session_timeout_ms / 1000.0,
                     auth_data=list(auth or []) or None, default_acl=_kazoo_acls(acls), **(tls or {}))
    try:
        zk.start(timeout=timeout_s)
    except Exception as e:
        zk.close()
        raise ElectorError(f"cannot connect to ZooKeeper {quorum}: {e}") from e
    try:
        if zk.exists(znode_dir):
            if not force:
                raise ElectorError(f"znode {znode_dir} already exists on {quorum}; "
                                   "use -force to clobber it", path=znode_dir)
            zk.delete(znode_dir, recursive=True)
        zk.ensure_path(parent_znode, acl=_kazoo_acls(acls))
        zk.create(znode_dir, b"", acl=_kazoo_acls(acls), makepath=True)
        return f"created {znode_dir} on {quorum}"
    except KazooException as e:
        raise ElectorError(f"formatting {znode_dir} on {quorum} failed: {e!r}") from e
    finally:
        zk.stop()
        zk.close()


def expire_session(quorum: str, client_id: tuple[int, bytes], timeout_s: float = 10.0) -> None:
    """Force ZooKeeper to expire a session: attach a second client to it, then close that client.

    Blocking; for tests and the chaos harness. Closing a session from any
    connection ends it on the server, so the original owner sees ``LOST`` on its
    next contact (its ephemeral znodes are deleted at once).

    Args:
        quorum: connect string.
        client_id: ``(session id, password)`` from ``ZooKeeperClient.client_id``.
        timeout_s: connect deadline.
    """
    zk = KazooClient(hosts=quorum, client_id=client_id, timeout=timeout_s)
    try:
        zk.start(timeout=timeout_s)
        zk.stop()
    finally:
        zk.close()
