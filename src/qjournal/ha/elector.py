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

* ZooKeeper comes in through the small interface of :mod:`qjournal.ha.zk_client`
  (kazoo in production, :mod:`qjournal.ha.zk_kazoo`; a simulated ZooKeeper in the
  deterministic simulator). Every connection-state change and every watch is
  turned into a wake-up of one asyncio *driver* task; all election decisions are
  taken in that task, one at a time. Time is the event loop's clock, so the
  elector runs on the simulator's virtual time unchanged.
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
* Leaving the election never fails: when the lock cannot be deleted (the
  connection is dying), the elector is out of the election all the same and the
  driver deletes the lock once it is connected again with the same session; if
  the session expires instead, ZooKeeper deletes the ephemeral lock itself
  (invariant 5). This is the fix of the stuck controller (issue 11): a
  ``ConnectionLoss`` escaping ``quit_election`` used to end the health monitor.

Invariants:

1. The elector reports ACTIVE only while it holds the lock znode with its current
   session id as ``ephemeralOwner`` (as last seen by the driver).
2. ``become_active`` is called only after the old active named by the breadcrumb
   was fenced (or is this node) and the breadcrumb names this node.
3. A candidate whose fencing or transition failed releases the lock before the
   next candidate can be blocked by it.
4. ZooKeeper events never run election logic themselves: they only schedule
   wake-ups of the driver.
5. ``quit_election`` raises no ZooKeeper error; afterwards the elector never
   takes the lock until ``join_election``, and a lock it still holds is deleted
   by the driver (``lock_step`` returns ``RELEASE``) or expires with the session.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from qjournal.errors import (ConfigError, ElectorError, QJournalError, ZkBadVersionError, ZkError,
                             ZkNodeExistsError, ZkNoNodeError, ZkNotEmptyError)
from qjournal.ha.elector_rules import ConnAction, ElectorState, LockAction, connection_step, lock_step
from qjournal.ha.zk_client import Conn, Perm, WatchEvent, ZkAcl, ZkId, ZooKeeperClient
from qjournal.util.tasks import cancel_and_wait, spawn

__all__ = ["ElectorState", "ElectorCallbacks", "ElectorSettings", "ActiveStandbyElector",
           "parse_zk_acls", "parse_zk_auths", "digest_acl_id", "zk_tls_options", "LOCK_ZNODE", "BREADCRUMB_ZNODE",
           "ZooKeeperFactory"]

log = logging.getLogger("qjournal.ha.elector")

LOCK_ZNODE = "ActiveStandbyElectorLock"
BREADCRUMB_ZNODE = "ActiveBreadCrumb"


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

_PERM_BITS = {"r": Perm.READ, "w": Perm.WRITE, "c": Perm.CREATE, "d": Perm.DELETE, "a": Perm.ADMIN}


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


def parse_zk_acls(value: str, key: str = "ha.zookeeper.acl") -> list[ZkAcl]:
    """Parse a Hadoop ZooKeeper ACL list: ``scheme:id:perms`` entries separated by commas.

    Example: ``digest:zkfc:Hz8yS1r0kC5F5R6s0u0k1cY2bQ0=:cdrwa,world:anyone:r``. The id may
    contain ``:`` (digest ids are ``user:hash``); perms are letters of ``cdrwa``.

    Args:
        value: the configured value (or ``@file``); empty means ``world:anyone:cdrwa``.
        key: the configuration key, for error messages.

    Returns:
        :class:`~qjournal.ha.zk_client.ZkAcl` entries in the configured order.

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
            bits |= int(_PERM_BITS[ch])
        if not bits or not ident:
            raise ConfigError(f"{key}: ACL entry {entry!r} has no id or no permissions", key=key)
        out.append(ZkAcl(bits, ZkId(scheme, ident)))
    return out


def parse_zk_auths(value: str, key: str = "ha.zookeeper.auth") -> list[tuple[str, str]]:
    """Parse ``ha.zookeeper.auth``: ``scheme:credential`` entries separated by commas.

    Returns:
        ``[(scheme, credential)]``, added to the ZooKeeper session.

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


