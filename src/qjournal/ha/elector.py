"""ActiveStandbyElector: leader election for one nameservice on ZooKeeper, bridged into asyncio.

Why it exists (seed 004, "ActiveStandbyElector实现"): exactly one failover
controller per nameservice may make its NameNode active. ZooKeeper's ordered,
consistent writes and ephemeral znodes give us a lock that disappears with its
owner's session; a persistent *breadcrumb* remembers who was active last, so
that a winner can fence an old active that vanished without cleaning up.

Znodes (``parent`` = ``ha.zookeeper.parent-znode``, default ``/hadoop-ha``)::

    <parent>/<nameservice>/ActiveStandbyElectorLock   ephemeral, data = this node's id/address
    <parent>/<nameservice>/ActiveBreadCrumb           persistent, data = the last active's id/address

Theory of operation:

* kazoo runs its own threads. Every kazoo event (connection state, watch) is
  turned into a wake-up of one asyncio *driver* task with
  ``loop.call_soon_threadsafe``; every ZooKeeper operation is issued with kazoo's
  ``*_async`` calls and its result bridged to an asyncio future. Nothing blocks
  the event loop, and all election decisions are taken in one task, one at a time.
* The driver compares what it wants (``join_election`` / ``quit_election``) with
  what ZooKeeper says (the lock znode and its ``ephemeralOwner``) and acts:
  create the lock, become standby and watch the lock, become active, or release.
  The decisions themselves are the pure, table-tested functions of
  :mod:`qjournal.ha.elector_rules` (``connection_step``, ``lock_step``); this
  module only performs them.
* Winning: read the breadcrumb; if it names another node, ask the owner
  (the ZKFC) to fence it; write the breadcrumb (create, or set with the version
  just read); only then call ``become_active``. If fencing or the transition
  fails, the lock is released and the elector re-joins after
  ``sleep_after_failure_ms``, so another candidate can try (invariant 3).
* Connection ``SUSPENDED`` (kazoo: not yet ``LOST``) -> neutral mode: the elector
  does not assume it still holds the lock and starts no new transition.
  ``CONNECTED`` again with the same session -> the lock is re-checked by its
  ``ephemeralOwner``. ``LOST`` (session expired) -> the ephemeral lock is gone:
  become standby, and re-join with the new session kazoo opens.
* A clean exit of an active that handed over gracefully deletes the breadcrumb
  (``quit_election(need_fence=False)``), so its successor does not fence it.

Invariants:

1. The elector reports ACTIVE only while it holds the lock znode with its current
   session id as ``ephemeralOwner`` (as last seen by the driver).
2. ``become_active`` is called only after the old active named by the breadcrumb
   was fenced (or is this node) and the breadcrumb names this node.
3. A candidate whose fencing or transition failed releases the lock before the
   next candidate can be blocked by it.
4. Kazoo threads never touch elector state: they only schedule wake-ups.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError, KazooException, NoNodeError, NodeExistsError, NotEmptyError,
)
from kazoo.protocol.states import KazooState
from kazoo.security import ACL, Id, Permissions

from qjournal.errors import ConfigError, QJournalError
from qjournal.ha.elector_rules import (
    Conn, ConnAction, ElectorState, LockAction, connection_step, lock_step,
)
from qjournal.util.tasks import cancel_and_wait

__all__ = ["ElectorState", "ElectorCallbacks", "ElectorSettings", "ActiveStandbyElector",
           "parse_zk_acls", "parse_zk_auths", "digest_acl_id", "LOCK_ZNODE", "BREADCRUMB_ZNODE",
           "ElectorError", "format_zk"]

log = logging.getLogger("qjournal.ha.elector")

LOCK_ZNODE = "ActiveStandbyElectorLock"

_CONN = {KazooState.CONNECTED: Conn.CONNECTED, KazooState.SUSPENDED: Conn.SUSPENDED, KazooState.LOST: Conn.LOST}
BREADCRUMB_ZNODE = "ActiveBreadCrumb"


class ElectorError(QJournalError):
    """A ZooKeeper operation of the elector failed (names the znode and session)."""


class ElectorCallbacks(Protocol):
    """What the owner of an elector (the ZKFC) does on election results. All async."""

    async def become_active(self) -> None:
        """Make the local service active. Raise to refuse (the lock is then released)."""

    async def become_standby(self) -> None:
        """Make the local service standby (someone else is, or may become, active)."""

    async def enter_neutral_mode(self) -> None:
        """The ZooKeeper connection is suspended: start nothing new."""

    async def fence_old_active(self, data: bytes) -> None:
        """Fence the node described by the breadcrumb ``data``; raise ``FencingError`` on failure."""


# ---------------------------------------------------------------- ACLs / auth (pure)

_PERM_BITS = {"r": Permissions.READ, "w": Permissions.WRITE, "c": Permissions.CREATE,
              "d": Permissions.DELETE, "a": Permissions.ADMIN}


def _resolve_indirect(value: str, key: str) -> str:
    """Hadoop allows ``@/path/to/file`` for ACL and auth values."""
    value = value.strip()
    if value.startswith("@"):
        path = value[1:]
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError as e:
            raise ConfigError(f"{key}: cannot read {path}: {e}", key=key, path=path) from e
    return value


def parse_zk_acls(value: str, key: str = "ha.zookeeper.acl") -> list[ACL]:
    """Parse a Hadoop ZooKeeper ACL list: ``scheme:id:perms`` entries separated by commas.

    Example: ``digest:zkfc:Hz8yS1r0kC5F5R6s0u0k1cY2bQ0=:cdrwa,world:anyone:r``. The id may
    contain ``:`` (digest ids are ``user:hash``); perms are letters of ``cdrwa``.

    Args:
        value: the configured value (or ``@file``); empty means ``world:anyone:cdrwa``.
        key: the configuration key, for error messages.

    Returns:
        kazoo ``ACL`` objects in the configured order.

    Raises:
        ConfigError: an entry is malformed (names the key and the entry).
    """
    value = _resolve_indirect(value or "", key)
    if not value:
        value = "world:anyone:cdrwa"
    out: list[ACL] = []
    for entry in [e.strip() for e in value.split(",") if e.strip()]:
        first, last = entry.find(":"), entry.rfind(":")
        if first <= 0 or last <= first:
            raise ConfigError(f"{key}: ACL entry {entry!r} is not scheme:id:perms", key=key)
        scheme, ident, perms = entry[:first], entry[first + 1:last], entry[last + 1:]
        bits = 0
        for ch in perms.lower():
            if ch not in _PERM_BITS:
                raise ConfigError(f"{key}: ACL entry {entry!r} has unknown permission {ch!r} "
                                  "(allowed: c d r w a)", key=key)
            bits |= _PERM_BITS[ch]
        if not bits or not ident:
            raise ConfigError(f"{key}: ACL entry {entry!r} has no id or no permissions", key=key)
        out.append(ACL(bits, Id(scheme, ident)))
    return out


def parse_zk_auths(value: str, key: str = "ha.zookeeper.auth") -> list[tuple[str, str]]:
    """Parse ``ha.zookeeper.auth``: ``scheme:credential`` entries separated by commas.

    Returns:
        ``[(scheme, credential)]`` for ``KazooClient(auth_data=...)``.

    Raises:
        ConfigError: an entry has no ``:``.
    """
    value = _resolve_indirect(value or "", key)
    out = []
    for entry in [e.strip() for e in value.split(",") if e.strip()]:
        scheme, sep, cred = entry.partition(":")
        if not sep or not scheme or not cred:
            raise ConfigError(f"{key}: auth entry {entry!r} is not scheme:credential", key=key)
        out.append((scheme, cred))
    return out


def digest_acl_id(user: str, password: str) -> str:
    """The ZooKeeper digest id ``user:base64(sha1(user:password))`` for an ACL entry."""
    h = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(h).decode()}"


# ---------------------------------------------------------------- settings


@dataclass
class ElectorSettings:
    """Where and how to elect (Hadoop keys ``ha.zookeeper.*``)."""

    quorum: str
    nameservice: str
    parent_znode: str = "/hadoop-ha"
    session_timeout_ms: int = 10000
    acls: list = field(default_factory=list)
    auth: list = field(default_factory=list)
    sleep_after_failure_ms: int = 1000
    op_timeout_ms: int = 0  # 0: the session timeout

    @classmethod
    def from_conf(cls, conf, nameservice: str) -> "ElectorSettings":
        """Read ``ha.zookeeper.{quorum,parent-znode,session-timeout.ms,acl,auth}`` and the elector's
        back-off and operation timeout (``ha.failover-controller.*``).

        Raises:
            ConfigError: the quorum is empty or an ACL/auth entry is malformed.
        """
        quorum = (conf.get("ha.zookeeper.quorum") or "").strip()
        if not quorum:
            raise ConfigError("ha.zookeeper.quorum is empty: automatic failover needs ZooKeeper",
                              key="ha.zookeeper.quorum")
        return cls(quorum=quorum, nameservice=nameservice,
                   parent_znode=conf.get("ha.zookeeper.parent-znode") or "/hadoop-ha",
                   session_timeout_ms=conf.get_duration_ms("ha.zookeeper.session-timeout.ms"),
                   acls=parse_zk_acls(conf.get("ha.zookeeper.acl") or ""),
                   auth=parse_zk_auths(conf.get("ha.zookeeper.auth") or ""),
                   sleep_after_failure_ms=conf.get_duration_ms(
                       "ha.failover-controller.sleep-after-failure-to-become-active.ms"),
                   op_timeout_ms=conf.get_duration_ms(
                       "ha.failover-controller.active-standby-elector.zk.op.timeout.ms") or 0)

    @property
    def znode_dir(self) -> str:
        return f"{self.parent_znode.rstrip('/')}/{self.nameservice}"

    @property
    def lock_path(self) -> str:
        return f"{self.znode_dir}/{LOCK_ZNODE}"

    @property
    def breadcrumb_path(self) -> str:
        return f"{self.znode_dir}/{BREADCRUMB_ZNODE}"


def make_kazoo_client(settings: ElectorSettings) -> KazooClient:
    """A KazooClient for these settings (not started)."""
    return KazooClient(hosts=settings.quorum, timeout=settings.session_timeout_ms / 1000.0,
                       auth_data=list(settings.auth) or None,
                       default_acl=list(settings.acls) or None)


def format_zk(settings: ElectorSettings, force: bool = False, timeout_s: float = 15.0) -> str:
    """Create ``<parent>/<nameservice>`` (``qjournal zkfc -formatZK``). Blocking; for the CLI.

    Args:
        settings: quorum, znodes, ACLs, auth.
        force: delete an existing nameservice znode (and its children) first.
        timeout_s: connect deadline.

    Returns:
        A one-line description of what was done.

    Raises:
        ElectorError: the znode exists and ``force`` was not given, or ZooKeeper failed.
    """
    zk = make_kazoo_client(settings)
    try:
        zk.start(timeout=timeout_s)
    except Exception as e:
        zk.close()
        raise ElectorError(f"cannot connect to ZooKeeper {settings.quorum}: {e}") from e
    try:
        path = settings.znode_dir
        if zk.exists(path):
            if not force:
                raise ElectorError(f"znode {path} already exists on {settings.quorum}; "
                                   "use -force to clobber it", path=path)
            zk.delete(path, recursive=True)
        zk.ensure_path(settings.parent_znode, acl=list(settings.acls) or None)
        zk.create(path, b"", acl=list(settings.acls) or None, makepath=True)
        return f"created {path} on {settings.quorum}"
    except KazooException as e:
        raise ElectorError(f"formatting {settings.znode_dir} on {settings.quorum} failed: {e!r}") from e
    finally:
        zk.stop()
        zk.close()


# ---------------------------------------------------------------- the elector


class ActiveStandbyElector:
    """One contender in the election for ``settings.nameservice``.

    Args:
        settings: quorum, znodes, session timeout, ACLs.
        app_data: this node's identity, written into the lock and breadcrumb.
        callbacks: the owner's reactions (see :class:`ElectorCallbacks`).
        name: for logs.
    """

    def __init__(self, settings: ElectorSettings, app_data: bytes, callbacks: ElectorCallbacks,
                 name: str = "") -> None:
        self.settings = settings
        self.app_data = app_data
        self.cb = callbacks
        self.name = name or app_data.decode("utf-8", "replace")
        self.state = ElectorState.INIT
        self.zk: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._wants_election = False
        self._rejoin_at = 0.0          # monotonic time before which we do not try to win
        self._conn_state = KazooState.LOST
        self._session_id: int | None = None
        self._holder_session: int | None = None  # session that created our lock, if we hold it
        self._driver: asyncio.Task | None = None
        self._changed = asyncio.Condition()
        self._step_lock = asyncio.Lock()  # one election decision at a time (driver or quit)
        #: (wall time, event name, details) for logs, status and the failover benchmark
        self.events: list[tuple[float, str, dict]] = []
        self.max_events = 200

    # ------------------------------------------------------------------ public API
    async def start(self, connect_timeout_s: float | None = None) -> None:
        """Connect to ZooKeeper and start the driver task (not yet in the election).

        Raises:
            ElectorError: no connection within ``connect_timeout_s`` (default: 3 session timeouts),
                or the nameservice znode does not exist (run ``zkfc -formatZK``).
        """
        self._loop = asyncio.get_running_loop()
        self.zk = make_kazoo_client(self.settings)
        self.zk.add_listener(self._on_zk_state)  # invariant 4: only schedules wake-ups
        timeout = connect_timeout_s or 3 * self.settings.session_timeout_ms / 1000.0
        event = self.zk.start_async()
        ok = await asyncio.to_thread(event.wait, timeout)
        if not ok or not self.zk.connected:
            await self._close_client()
            raise ElectorError(f"elector {self.name}: no ZooKeeper connection to "
                               f"{self.settings.quorum} within {timeout}s")
        self._conn_state = KazooState.CONNECTED
        self._session_id = self._current_session()
        self._record("zk_connected", session=self._session_hex())
        try:
            parent = await self._op(self.zk.exists_async(self.settings.znode_dir))
        except Exception:
            await self._close_client()
            raise
        if parent is None:
            await self._close_client()
            raise ElectorError(f"elector {self.name}: parent znode {self.settings.znode_dir} does not exist "
                               f"on {self.settings.quorum}; run `qjournal zkfc -formatZK`",
                               path=self.settings.znode_dir)
        self._driver = self._loop.create_task(self._drive(), name=f"elector-{self.name}")
        self._kick()

    def join_election(self) -> None:
        """Enter (or stay in) the election; the driver tries to take the lock."""
        if not self._wants_election:
            self._record("join_election")
        self._wants_election = True
        self._kick()

    async def quit_election(self, need_fence: bool) -> None:
        """Leave the election and release the lock if held.

        Args:
            need_fence: False if the local service was made standby cleanly; the
                breadcrumb is then deleted so the next active does not fence us.
                True leaves the breadcrumb, so the next active fences this node.
        """
        self._record("quit_election", need_fence=need_fence)
        self._wants_election = False
        async with self._step_lock:
            was_active = self.state is ElectorState.ACTIVE
            await self._release(delete_breadcrumb=was_active and not need_fence)
            await self._set_state(ElectorState.INIT)
        self._kick()

    def hold_off(self, delay_ms: int) -> None:
        """Do not try to take the lock for ``delay_ms`` (used by ``cede_active``)."""
        self._rejoin_at = max(self._rejoin_at, time.monotonic() + delay_ms / 1000.0)
        self._kick()

    def clear_hold_off(self) -> None:
        """Forget any :meth:`hold_off` (a graceful failover *to* this node overrides an earlier cede)."""
        self._rejoin_at = 0.0
        self._kick()

    async def read_active_data(self) -> bytes | None:
        """The data of the current lock holder, or None if nobody holds the lock.

        Raises:
            ElectorError: ZooKeeper did not answer.
        """
        try:
            data, _ = await self._op(self.zk.get_async(self.settings.lock_path))
            return data
        except NoNodeError:
            return None

    async def read_breadcrumb(self) -> bytes | None:
        """The data of the breadcrumb, or None."""
        try:
            data, _ = await self._op(self.zk.get_async(self.settings.breadcrumb_path))
            return data
        except NoNodeError:
            return None

    async def wait_for_state(self, states: tuple[ElectorState, ...], timeout_s: float) -> ElectorState:
        """Wait until the elector state is one of ``states``.

        Raises:
            asyncio.TimeoutError: not reached in time.
        """
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.state in states), timeout_s)
        return self.state

    @property
    def session_id(self) -> int | None:
        return self._session_id

    def client_id(self) -> tuple[int, bytes] | None:
        """kazoo's ``(session id, password)`` of the live session (for expiry tests)."""
        return self.zk.client_id if self.zk is not None else None

    async def close(self, delete_breadcrumb: bool = False) -> None:
        """Leave the election and close the ZooKeeper session.

        Args:
            delete_breadcrumb: delete our breadcrumb (only after a clean hand-over).
        """
        if self._closed:
            return
        self._wants_election = False
        try:
            if self.zk is not None and self._conn_state == KazooState.CONNECTED:
                await asyncio.wait_for(self._release(delete_breadcrumb=delete_breadcrumb),
                                       self._op_timeout_s())
        except Exception as e:
            log.warning("elector %s: release on close failed: %r", self.name, e)
        self._closed = True
        self._kick()
        await cancel_and_wait(self._driver, ignore_errors=True)
        await self._close_client()

    # ------------------------------------------------------------------ kazoo bridge
    def _on_zk_state(self, state: KazooState) -> None:
        """kazoo thread: record nothing, schedule a wake-up (invariant 4)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_zk_state_in_loop, state)
        except RuntimeError:
            pass  # loop shutting down

    def _on_zk_state_in_loop(self, state: KazooState) -> None:
        self._conn_state = state
        if state == KazooState.CONNECTED:
            sid = self._current_session()
            if sid != self._session_id:
                self._record("zk_new_session", session=f"{sid:#x}" if sid else None)
            self._session_id = sid
        self._record(f"zk_{state.lower()}")
        self._kick()

    def _on_watch(self, event: Any) -> None:
        """kazoo thread: a watch on the lock fired."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._on_watch_in_loop, getattr(event, "type", str(event)))
        except RuntimeError:
            pass

    def _on_watch_in_loop(self, event_type: str) -> None:
        self._record("lock_watch", watch_event=str(event_type))
        self._kick()

    def _kick(self) -> None:
        self._wake.set()

    def _current_session(self) -> int | None:
        cid = self.zk.client_id if self.zk is not None else None
        return cid[0] if cid else None

    def _op_timeout_s(self) -> float:
        return (self.settings.op_timeout_ms or self.settings.session_timeout_ms) / 1000.0

    async def _op(self, async_result: Any) -> Any:
        """Bridge a kazoo IAsyncResult to the event loop, with the op timeout."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()

        def _deliver(ar: Any) -> None:
            if fut.done():
                return
            if ar.successful():
                fut.set_result(ar.value)
            else:
                fut.set_exception(ar.exception)

        def _done(ar: Any) -> None:  # kazoo thread
            if loop.is_closed():
                return
            try:
                loop.call_soon_threadsafe(_deliver, ar)
            except RuntimeError:
                pass

        async_result.rawlink(_done)
        try:
            return await asyncio.wait_for(fut, self._op_timeout_s())
        except asyncio.TimeoutError as e:
            raise ElectorError(f"elector {self.name}: ZooKeeper operation timed out after "
                               f"{self._op_timeout_s()}s (session {self._session_hex()})") from e

    def _session_hex(self) -> str | None:
        return f"{self._session_id:#x}" if self._session_id else None

    async def _close_client(self) -> None:
        zk, self.zk = self.zk, None
        if zk is None:
            return

        def _stop() -> None:
            try:
                zk.stop()
            finally:
                zk.close()
        try:
            await asyncio.to_thread(_stop)
        except Exception as e:
            log.warning("elector %s: closing ZooKeeper client: %r", self.name, e)

    # ------------------------------------------------------------------ driver
    async def _drive(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            try:
                async with self._step_lock:
                    await self._step()
            except asyncio.CancelledError:
                raise
            except (KazooException, ElectorError, QJournalError) as e:
                # ZooKeeper hiccup: try again on the next event or shortly after
                self._record("step_error", error=repr(e))
                log.warning("elector %s: %s", self.name, e)
                self._schedule_kick(min(1.0, self.settings.session_timeout_ms / 4000.0))

    def _schedule_kick(self, delay_s: float) -> None:
        assert self._loop is not None
        self._loop.call_later(delay_s, self._kick)

    async def _step(self) -> None:
        """One wake-up: apply the pure rules of ``elector_rules`` to what ZooKeeper says."""
        sid = self._session_id
        conn_action, read_lock = connection_step(_CONN[self._conn_state], self.state,
                                                 self._holder_session, sid)
        if conn_action is ConnAction.ENTER_NEUTRAL:
            await self._set_state(ElectorState.NEUTRAL)
            await self.cb.enter_neutral_mode()
        elif conn_action in (ConnAction.LOSE_LOCK, ConnAction.FORGET_LOCK):
            # session expired or replaced: the ephemeral lock is gone with it
            self._holder_session = None
            if conn_action is ConnAction.LOSE_LOCK:
                self._record("lock_lost_with_session")
                await self._set_state(ElectorState.STANDBY)
                await self.cb.become_standby()
        if not read_lock:
            return
        watch = self._on_watch if self._wants_election else None
        stat = await self._op(self.zk.exists_async(self.settings.lock_path, watch=watch))
        owner = stat.ephemeralOwner if stat is not None else None
        held_off = time.monotonic() < self._rejoin_at
        action = lock_step(self._wants_election, owner, sid, self.state, held_off)
        if action is LockAction.RELEASE:
            # e.g. a quit while the connection was suspended could not delete the lock
            await self._release(delete_breadcrumb=False)
        elif action is LockAction.RESTORE_ACTIVE:
            self._holder_session = sid
            self._record("lock_still_held")
            await self._set_state(ElectorState.ACTIVE)
        elif action is LockAction.BECOME_ACTIVE:
            self._holder_session = sid
            await self._become_active()
        elif action is LockAction.BECOME_STANDBY:
            await self._set_state(ElectorState.STANDBY)
            await self.cb.become_standby()
        elif action is LockAction.WAIT:
            self._schedule_kick(max(0.0, self._rejoin_at - time.monotonic()))
        elif action is LockAction.TRY_CREATE:
            await self._try_create_lock(sid)

    async def _try_create_lock(self, sid: int | None) -> None:
        self._record("lock_free")
        try:
            await self._op(self.zk.create_async(self.settings.lock_path, self.app_data,
                                                acl=list(self.settings.acls) or None,
                                                ephemeral=True))
        except NodeExistsError:
            self._kick()  # lost the race; re-read and watch
            return
        except NoNodeError as e:
            raise ElectorError(f"elector {self.name}: parent znode {self.settings.znode_dir} does not "
                               "exist; run `qjournal zkfc -formatZK`", path=self.settings.znode_dir) from e
        self._holder_session = sid
        self._record("lock_acquired", session=self._session_hex())
        await self._become_active()

    async def _become_active(self) -> None:
        """We hold the lock: fence the old active, write the breadcrumb, go active (invariant 2)."""
        try:
            await self._fence_if_needed()
            await self._write_breadcrumb()
            if self._conn_state != KazooState.CONNECTED or self._holder_session != self._session_id:
                raise ElectorError(f"elector {self.name}: lost the ZooKeeper session while fencing")
            self._record("become_active_start")
            await self.cb.become_active()
            # ACTIVE only once the service really is active, so waiters (graceful failover,
            # tests) never see ACTIVE while the NameNode is still mid-transition
            await self._set_state(ElectorState.ACTIVE)
            self._record("become_active_done")
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._record("become_active_failed", error=repr(e))
            log.warning("elector %s: failed to become active: %s", self.name, e)
            await self._release(delete_breadcrumb=False)  # invariant 3
            await self._set_state(ElectorState.STANDBY)
            self.hold_off(self.settings.sleep_after_failure_ms)
            try:
                await self.cb.become_standby()
            except Exception as e2:
                log.warning("elector %s: become_standby after failure: %r", self.name, e2)

    async def _fence_if_needed(self) -> None:
        try:
            data, _ = await self._op(self.zk.get_async(self.settings.breadcrumb_path))
        except NoNodeError:
            self._record("no_breadcrumb")
            return
        if data == self.app_data:
            self._record("breadcrumb_is_self")
            return
        self._record("fence_start", target=data.decode("utf-8", "replace"))
        await self.cb.fence_old_active(data)
        self._record("fence_done")

    async def _write_breadcrumb(self) -> None:
        path = self.settings.breadcrumb_path
        try:
            _, stat = await self._op(self.zk.get_async(path))
        except NoNodeError:
            stat = None
        if stat is None:
            await self._op(self.zk.create_async(path, self.app_data,
                                                acl=list(self.settings.acls) or None))
        else:
            await self._op(self.zk.set_async(path, self.app_data, version=stat.version))
        self._record("breadcrumb_written")

    async def _release(self, delete_breadcrumb: bool) -> None:
        """Delete our breadcrumb (if asked and ours) and our lock (if ours)."""
        if self.zk is None or self._conn_state != KazooState.CONNECTED:
            self._holder_session = None
            return
        sid = self._session_id
        if delete_breadcrumb:
            try:
                data, stat = await self._op(self.zk.get_async(self.settings.breadcrumb_path))
                if data == self.app_data:
                    await self._op(self.zk.delete_async(self.settings.breadcrumb_path,
                                                        version=stat.version))
                    self._record("breadcrumb_deleted")
            except (NoNodeError, BadVersionError):
                pass
        try:
            stat = await self._op(self.zk.exists_async(self.settings.lock_path))
            if stat is not None and stat.ephemeralOwner == sid:
                await self._op(self.zk.delete_async(self.settings.lock_path, version=stat.version))
                self._record("lock_released")
        except (NoNodeError, BadVersionError, NotEmptyError):
            pass
        self._holder_session = None

    async def _set_state(self, state: ElectorState) -> None:
        if state is self.state:
            return
        old, self.state = self.state, state
        self._record("elector_state", old=old.value, new=state.value)
        async with self._changed:
            self._changed.notify_all()

    def _record(self, event: str, **details: Any) -> None:
        self.events.append((time.time(), event, details))
        if len(self.events) > self.max_events:
            del self.events[: len(self.events) - self.max_events]
        log.info("elector %s: %s %s", self.name, event, details or "",
                 extra={"event": event, "elector": self.name, **details})


def expire_session(quorum: str, client_id: tuple[int, bytes], timeout_s: float = 10.0) -> None:
    """Force ZooKeeper to expire a session: attach a second client to it, then close that client.

    Blocking; for tests and the chaos harness. Closing a session from any
    connection ends it on the server, so the original owner sees ``LOST`` on its
    next contact (its ephemeral znodes are deleted at once).

    Args:
        quorum: connect string.
        client_id: ``(session id, password)`` from ``KazooClient.client_id``.
        timeout_s: connect deadline.
    """
    zk = KazooClient(hosts=quorum, client_id=client_id, timeout=timeout_s)
    try:
        zk.start(timeout=timeout_s)
        zk.stop()
    finally:
        zk.close()


__all__.append("expire_session")
