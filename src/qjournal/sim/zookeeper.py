"""A simulated ZooKeeper for the virtual-time loop: sessions, ephemeral znodes, watches, ACLs, faults.

Why: the failover controller's correctness rests on what ZooKeeper promises, and
its bugs (the stuck controller of issue 11) live in the corners: a connection
that dies while a call is in flight, a session that expires while its owner is
cut off, a server that restarts. The simulator needs a ZooKeeper it can break
deterministically, from a seed, behind the same interface the production
controller uses (:class:`qjournal.ha.zk_client.ZooKeeperClient`).

What is modelled (ZooKeeper's guarantees, not ZAB):

* :class:`SimZooKeeper` is the ensemble as one linearizable store: znodes with
  data, version, ephemeral owner and ACL; sessions with a timeout, a password and
  their auth ids; one-shot watches (created / deleted / changed).
* A session expires when the server has not heard from it for its timeout
  (checked every ``tick_s``): its ephemeral znodes are deleted and their watches
  fire. A crashed server expires nothing; on restart every live session's timer
  starts again (ZooKeeper resets session timeouts when a leader is elected).
* :class:`SimZkClient` is one process's session (kazoo's behaviour): it pings
  every third of the timeout; when it cannot reach the server for two thirds of
  the timeout the connection is ``SUSPENDED`` and it keeps reconnecting; on
  reconnection a dead session turns into ``LOST`` and a new session is opened
  (invariant 3 of ``zk_client``). A call in flight when the link breaks fails
  with ``ZkConnectionLossError`` whether or not the server applied it (the
  request or only its answer may be lost, as timing falls), and drops the
  connection.
* Every message takes a seeded latency; the link between a client and the server
  follows ``reachable(client name)``, which the simulated cluster's fault model
  sets (partitions of the ZKFC-ZooKeeper link, a crashed ZooKeeper).

Invariants:

1. Everything happens on the loop, in an order decided by the seed alone.
2. A znode with an ephemeral owner exists only while that session is alive.
3. Watch notifications reach a client in the order the server fired them, and
   never after that client's session was lost.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable

from qjournal.errors import (ZkBadVersionError, ZkConnectionLossError, ZkError, ZkNoAuthError,
                             ZkNodeExistsError, ZkNoNodeError, ZkNotEmptyError, ZkSessionExpiredError)
from qjournal.ha.zk_client import (OPEN_ACL_UNSAFE, Conn, ListenerCallback, Perm, WatchCallback, WatchEvent,
                                   ZkAcl, ZkStat)

__all__ = ["SimZooKeeper", "SimZkClient"]

log = logging.getLogger("qjournal.sim.zookeeper")


@dataclass
class _Znode:
    data: bytes
    version: int
    ephemeral_owner: int
    acl: tuple[ZkAcl, ...]


@dataclass
class _Session:
    sid: int
    password: bytes
    timeout_s: float
    last_heard: float
    auth_ids: tuple[tuple[str, str], ...]
    alive: bool = True
    #: watch notifications not yet delivered, in firing order
    outbox: list[tuple[WatchCallback, WatchEvent]] = field(default_factory=list)
    #: the owning client's "you have mail" hook (it delivers when it can reach the server)
    wake: Callable[[], None] | None = None


def _digest_id(credential: str) -> str:
    user, _, password = credential.partition(":")
    h = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(h).decode()}"


class SimZooKeeper:
    """The simulated ensemble (module docstring).

    Args:
        rng: the run's random generator (latencies, lost replies).
        tick_s: how often session expiry is checked (ZooKeeper's tickTime).
        latency_s: ``(min, max)`` one-way message latency.
    """

    def __init__(self, rng: random.Random, tick_s: float = 0.5,
                 latency_s: tuple[float, float] = (0.0005, 0.003)) -> None:
        self.rng = rng
        self.tick_s = tick_s
        self.latency_s = latency_s
        self.znodes: dict[str, _Znode] = {"/": _Znode(b"", 0, 0, OPEN_ACL_UNSAFE)}
        self.sessions: dict[int, _Session] = {}
        self.watches: dict[str, list[tuple[int, WatchCallback]]] = {}
        self.up = True
        #: ``client name -> bool``: whether that client and the server can talk (the fault model's)
        self.reachable: Callable[[str], bool] = lambda name: True
        self.counts: dict[str, int] = {}
        self._next_sid = 0x100
        self._ticker: asyncio.Task | None = None

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the session-expiry ticker on the running loop."""
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick(), name="sim-zookeeper")

    async def stop(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            await asyncio.gather(self._ticker, return_exceptions=True)
            self._ticker = None

    def crash(self) -> None:
        """The whole ensemble stops serving (every client's link breaks)."""
        self.up = False
        self._count("zk_crash")

    def restart(self) -> None:
        """Serving again; every live session's timeout starts over."""
        now = self._now()
        for s in self.sessions.values():
            if s.alive:
                s.last_heard = now
        self.up = True
        self._count("zk_restart")

    def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as persistent open znodes (set-up, like ``zkfc -formatZK``)."""
        parts = [p for p in path.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in self.znodes:
                self.znodes[sub] = _Znode(b"", 0, 0, OPEN_ACL_UNSAFE)

    def can_talk(self, client: str) -> bool:
        return self.up and self.reachable(client)

    def latency(self) -> float:
        lo, hi = self.latency_s
        return self.rng.uniform(lo, hi)

    # -- sessions ------------------------------------------------------------------------------
    def open_session(self, timeout_s: float, auth: list[tuple[str, str]]) -> _Session:
        self._next_sid += 1
        ids = [("world", "anyone")] + [(scheme, _digest_id(cred) if scheme == "digest" else cred)
                                      for scheme, cred in auth]
        s = _Session(self._next_sid, self.rng.randbytes(16), timeout_s, self._now(), tuple(ids))
        self.sessions[s.sid] = s
        self._count("sessions_opened")
        return s

    def touch(self, sid: int) -> bool:
        """A ping: True while the session lives."""
        s = self.sessions.get(sid)
        if s is None or not s.alive:
            return False
        s.last_heard = self._now()
        return True

    def close_session(self, sid: int) -> None:
        self._end_session(sid, "closed")

    def expire(self, sid: int) -> None:
        """Force the expiry of a session (the simulator's ``expire_session``)."""
        self._end_session(sid, "expired")

    def _end_session(self, sid: int, how: str) -> None:
        s = self.sessions.get(sid)
        if s is None or not s.alive:
            return
        s.alive = False
        s.outbox.clear()
        self._count(f"sessions_{how}")
        for path in sorted(p for p, z in self.znodes.items() if z.ephemeral_owner == sid):  # invariant 2
            del self.znodes[path]
            self._fire(path, "DELETED")
        for path in list(self.watches):
            self.watches[path] = [(w_sid, cb) for w_sid, cb in self.watches[path] if w_sid != sid]

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.tick_s)
            if not self.up:
                continue
            now = self._now()
            for s in sorted(self.sessions.values(), key=lambda x: x.sid):
                if s.alive and now - s.last_heard > s.timeout_s:
                    self._end_session(s.sid, "expired")

    # -- the data tree (called when a request arrives) ---------------------------------------
    def _check(self, session: _Session, acl: tuple[ZkAcl, ...], perm: Perm, op: str, path: str) -> None:
        for a in acl:
            if a.perms & perm and (a.id.scheme, a.id.id) in session.auth_ids:
                return
        raise ZkNoAuthError(f"ZooKeeper {op} {path}: NoAuth (session {session.sid:#x})", path=path, op=op)

    @staticmethod
    def _parent(path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    def _node(self, path: str, op: str) -> _Znode:
        z = self.znodes.get(path)
        if z is None:
            raise ZkNoNodeError(f"ZooKeeper {op} {path}: NoNode", path=path, op=op)
        return z

    def do_create(self, session: _Session, path: str, data: bytes, acl: tuple[ZkAcl, ...],
                  ephemeral: bool) -> str:
        parent = self._node(self._parent(path), "create")
        self._check(session, parent.acl, Perm.CREATE, "create", path)
        if path in self.znodes:
            raise ZkNodeExistsError(f"ZooKeeper create {path}: NodeExists", path=path, op="create")
        if parent.ephemeral_owner:
            raise ZkError(f"ZooKeeper create {path}: ephemeral znodes have no children", path=path)
        self.znodes[path] = _Znode(bytes(data), 0, session.sid if ephemeral else 0, acl)
        self._fire(path, "CREATED")
        return path

    def do_get(self, session: _Session, path: str, watch: WatchCallback | None) -> tuple[bytes, ZkStat]:
        z = self._node(path, "get")
        self._check(session, z.acl, Perm.READ, "get", path)
        self._watch(session, path, watch)
        return z.data, ZkStat(z.version, z.ephemeral_owner)

    def do_exists(self, session: _Session, path: str, watch: WatchCallback | None) -> ZkStat | None:
        self._watch(session, path, watch)
        z = self.znodes.get(path)
        return None if z is None else ZkStat(z.version, z.ephemeral_owner)

    def do_set(self, session: _Session, path: str, data: bytes, version: int) -> ZkStat:
        z = self._node(path, "set")
        self._check(session, z.acl, Perm.WRITE, "set", path)
        if version != -1 and version != z.version:
            raise ZkBadVersionError(f"ZooKeeper set {path}: BadVersion ({version} != {z.version})",
                                    path=path, op="set")
        z.data, z.version = bytes(data), z.version + 1
        self._fire(path, "CHANGED")
        return ZkStat(z.version, z.ephemeral_owner)

    def do_delete(self, session: _Session, path: str, version: int) -> None:
        z = self._node(path, "delete")
        self._check(session, self._node(self._parent(path), "delete").acl, Perm.DELETE, "delete", path)
        if version != -1 and version != z.version:
            raise ZkBadVersionError(f"ZooKeeper delete {path}: BadVersion", path=path, op="delete")
        if any(p.startswith(path + "/") for p in self.znodes):
            raise ZkNotEmptyError(f"ZooKeeper delete {path}: NotEmpty", path=path, op="delete")
        del self.znodes[path]
        self._fire(path, "DELETED")

    def _watch(self, session: _Session, path: str, watch: WatchCallback | None) -> None:
        """Register a one-shot watch; the same watcher on the same path is one watch (as ZooKeeper)."""
        if watch is not None:
            entries = self.watches.setdefault(path, [])
            if (session.sid, watch) not in entries:
                entries.append((session.sid, watch))

    def _fire(self, path: str, kind: str) -> None:
        for sid, cb in self.watches.pop(path, []):
            s = self.sessions.get(sid)
            if s is not None and s.alive:
                s.outbox.append((cb, WatchEvent(kind, path)))
                if s.wake is not None:
                    s.wake()

    # -- helpers -------------------------------------------------------------------------------
    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    def client(self, name: str, settings: Any) -> "SimZkClient":
        """A :data:`~qjournal.ha.elector.ZooKeeperFactory` result for process ``name``."""
        return SimZkClient(self, name, settings.session_timeout_ms, list(settings.auth),
                           tuple(settings.acls) or OPEN_ACL_UNSAFE)


class SimZkClient:
    """One process's ZooKeeper session on :class:`SimZooKeeper` (a ``ZooKeeperClient``).

    Args:
        server: the simulated ensemble.
        name: the process's name (the fault model's link key).
        session_timeout_ms: the session timeout.
        auth: ``[(scheme, credential)]``.
        default_acl: ACL of created znodes when a call gives none.
    """

    def __init__(self, server: SimZooKeeper, name: str, session_timeout_ms: int,
                 auth: list[tuple[str, str]], default_acl: tuple[ZkAcl, ...]) -> None:
        self.server = server
        self.name = name
        self.timeout_s = session_timeout_ms / 1000.0
        self.auth = auth
        self.default_acl = default_acl
        self._state = Conn.LOST
        self._session: _Session | None = None
        self._listeners: list[ListenerCallback] = []
        self._pinger: asyncio.Task | None = None
        self._last_ok = 0.0
        self._closed = False

    # -- ZooKeeperClient: state ----------------------------------------------------------------
    @property
    def state(self) -> Conn:
        return self._state

    @property
    def session_id(self) -> int | None:
        return self._session.sid if self._session is not None else None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        s = self._session
        return (s.sid, s.password) if s is not None else None

    def add_listener(self, listener: ListenerCallback) -> None:
        self._listeners.append(listener)

    def _set_state(self, state: Conn) -> None:
        if state is self._state:
            return
        self._state = state
        for listener in list(self._listeners):
            listener(state)

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not self._try_connect():
            if loop.time() >= deadline:
                raise ZkConnectionLossError(f"{self.name}: no ZooKeeper connection within {timeout_s}s")
            await asyncio.sleep(min(0.1, max(0.0, deadline - loop.time())))
        self._pinger = loop.create_task(self._ping_loop(), name=f"zk-client-{self.name}")

    async def close(self) -> None:
        """Close the session (its ephemeral znodes go at once if the server hears it)."""
        self._closed = True
        if self._pinger is not None:
            self._pinger.cancel()
            await asyncio.gather(self._pinger, return_exceptions=True)
        if self._session is not None and self.server.can_talk(self.name):
            self.server.close_session(self._session.sid)
        self._set_state(Conn.LOST)

    def kill(self) -> None:
        """The process died: stop pinging without closing (the session expires on the server)."""
        self._closed = True
        if self._pinger is not None:
            self._pinger.cancel()

    # -- connection management ------------------------------------------------------------------
    def _try_connect(self) -> bool:
        """One connection attempt: True when connected (to the old session, or a new one)."""
        srv = self.server
        if not srv.can_talk(self.name):
            return False
        s = self._session
        if s is not None and srv.touch(s.sid):
            self._last_ok = asyncio.get_running_loop().time()
            self._set_state(Conn.CONNECTED)
            self._deliver_watches()
            return True
        if s is not None:
            self._session = None
            self._set_state(Conn.LOST)  # the old session expired while we were away
        self._session = srv.open_session(self.timeout_s, self.auth)
        self._session.wake = self._mail
        self._last_ok = asyncio.get_running_loop().time()
        self._set_state(Conn.CONNECTED)
        return True

    def _mail(self) -> None:
        """The server fired a watch of ours: it arrives after one message latency, if it can."""
        if self._state is Conn.CONNECTED and self.server.can_talk(self.name):
            asyncio.get_running_loop().call_later(self.server.latency(), self._deliver_watches)

    async def _ping_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            if self._state is Conn.CONNECTED:
                await asyncio.sleep(self.timeout_s / 3)
                s = self._session
                if self.server.can_talk(self.name) and s is not None:
                    if self.server.touch(s.sid):
                        self._last_ok = loop.time()
                        self._deliver_watches()
                    else:
                        self._session = None
                        self._set_state(Conn.LOST)
                        self._try_connect()
                elif loop.time() - self._last_ok > 2 * self.timeout_s / 3:
                    self._set_state(Conn.SUSPENDED)
            else:
                await asyncio.sleep(min(0.2, self.timeout_s / 10))
                self._try_connect()

    def _drop_connection(self) -> None:
        if self._state is Conn.CONNECTED:
            self._set_state(Conn.SUSPENDED)

    def _deliver_watches(self) -> None:
        s = self._session
        if s is None or not s.outbox or not s.alive or not self.server.can_talk(self.name):
            return
        pending, s.outbox = s.outbox, []
        loop = asyncio.get_running_loop()
        for cb, event in pending:  # invariant 3: in firing order, on the loop
            loop.call_soon(cb, event)

    # -- requests ------------------------------------------------------------------------------
    async def _request(self, op: str, path: str, apply: Callable[[_Session], Any]) -> Any:
        srv = self.server
        if self._state is not Conn.CONNECTED or self._session is None:
            raise ZkConnectionLossError(f"ZooKeeper {op} {path}: not connected ({self._state.value})",
                                        path=path, op=op)
        session = self._session
        await asyncio.sleep(srv.latency())
        if not srv.can_talk(self.name) or self._session is not session:
            self._drop_connection()
            raise ZkConnectionLossError(f"ZooKeeper {op} {path}: connection lost", path=path, op=op)
        if not session.alive:
            self._session = None
            self._set_state(Conn.LOST)
            raise ZkSessionExpiredError(f"ZooKeeper {op} {path}: session {session.sid:#x} expired",
                                        path=path, op=op)
        srv.touch(session.sid)
        result = apply(session)   # may raise a typed Zk error: that is the answer
        await asyncio.sleep(srv.latency())
        if not srv.can_talk(self.name):
            self._drop_connection()  # applied, but the answer is lost
            raise ZkConnectionLossError(f"ZooKeeper {op} {path}: connection lost (the request may have "
                                        "been applied)", path=path, op=op)
        self._last_ok = asyncio.get_running_loop().time()
        self._deliver_watches()
        return result

    async def create(self, path: str, data: bytes, acl: Any = None, ephemeral: bool = False) -> str:
        acl_t = tuple(acl) if acl else self.default_acl
        return await self._request("create", path, lambda s: self.server.do_create(s, path, data, acl_t,
                                                                                   ephemeral))

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, ZkStat]:
        return await self._request("get", path, lambda s: self.server.do_get(s, path, watch))

    async def exists(self, path: str, watch: WatchCallback | None = None) -> ZkStat | None:
        return await self._request("exists", path, lambda s: self.server.do_exists(s, path, watch))

    async def set(self, path: str, data: bytes, version: int = -1) -> ZkStat:
        return await self._request("set", path, lambda s: self.server.do_set(s, path, data, version))

    async def delete(self, path: str, version: int = -1) -> None:
        await self._request("delete", path, lambda s: self.server.do_delete(s, path, version))