def zk_tls_options(conf) -> dict:
    """kazoo's TLS keyword arguments from ``dfs.ha.zkfc.client.ssl.enabled`` (Hadoop's key) and the
    process's ``qjournal.rpc.tls.*`` files; {} when off.

    Raises:
        ConfigError: TLS on but the certificate, key or CA is not set (names the key).
    """
    if not conf.get_bool("dfs.ha.zkfc.client.ssl.enabled"):
        return {}
    files = {}
    for arg, key in (("certfile", "qjournal.rpc.tls.cert.file"), ("keyfile", "qjournal.rpc.tls.key.file"),
                     ("ca", "qjournal.rpc.tls.ca.file")):
        files[arg] = conf.get(key)
        if not files[arg]:
            raise ConfigError(f"dfs.ha.zkfc.client.ssl.enabled is true but {key} is not set", key=key)
    return {"use_ssl": True, "verify_certs": True, **files}


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
    #: kazoo's TLS options (``use_ssl``, ``certfile``, ``keyfile``, ``ca``, ``verify_certs``) when
    #: ``dfs.ha.zkfc.client.ssl.enabled``: ZooKeeper's secure client port with this process's
    #: ``qjournal.rpc.tls.*`` certificate; empty: plain
    tls: dict = field(default_factory=dict)

    @classmethod
    def from_conf(cls, conf, nameservice: str) -> "ElectorSettings":
        """Read ``ha.zookeeper.{quorum,parent-znode,session-timeout.ms,acl,auth}``, the elector's
        back-off and operation timeout (``ha.failover-controller.*``) and ZooKeeper TLS
        (``dfs.ha.zkfc.client.ssl.enabled``).

        Raises:
            ConfigError: the quorum is empty, an ACL/auth entry is malformed, or TLS is on without
                the ``qjournal.rpc.tls.*`` certificate, key and CA.
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
                       "ha.failover-controller.active-standby-elector.zk.op.timeout.ms") or 0,
                   tls=zk_tls_options(conf))

    @property
    def znode_dir(self) -> str:
        return f"{self.parent_znode.rstrip('/')}/{self.nameservice}"

    @property
    def lock_path(self) -> str:
        return f"{self.znode_dir}/{LOCK_ZNODE}"

    @property
    def breadcrumb_path(self) -> str:
        return f"{self.znode_dir}/{BREADCRUMB_ZNODE}"


#: ``settings -> ZooKeeperClient`` (not started): kazoo in production, the simulator's ZooKeeper in
#: simulation
ZooKeeperFactory = Callable[[ElectorSettings], ZooKeeperClient]


# ---------------------------------------------------------------- the elector


class ActiveStandbyElector:
    """One contender in the election for ``settings.nameservice``.

    Args:
        settings: quorum, znodes, session timeout, ACLs.
        app_data: this node's identity, written into the lock and breadcrumb.
        callbacks: the owner's reactions (see :class:`ElectorCallbacks`).
        zk_factory: makes the (not yet started) ZooKeeper client from the settings.
        name: for logs.
        wall_clock: wall time for the event timeline (default ``time.time``).
    """

    def __init__(self, settings: ElectorSettings, app_data: bytes, callbacks: ElectorCallbacks,
                 zk_factory: ZooKeeperFactory, name: str = "",
                 wall_clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.app_data = app_data
        self.cb = callbacks
        self.name = name or app_data.decode("utf-8", "replace")
        self.state = ElectorState.INIT
        self._zk_factory = zk_factory
        self._wall_clock = wall_clock
        self.zk: ZooKeeperClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._closed = False
        self._wants_election = False
        self._rejoin_at = 0.0          # loop time before which we do not try to win
        self._session_id: int | None = None
        self._holder_session: int | None = None  # session that created our lock, if we hold it
        self._driver: asyncio.Task | None = None
        self._changed = asyncio.Condition()
        self._step_lock = asyncio.Lock()  # one election decision at a time (driver or quit)
        #: (wall time, event name, details) for logs, status and the failover benchmark
        self.events: list[tuple[float, str, dict]] = []
        self.max_events = 200
        #: called with the exception if the driver task ever dies (the owner fails or restarts)
        self.on_crash: Callable[[BaseException], None] | None = None

    # ------------------------------------------------------------------ public API
    async def start(self, connect_timeout_s: float | None = None) -> None:
        """Connect to ZooKeeper and start the driver task (not yet in the election).

        Raises:
            ElectorError: no connection within ``connect_timeout_s`` (default: 3 session timeouts),
                or the nameservice znode does not exist (run ``zkfc -formatZK``).
        """
        self._loop = asyncio.get_running_loop()
        zk = self.zk = self._zk_factory(self.settings)
        zk.add_listener(self._on_zk_state)  # invariant 4: only schedules wake-ups
        timeout = connect_timeout_s or 3 * self.settings.session_timeout_ms / 1000.0
        try:
            await zk.start(timeout)
            self._session_id = zk.session_id
            parent = await zk.exists(self.settings.znode_dir)
        except ZkError as e:
            await self._close_client()
            raise ElectorError(f"elector {self.name}: no ZooKeeper session on {self.settings.quorum}: "
                               f"{e}") from e
        if parent is None:
            await self._close_client()
            raise ElectorError(f"elector {self.name}: parent znode {self.settings.znode_dir} does not exist "
                               f"on {self.settings.quorum}; run `qjournal zkfc -formatZK`",
                               path=self.settings.znode_dir)
        self._driver = spawn(self._drive(), name=f"elector-{self.name}", on_crash=self._crashed)
        self._kick()

    def _crashed(self, exc: BaseException) -> None:
        if self.on_crash is not None:
            self.on_crash(exc)

    def join_election(self) -> None:
        """Enter (or stay in) the election; the driver tries to take the lock."""
        if not self._wants_election:
            self._record("join_election")
        self._wants_election = True
        self._kick()

    async def quit_election(self, need_fence: bool) -> None:
        """Leave the election and release the lock if held. Never raises a ZooKeeper error.

        Args:
            need_fence: False if the local service was made standby cleanly; the
                breadcrumb is then deleted so the next active does not fence us.
                True leaves the breadcrumb, so the next active fences this node.
        """
        self._record("quit_election", need_fence=need_fence)
        self._wants_election = False
        async with self._step_lock:
            was_active = self.state is ElectorState.ACTIVE
            await self._release_or_defer(delete_breadcrumb=was_active and not need_fence)
            await self._set_state(ElectorState.INIT)
        self._kick()

    def hold_off(self, delay_ms: int) -> None:
        """Do not try to take the lock for ``delay_ms`` (used by ``cede_active``)."""
        self._rejoin_at = max(self._rejoin_at, self._now() + delay_ms / 1000.0)
        self._kick()

    def clear_hold_off(self) -> None:
        """Forget any :meth:`hold_off` (a graceful failover *to* this node overrides an earlier cede)."""
        self._rejoin_at = 0.0
        self._kick()

    async def read_active_data(self) -> bytes | None:
        """The data of the current lock holder, or None if nobody holds the lock.

        Raises:
            ZkError: ZooKeeper did not answer.
        """
        try:
            data, _ = await self._client().get(self.settings.lock_path)
            return data
        except ZkNoNodeError:
            return None

    async def read_breadcrumb(self) -> bytes | None:
        """The data of the breadcrumb, or None.

        Raises:
            ZkError: ZooKeeper did not answer.
        """
        try:
            data, _ = await self._client().get(self.settings.breadcrumb_path)
            return data
        except ZkNoNodeError:
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

    @property
    def wants_election(self) -> bool:
        """Whether the controller asked to take part (``join_election`` since the last ``quit_election``)."""
        return self._wants_election

    @property
    def conn_state(self) -> Conn:
        """The ZooKeeper connection as the driver last saw it."""
        return self.zk.state if self.zk is not None else Conn.LOST

    def client_id(self) -> tuple[int, bytes] | None:
        """``(session id, password)`` of the live session (for expiry tests)."""
        return self.zk.client_id if self.zk is not None else None

    async def close(self, delete_breadcrumb: bool = False) -> None:
        """Leave the election and close the ZooKeeper session.

        Args:
            delete_breadcrumb: delete our breadcrumb (only after a clean hand-over).
        """
        if self._closed:
            return
        self._wants_election = False
        if self.conn_state is Conn.CONNECTED:
            await self._release_or_defer(delete_breadcrumb=delete_breadcrumb)
        self._closed = True
        self._kick()
        await cancel_and_wait(self._driver, ignore_errors=True)
        await self._close_client()

    # ------------------------------------------------------------------ ZooKeeper events
    def _on_zk_state(self, state: Conn) -> None:
        """A connection state change (on the loop): record it and wake the driver (invariant 4)."""
        if state is Conn.CONNECTED and self.zk is not None:
            sid = self.zk.session_id
            if sid != self._session_id:
                self._record("zk_new_session", session=f"{sid:#x}" if sid else None)
            self._session_id = sid
        self._record(f"zk_{state.value.lower()}")
        self._kick()

    def _on_watch(self, event: WatchEvent) -> None:
        """A watch on the lock fired (on the loop): wake the driver (invariant 4)."""
        self._record("lock_watch", watch_event=event.type)
        self._kick()

    def _kick(self) -> None:
        self._wake.set()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _client(self) -> ZooKeeperClient:
        if self.zk is None:
            raise ElectorError(f"elector {self.name}: not connected to ZooKeeper (closed or not started)")
        return self.zk

    def _session_hex(self) -> str | None:
        return f"{self._session_id:#x}" if self._session_id else None

    async def _close_client(self) -> None:
        zk, self.zk = self.zk, None
        if zk is not None:
            await zk.close()

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
            except (ZkError, ElectorError) as e:
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
        conn_action, read_lock = connection_step(self.conn_state, self.state, self._holder_session, sid)
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
        stat = await self._client().exists(self.settings.lock_path, watch=watch)
        owner = stat.ephemeral_owner if stat is not None else None
        held_off = self._now() < self._rejoin_at
        action = lock_step(self._wants_election, owner, sid, self.state, held_off)
        if action is LockAction.RELEASE:
            # e.g. a quit while the connection was dying could not delete the lock (invariant 5)
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
            self._schedule_kick(max(0.0, self._rejoin_at - self._now()))
        elif action is LockAction.TRY_CREATE:
            await self._try_create_lock(sid)

    async def _try_create_lock(self, sid: int | None) -> None:
        self._record("lock_free")
        try:
            await self._client().create(self.settings.lock_path, self.app_data,
                                        acl=list(self.settings.acls) or None, ephemeral=True)
        except ZkNodeExistsError:
            self._kick()  # lost the race; re-read and watch
            return
        except ZkNoNodeError as e:
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
            if self.conn_state is not Conn.CONNECTED or self._holder_session != self._session_id:
                raise ElectorError(f"elector {self.name}: lost the ZooKeeper session while fencing")
            self._record("become_active_start")
            await self.cb.become_active()
            # ACTIVE only once the service really is active, so waiters (graceful failover,
            # tests) never see ACTIVE while the NameNode is still mid-transition
            await self._set_state(ElectorState.ACTIVE)
            self._record("become_active_done")
        except QJournalError as e:
            self._record("become_active_failed", error=repr(e))
            log.warning("elector %s: failed to become active: %s", self.name, e)
            await self._release_or_defer(delete_breadcrumb=False)  # invariant 3
            await self._set_state(ElectorState.STANDBY)
            self.hold_off(self.settings.sleep_after_failure_ms)
            try:
                await self.cb.become_standby()
            except QJournalError as e2:
                log.warning("elector %s: become_standby after failure: %r", self.name, e2)

    async def _fence_if_needed(self) -> None:
        try:
            data, _ = await self._client().get(self.settings.breadcrumb_path)
        except ZkNoNodeError:
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
        zk = self._client()
        try:
            _, stat = await zk.get(path)
        except ZkNoNodeError:
            stat = None
        if stat is None:
            await zk.create(path, self.app_data, acl=list(self.settings.acls) or None)
        else:
            await zk.set(path, self.app_data, version=stat.version)
        self._record("breadcrumb_written")

    async def _release_or_defer(self, delete_breadcrumb: bool) -> None:
        """:meth:`_release`; on a ZooKeeper failure, leave it to the driver or the session expiry
        (invariant 5)."""
        try:
            await self._release(delete_breadcrumb=delete_breadcrumb)
        except (ZkError, ElectorError) as e:
            self._holder_session = None
            self._record("release_deferred", error=repr(e))
            log.warning("elector %s: could not release the lock now (%s); the driver releases it once "
                        "connected again with this session, or it expires with the session", self.name, e)
            if not self._closed and self._loop is not None:
                self._schedule_kick(min(1.0, self.settings.session_timeout_ms / 4000.0))

    async def _release(self, delete_breadcrumb: bool) -> None:
        """Delete our breadcrumb (if asked and ours) and our lock (if ours)."""
        if self.zk is None or self.conn_state is not Conn.CONNECTED:
            self._holder_session = None
            return
        zk = self.zk
        sid = self._session_id
        if delete_breadcrumb:
            try:
                data, stat = await zk.get(self.settings.breadcrumb_path)
                if data == self.app_data:
                    await zk.delete(self.settings.breadcrumb_path, version=stat.version)
                    self._record("breadcrumb_deleted")
            except (ZkNoNodeError, ZkBadVersionError):
                pass
        try:
            stat = await zk.exists(self.settings.lock_path)
            if stat is not None and stat.ephemeral_owner == sid:
                await zk.delete(self.settings.lock_path, version=stat.version)
                self._record("lock_released")
        except (ZkNoNodeError, ZkBadVersionError, ZkNotEmptyError):
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
        self.events.append((self._wall_clock(), event, details))
        if len(self.events) > self.max_events:
            del self.events[: len(self.events) - self.max_events]
        log.info("elector %s: %s %s", self.name, event, details or "",
                 extra={"event": event, "elector": self.name, **details})
