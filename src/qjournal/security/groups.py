"""User-to-groups mapping: the groups a caller belongs to, decided by the server.

Why a module: a permission check or an ACL is only as good as the groups it is
given. A caller that names its own groups (the RPC path's simple
authentication) can claim ``supergroup``; Hadoop instead resolves the groups of
an authenticated user on the server (``hadoop.security.group.mapping``). The
NameNode (WebHDFS, and every call whose identity comes from a TLS certificate)
and the service-level ACLs of every daemon (``security/service_auth.py``) ask
here, so the module sits below all of them.

Theory of operation (Hadoop's defaults, ``ShellBasedUnixGroupsMapping`` and
``Groups``, plus a mapping file):

* The static overrides ``hadoop.user.group.static.mapping.overrides``
  (``user1=g1,g2;user2=;``, default ``dr.who=;``) win: a listed user has exactly
  the listed groups (``user2=`` means none), whatever the OS says.
* Then the mapping file ``qjournal.security.group.mapping.file`` when set: one
  ``user=group1,group2`` per line (``#`` comments, blank lines); a listed user
  has exactly those groups. It is how a cluster names the groups of users that
  exist only as certificate names (no OS account), and it is read again by
  :meth:`GroupMapping.refresh` (``dfsadmin -refreshUserToGroupsMappings``).
* Otherwise the OS answers: the user's primary group first, then every other
  group the user is a member of (``id -gn``, ``id -Gn``), each once. A user the
  OS does not know has no groups (Hadoop logs it and returns none).
* Answers are kept ``hadoop.security.groups.cache.secs`` (negative ones too), for
  at most :data:`MAX_CACHED_USERS` users; the OS lookup may be slow (NSS, LDAP), so
  :meth:`GroupMapping.groups_async` runs a cache miss in a worker thread.

Invariants:

1. The groups of a user never come from the caller's request.
2. A group list holds each name once, primary group first, at most
   :data:`MAX_GROUPS` names.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import time
from typing import Any, Callable

from qjournal.errors import ConfigError

__all__ = ["GroupMapping", "parse_static_overrides", "parse_mapping_file", "read_mapping_file", "unix_groups",
           "MAX_CACHED_USERS", "MAX_GROUPS"]

OVERRIDES_KEY = "hadoop.user.group.static.mapping.overrides"
FILE_KEY = "qjournal.security.group.mapping.file"
#: most groups of one user (a claimed list, or a mapping's answer)
MAX_GROUPS = 1024
#: largest group mapping file read
MAX_MAPPING_FILE_BYTES = 16 << 20
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
        parsed = _user_groups(entry)
        if parsed is None:
            raise ConfigError(f"{OVERRIDES_KEY}: entry {entry!r} is not of the form user=group1,group2",
                              key=OVERRIDES_KEY)
        out[parsed[0]] = parsed[1]
    return out


def _user_groups(entry: str) -> tuple[str, list[str]] | None:
    """``user=g1,g2`` as ``(user, [groups])``, or None without ``=`` or without a user name."""
    user, sep, groups = entry.partition("=")
    user = user.strip()
    if not sep or not user:
        return None
    return user, _unique(g.strip() for g in groups.split(",") if g.strip())


def parse_mapping_file(text: str, where: str) -> dict[str, list[str]]:
    """Parse a group mapping file: ``user=group1,group2`` per line, ``#`` comments, blank lines.

    Args:
        text: the file's content.
        where: the file's path, for messages.

    Returns:
        ``{user: [groups]}``.

    Raises:
        ConfigError: a line without ``=`` or with an empty user name (names file and line).
    """
    out: dict[str, list[str]] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parsed = _user_groups(line)
        if parsed is None:
            raise ConfigError(f"{where}:{n}: {line[:100]!r} is not of the form user=group1,group2 ({FILE_KEY})",
                              key=FILE_KEY, path=where)
        out[parsed[0]] = parsed[1]
    return out


def read_mapping_file(path: str | None) -> dict[str, list[str]]:
    """The mapping file at ``path`` ({} when None or empty).

    Raises:
        ConfigError: unreadable, too large, or malformed (names the file).
    """
    if not path:
        return {}
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_MAPPING_FILE_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{FILE_KEY}: cannot read {path}: {e.strerror}", key=FILE_KEY, path=path) from None
    if len(data) > MAX_MAPPING_FILE_BYTES:
        raise ConfigError(f"{FILE_KEY}: {path} is larger than {MAX_MAPPING_FILE_BYTES} bytes", key=FILE_KEY,
                          path=path)
    return parse_mapping_file(data.decode("utf-8", errors="replace"), path)


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
        conf: the configuration (the overrides, the mapping file and the cache time).
        lookup: the OS lookup (default :func:`unix_groups`; tests pass a table).
        clock: monotonic seconds (injectable).

    Raises:
        ConfigError: malformed overrides, or an unreadable or malformed mapping file.
    """

    def __init__(self, conf: Any, lookup: Callable[[str], list[str]] = unix_groups,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.lookup = lookup
        self.clock = clock
        self._cache: dict[str, tuple[float, list[str]]] = {}
        self.refresh(conf)

    def refresh(self, conf: Any) -> None:
        """Read the overrides, the mapping file and the cache time again and forget every cached
        answer (Hadoop's ``refreshUserToGroupsMappings``); on an error nothing changes.

        Raises:
            ConfigError: malformed overrides, or an unreadable or malformed mapping file.
        """
        overrides = parse_static_overrides(conf.get(OVERRIDES_KEY))
        mapped = read_mapping_file(conf.get(FILE_KEY))
        self.overrides = overrides
        self.mapped = mapped
        self.cache_s = (conf.get_duration_ms("hadoop.security.groups.cache.secs") or 0) / 1000.0
        self._cache.clear()

    def cached(self, user: str) -> list[str] | None:
        """The groups of ``user`` without asking the OS: the overrides, the mapping file or a fresh
        cached answer, else None."""
        if user in self.overrides:
            return list(self.overrides[user])
        if user in self.mapped:
            return list(self.mapped[user])
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
