"""The ZooKeeper client interface of the failover controller, and its plain data types.

Why an interface: the ActiveStandbyElector's correctness depends on what ZooKeeper
promises (ordered writes, ephemeral znodes owned by a session, one-shot watches,
SUSPENDED before LOST), not on kazoo. Behind this interface the production
controller uses kazoo (:mod:`qjournal.ha.zk_kazoo`) and the deterministic
simulator a simulated ZooKeeper on its virtual-time loop, so the elector, the
health monitor and the controller run unchanged in both (issue 11).

Contract every implementation keeps:

1. Coroutines run on the caller's event loop; listener and watch callbacks are
   called *on that loop* (never from another thread), in the order the events
   happened.
2. Failures are the typed ``Zk*Error`` exceptions of :mod:`qjournal.errors`
   (``ZkNoNodeError``, ``ZkNodeExistsError``, ``ZkBadVersionError``,
   ``ZkNotEmptyError``, ``ZkNoAuthError``, ``ZkConnectionLossError``,
   ``ZkSessionExpiredError``, ``ZkOperationTimeoutError``), never an
   implementation's own exception type.
3. :attr:`ZooKeeperClient.state` is ``SUSPENDED`` while the connection is down and
   the session may still live, ``LOST`` once the session expired or the client
   was closed, ``CONNECTED`` otherwise. After ``LOST`` the client opens a new
   session by itself (a new :attr:`session_id`) until it is closed.
4. A watch fires at most once, for the next change of its znode (created, deleted,
   data changed) or when the session is lost.
"""

from __future__ import annotations

import enum
from typing import Callable, NamedTuple, Protocol

__all__ = ["Conn", "ZkId", "ZkAcl", "ZkStat", "WatchEvent", "ZooKeeperClient", "Perm",
           "OPEN_ACL_UNSAFE"]


class Conn(str, enum.Enum):
    """The connection as the client sees it (kazoo's ``KazooState``)."""

    CONNECTED = "CONNECTED"
    SUSPENDED = "SUSPENDED"
    LOST = "LOST"


class Perm(enum.IntFlag):
    """ZooKeeper's permission bits."""

    READ = 1
    WRITE = 2
    CREATE = 4
    DELETE = 8
    ADMIN = 16
    ALL = 31


class ZkId(NamedTuple):
    """An ACL identity: ``scheme`` (``world``, ``digest``, ``ip``, ...) and ``id``."""

    scheme: str
    id: str


class ZkAcl(NamedTuple):
    """One ACL entry: permission bits for an identity."""

    perms: int
    id: ZkId


#: ``world:anyone:cdrwa``
OPEN_ACL_UNSAFE = (ZkAcl(int(Perm.ALL), ZkId("world", "anyone")),)


class ZkStat(NamedTuple):
    """What the elector reads of a znode's stat."""

    version: int
    ephemeral_owner: int  # session id of the owner of an ephemeral znode, 0 for a persistent one


class WatchEvent(NamedTuple):
    """A fired watch: ``type`` is ``CREATED``, ``DELETED``, ``CHANGED`` or ``NONE`` (session)."""

    type: str
    path: str


WatchCallback = Callable[[WatchEvent], None]
ListenerCallback = Callable[[Conn], None]


class ZooKeeperClient(Protocol):
    """A session with a ZooKeeper ensemble (contract in the module docstring)."""

    @property
    def state(self) -> Conn: ...

    @property
    def session_id(self) -> int | None:
        """The current session id (None before the first connection)."""

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """``(session id, password)`` of the live session (tests expire sessions with it)."""

    def add_listener(self, listener: ListenerCallback) -> None:
        """Call ``listener(Conn)`` on every connection state change."""

    async def start(self, timeout_s: float) -> None:
        """Connect and open a session. Raises ZkError: none within ``timeout_s``."""

    async def close(self) -> None:
        """Close the session (its ephemeral znodes go at once) and stop reconnecting."""

    async def create(self, path: str, data: bytes, acl: tuple[ZkAcl, ...] | list[ZkAcl] | None = None,
                     ephemeral: bool = False) -> str: ...

    async def get(self, path: str, watch: WatchCallback | None = None) -> tuple[bytes, ZkStat]: ...

    async def exists(self, path: str, watch: WatchCallback | None = None) -> ZkStat | None: ...

    async def set(self, path: str, data: bytes, version: int = -1) -> ZkStat: ...

    async def delete(self, path: str, version: int = -1) -> None: ...
