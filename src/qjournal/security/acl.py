"""Hadoop's access control list syntax (``AccessControlList``), pure: ``"user1,user2 group1,group2"``.

Why: every service-level ACL key (``security.client.protocol.acl``, ...) and
``dfs.cluster.administrators`` is written in this syntax in Hadoop's
``hadoop-policy.xml`` and ``hdfs-site.xml``; one parser keeps all of them
meaning the same thing.

Theory of operation (Hadoop's ``AccessControlList``):

* The text is split at its first space: users before it, groups after it, each
  a comma separated list (blanks trimmed, empty items dropped). A leading space
  means groups only (``" admins"``); no space means users only.
* ``*`` as either part (``"*"``, ``"* "``, ``" *"``) allows everybody.
* An empty text allows nobody.
* A caller is allowed when the list allows everybody, names its user, or
  names one of its groups.

Invariants:

1. :meth:`AccessControlList.is_user_allowed` is a pure function of the list,
   the user and the groups.
2. ``str(acl)`` is the list in Hadoop's syntax with sorted names: parsing it
   again gives the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

__all__ = ["AccessControlList", "WILDCARD"]

WILDCARD = "*"


def _names(part: str) -> frozenset[str]:
    return frozenset(n.strip() for n in part.split(",") if n.strip())


@dataclass(frozen=True, slots=True)
class AccessControlList:
    """A parsed ACL (module docstring).

    Attributes:
        users: user names allowed.
        groups: group names whose members are allowed.
        all_allowed: ``*``.
    """

    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    all_allowed: bool = False

    @classmethod
    def parse(cls, text: str | None) -> "AccessControlList":
        """Parse Hadoop's ACL syntax; None or empty allows nobody."""
        parts = (text or "").split(" ", 1)
        if any(p.strip() == WILDCARD for p in parts):
            return cls(all_allowed=True)
        users = _names(parts[0])
        groups = _names(parts[1]) if len(parts) == 2 else frozenset()
        return cls(users, groups)

    def is_user_allowed(self, user: str, groups: Iterable[str]) -> bool:
        """Whether ``user`` (member of ``groups``) is allowed (invariant 1)."""
        if self.all_allowed or user in self.users:
            return True
        return any(g in self.groups for g in groups)

    @property
    def needs_groups(self) -> bool:
        """Whether a caller's groups can change the answer (so a caller not named needs them looked up)."""
        return not self.all_allowed and bool(self.groups)

    def __str__(self) -> str:
        if self.all_allowed:
            return WILDCARD
        users = ",".join(sorted(self.users))
        return f"{users} {','.join(sorted(self.groups))}" if self.groups else users
