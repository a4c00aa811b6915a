"""The NameNode's user-to-groups mapping: the groups a caller belongs to, decided by the server.

Why a module: a permission check is only as good as the groups it is given. A
caller that names its own groups (the RPC path's simple authentication) can
claim ``supergroup``; Hadoop instead resolves the groups of an authenticated
user on the NameNode (``hadoop.security.group.mapping``). WebHDFS requests
carry only ``user.name``, so their groups come from here. Issue 16 adds a
mapping file; it belongs beside this one.

Theory of operation (Hadoop's defaults, ``ShellBasedUnixGroupsMapping`` and
``Groups``):

* The static overrides ``hadoop.user.group.static.mapping.overrides``
  (``user1=g1,g2;user2=;``, default ``dr.who=;``) win: a listed user has exactly
  the listed groups (``user2=`` means none), whatever the OS says.
* Otherwise the OS answers: the user's primary group first, then every other
  group the user is a member of (``id -gn``, ``id -Gn``), each once. A user the
  OS does not know has no groups (Hadoop logs it and returns none).
* Answers are kept ``hadoop.security.groups.cache.secs`` (negative ones too), for
  at most :data:`MAX_CACHED_USERS` users; the OS lookup may be slow (NSS, LDAP), so
  :meth:`GroupMapping.groups_async` runs a cache miss in a worker thread.

Invariants:

1. The groups of a user never come from the caller's request.
2. A group list holds each name once, primary group first, at most
   :data:`~qjournal.namenode.client_protocol.MAX_GROUPS` names.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import time
from typing import Any, Callable

from qjournal.errors import ConfigError
from qjournal.namenode.client_protocol import MAX_GROUPS

__all__ = ["GroupMapping", "parse_static_overrides", "unix_groups", "MAX_CACHED_USERS"]

OVERRIDES_KEY = "hadoop.user.group.static.mapping.overrides"
#: most users whose groups are cached at once (the oldest answer goes first)
MAX_CACHED_USERS = 10000


def parse_static_overrides(value: str | None) -> dict[str, list[str]]:
    """Parse Hadoop's static mapping ``user1=g1,g2;user2=;``.

    Args:
        value: the key's value (None or blank: no overrides).

    Returns:
        ``{user: [groups]}`` (an empty list: the user has no groups).

    Raises:
        ConfigError: an entry without ``=`` or with an empty user name, naming the key.
    """
    out: dict[str, list[str]] = {}
    for entry in (value or "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        user, sep, groups = entry.partition("=")
        user = user.strip()
        if not sep or not user:
            raise ConfigError(f"{OVERRIDES_KEY}: entry {entry!r} is not of the form user=group1,group2",
                              key=OVERRIDES_KEY)
        out[user] = _unique(g.strip() for g in groups.split(",") if g.strip())
    return out


def _unique(names: Any) -> list[str]:
    seen: dict[str, None] = {}
    for n in names:
        seen.setdefault(n, None)
    return list(seen)[:MAX_GROUPS]


def unix_groups(user: str) -> list[str]:
    """The OS groups of ``user``, primary first (``id -gn``; ``id -Gn``); [] for an unknown user."""
    try:
        pw = pwd.getpwnam(user)
    except (KeyError, ValueError):  # unknown user, or a name with a NUL byte
        return []
    try:
        gids = os.getgrouplist(user, pw.pw_gid)
    except OSError:
        gids = [pw.pw_gid]
    names = []
    for gid in [pw.pw_gid] + [g for g in gids if g != pw.pw_gid]:
        try:
            names.append(grp.getgrgid(gid).gr_name)
        except KeyError:
            names.append(str(gid))  # a group id without a name: ``id -Gn`` prints the number
    return _unique(names)


class GroupMapping:
    """Groups of a user, resolved on the server (module docstring).

    Args:
        conf: the configuration (the overrides and the cache time).
        lookup: the OS lookup (default :func:`unix_groups`; tests pass a table).
        clock: monotonic seconds (injectable).

    Raises:
        ConfigError: malformed overrides.
    """

    def __init__(self, conf: Any, lookup: Callable[[str], list[str]] = unix_groups,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.overrides = parse_static_overrides(conf.get(OVERRIDES_KEY))
        self.cache_s = (conf.get_duration_ms("hadoop.security.groups.cache.secs") or 0) / 1000.0
        self.lookup = lookup
        self.clock = clock
        self._cache: dict[str, tuple[float, list[str]]] = {}

    def cached(self, user: str) -> list[str] | None:
        """The groups of ``user`` without asking the OS: the overrides or a fresh cached answer, else None."""
        if user in self.overrides:
            return list(self.overrides[user])
        hit = self._cache.get(user)
        if hit is not None and self.clock() - hit[0] < self.cache_s:
            return list(hit[1])
        return None

    def _store(self, user: str, found: list[str]) -> list[str]:
        groups = _unique(found)
        self._cache.pop(user, None)
        while len(self._cache) >= MAX_CACHED_USERS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[user] = (self.clock(), groups)
        return list(groups)

    def groups(self, user: str) -> list[str]:
        """The groups of ``user`` (invariants 1 and 2), asking the OS on a cache miss."""
        hit = self.cached(user)
        return hit if hit is not None else self._store(user, self.lookup(user))

    async def groups_async(self, user: str) -> list[str]:
        """:meth:`groups`, with the OS lookup of a cache miss in a worker thread (the event loop stays
        free); the cache itself is only touched on the loop."""
        hit = self.cached(user)
        if hit is not None:
            return hit
        return self._store(user, await asyncio.to_thread(self.lookup, user))
