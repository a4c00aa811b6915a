"""The NameNode namespace: a pure state machine over an inode tree.

Why pure: the same object is driven by live client calls on the active
NameNode, by edit-log replay at start-up and by the standby's tailer. If the
live path and the replay path were different code, they could drift; here
they cannot, because every mutation works in two steps:

1. *check*: resolve the path, check permissions and HDFS semantics, choose new
   inode ids, and build the op(s) (from :mod:`qjournal.namenode.ops`) naming
   every inode involved. Nothing is changed yet; an error leaves no trace.
2. *apply*: :meth:`Namespace.apply` applies each op. Replay on another
   Namespace calls exactly this method with the same ops.

No clock, no I/O: the caller passes a :class:`CallContext` holding the user,
groups, the retry-cache key (client id, call id) and the timestamp ``ts`` (ms)
at which the op happens.

Invariants:

1. ``apply`` of the ops returned by a mutation, on a namespace equal to this
   one before the mutation, yields a namespace equal to this one after it
   (replay equality; the tests check it with random op sequences).
2. A mutation returns its ops only after every check passed; on an error
   (typed, from :mod:`qjournal.errors`, naming the path) the namespace is
   unchanged. Most mutations return exactly one op; ``mkdirs`` returns one
   ``OP_MKDIR`` per directory it creates (none when the directory exists) and
   a rename of a path onto itself returns none.
3. Inode ids are never reused: ``last_inode_id`` only grows, and ``apply``
   raises :class:`~qjournal.errors.InvariantViolation` for an op that does not
   fit the tree (a replayed log that disagrees with the state it is applied to).
4. Children are listed in byte order of their names (as HDFS does).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Iterator

from qjournal.errors import (CorruptSegmentError, DirectoryNotEmptyError, FileAlreadyExistsError,
                             FileNotFoundError_, InvalidRequestError, InvariantViolation, NotADirectoryError_,
                             PermissionDeniedError)
from qjournal.namenode.image_schema import IMAGE_COLUMNS
from qjournal.namenode.ops import (FIRST_INODE_ID, NO_CALL_ID, NO_CLIENT_ID, ROOT_INODE_ID,
                                   CreateOp, DeleteOp, EditOp, EndLogSegmentOp, MkdirOp,
                                   RenameOp, SetOwnerOp, SetPermissionOp, SetReplicationOp,
                                   SetTimesOp, StartLogSegmentOp)

READ, WRITE, EXECUTE = 4, 2, 1
_ACCESS_NAMES = {0: "NONE", READ: "READ", WRITE: "WRITE", EXECUTE: "EXECUTE", READ | EXECUTE: "READ_EXECUTE",
                 READ | WRITE: "READ_WRITE", WRITE | EXECUTE: "WRITE_EXECUTE", READ | WRITE | EXECUTE: "ALL"}
DEFAULT_BLOCK_SIZE = 134217728
#: replication of a file created without one (Hadoop's ``dfs.replication`` default)
DEFAULT_REPLICATION = 3
MAX_PATH_COMPONENT_BYTES = 255
MAX_PATH_DEPTH = 1000
#: longest user, owner or group name, in UTF-8 bytes (every name goes into an edit record)
MAX_NAME_BYTES = 255
INT64_MAX = 2 ** 63 - 1


def check_name(v: Any, what: str, path: Any = "") -> None:
    """A user / owner / group name: a non-empty UTF-8 string of at most 255 bytes, no ':' or NUL.

    Raises:
        InvalidRequestError: naming ``what`` and ``path``.
    """
    where = f" ({path})" if path else ""
    if not isinstance(v, str) or not v or ":" in v or "\x00" in v:
        raise InvalidRequestError(f"invalid {what} {v!r}{where}", path=str(path))
    try:
        n = len(v.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequestError(f"invalid {what} {v!r}{where}: not valid UTF-8", path=str(path)) from None
    if n > MAX_NAME_BYTES:
        raise InvalidRequestError(f"invalid {what}{where}: longer than {MAX_NAME_BYTES} bytes", path=str(path))


def check_int(v: Any, what: str, path: Any, lo: int, hi: int = INT64_MAX) -> None:
    """An int (not a bool) in ``lo..hi`` (int64 by default: it goes into an edit record).

    Raises:
        InvalidRequestError: naming ``what`` and ``path``.
    """
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise InvalidRequestError(f"{path}: invalid {what} {v!r} (expected {lo}..{hi})", path=str(path))


@dataclass(frozen=True, slots=True)
class CallContext:
    """Who is calling and when (the namespace's only inputs besides arguments).

    Attributes:
        user: the caller's user name.
        groups: the caller's groups (simple authentication: as the caller says).
        client_id: 16 bytes, retry-cache key part 1.
        call_id: retry-cache key part 2.
        ts: the time of the call in ms since epoch.
    """

    user: str
    groups: tuple[str, ...] = ()
    client_id: bytes = NO_CLIENT_ID
    call_id: int = NO_CALL_ID
    ts: int = 0


class INode:
    """One file or directory (metadata only)."""

    __slots__ = ("id", "parent", "name", "is_dir", "perm", "owner", "group", "mtime", "atime",
                 "replication", "block_size", "length", "children")

    def __init__(self, id: int, parent: int, name: str, is_dir: bool, perm: int, owner: str,
                 group: str, mtime: int, atime: int = 0, replication: int = 0,
                 block_size: int = 0, length: int = 0) -> None:
        self.id = id
        self.parent = parent
        self.name = name
        self.is_dir = is_dir
        self.perm = perm
        self.owner = owner
        self.group = group
        self.mtime = mtime
        self.atime = atime
        self.replication = replication
        self.block_size = block_size
        self.length = length
        #: name -> inode id, directories only
        self.children: dict[str, int] | None = {} if is_dir else None

    def row(self) -> tuple:
        return (self.id, self.parent, self.name, "d" if self.is_dir else "f", self.perm,
                self.owner, self.group, self.mtime, self.atime, self.replication,
                self.block_size, self.length)


def split_path(path: Any) -> list[str]:
    """Validate an absolute path and return its components.

    Raises:
        InvalidRequestError: not a string, not absolute, empty/'.'/'..' components,
            a component over 255 bytes, or deeper than 1000 levels.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidRequestError(f"Invalid path name {path!r}: must be an absolute path", path=str(path))
    parts = [p for p in path.split("/") if p != ""]
    if (len(path) <= MAX_PATH_COMPONENT_BYTES + 1 and path.isascii() and "/." not in path and ":" not in path
            and "\x00" not in path):
        # the common path, checked whole: no component can be "." or "..", hold ':' or NUL, or be longer
        # than 255 bytes (ASCII: one byte a character), nor be deeper than 128 levels
        return parts
    for p in parts:
        if p in (".", "..") or ":" in p or "\x00" in p:
            raise InvalidRequestError(f"Invalid path name {path}: bad component {p!r}", path=path)
        try:
            nbytes = len(p.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRequestError(f"Invalid path name {path!r}: not valid UTF-8", path=repr(path)) from None
        if nbytes > MAX_PATH_COMPONENT_BYTES:
            raise InvalidRequestError(
                f"Invalid path name {path}: component longer than {MAX_PATH_COMPONENT_BYTES} bytes",
                path=path)
    if len(parts) > MAX_PATH_DEPTH:
        raise InvalidRequestError(f"Invalid path name {path}: deeper than {MAX_PATH_DEPTH}", path=path)
    return parts


def join_path(parts: list[str]) -> str:
    return "/" + "/".join(parts)


def mode_string(is_dir: bool, perm: int) -> str:
    """``drwxr-xr-x`` as ``ls`` prints it (sticky bit as t/T)."""
    out = ["d" if is_dir else "-"]
    for shift in (6, 3, 0):
        bits = (perm >> shift) & 7
        out += ["r" if bits & 4 else "-", "w" if bits & 2 else "-", "x" if bits & 1 else "-"]
    if perm & 0o1000:
        out[-1] = "t" if out[-1] == "x" else "T"
    return "".join(out)


class Namespace:
    """The inode tree (module docstring: check, then apply).

    Args:
        superuser: the NameNode's user; bypasses permission checks.
        supergroup: members of this group are superusers too (``dfs.permissions.superusergroup``).
        permissions_enabled: ``dfs.permissions.enabled``.
        root_mtime: mtime of the root at format time.
    """

    def __init__(self, superuser: str = "root", supergroup: str = "supergroup",
                 permissions_enabled: bool = True, root_mtime: int = 0) -> None:
        self.superuser = superuser
        self.supergroup = supergroup
        self.permissions_enabled = permissions_enabled
        self.inodes: dict[int, INode] = {
            ROOT_INODE_ID: INode(ROOT_INODE_ID, 0, "", True, 0o755, superuser, supergroup, root_mtime)}
        self.last_inode_id = ROOT_INODE_ID
        #: one object per distinct owner, group, permission, replication and block size (memory:
        #: a decoded edit or image row brings its own copy of each; an inode keeps the shared one)
        self._shared: dict[Any, Any] = {}

    # ------------------------------------------------------------------ state
    @property
    def root(self) -> INode:
        return self.inodes[ROOT_INODE_ID]

    def snapshot(self) -> tuple:
        """A comparable value of the whole state (tests: replay equality)."""
        return (self.last_inode_id, tuple(self.inodes[i].row() for i in sorted(self.inodes)))

    def __len__(self) -> int:
        return len(self.inodes)

    def path_of(self, inode_id: int) -> str:
        parts = []
        n = self.inodes[inode_id]
        while n.id != ROOT_INODE_ID:
            parts.append(n.name)
            n = self.inodes[n.parent]
        return "/" + "/".join(reversed(parts))

    # ----------------------------------------------------------- permissions
    def _is_super(self, ctx: CallContext) -> bool:
        return (not self.permissions_enabled or ctx.user == self.superuser
                or self.supergroup in ctx.groups)

    def check_superuser(self, ctx: CallContext, operation: str) -> None:
        """HDFS's ``checkSuperuserPrivilege`` (the ``dfsadmin`` calls): the superuser, a member of the
        supergroup, or anyone when permissions are disabled.

        Raises:
            PermissionDeniedError: ``Access denied for user <u>. Superuser privilege is required ...``.
        """
        if not self._is_super(ctx):
            raise PermissionDeniedError(f"Access denied for user {ctx.user}. Superuser privilege is required "
                                        f"for operation {operation}", user=ctx.user, operation=operation)

    @staticmethod
    def _allows(ctx: CallContext, node: INode, access: int) -> bool:
        """The owner, group or other bits of ``node`` grant ``access`` to ``ctx`` (no superuser rule)."""
        if ctx.user == node.owner:
            bits = (node.perm >> 6) & 7
        elif node.group in ctx.groups:
            bits = (node.perm >> 3) & 7
        else:
            bits = node.perm & 7
        return bits & access == access

    def _check(self, ctx: CallContext, node: INode, access: int, path: str) -> None:
        if not self._is_super(ctx) and not self._allows(ctx, node, access):
            self._refuse(ctx, node, access, path)

    @staticmethod
    def _refuse(ctx: CallContext, node: INode, access: int, path: str) -> None:
        """Raise HDFS's permission-denied error for ``access`` to ``node`` (at ``path``)."""
        raise PermissionDeniedError(
                f"Permission denied: user={ctx.user}, access={_ACCESS_NAMES.get(access, access)}, "
                f"inode=\"{path}\":{node.owner}:{node.group}:{mode_string(node.is_dir, node.perm)}",
                path=path, user=ctx.user)

    def _check_owner(self, ctx: CallContext, node: INode, path: str) -> None:
        if self._is_super(ctx) or ctx.user == node.owner:
            return
        raise PermissionDeniedError(
            f"Permission denied. user={ctx.user} is not the owner of inode={path}",
            path=path, user=ctx.user)

    # ------------------------------------------------------------ resolution
    def _resolve(self, ctx: CallContext | None, path: str,
                 parts: list[str] | None = None) -> tuple[list[INode], list[str]]:
        """Walk ``path``; returns (existing inodes from the root, components).

        The list is shorter than ``parts`` + 1 when the path does not fully exist.
        Traverse (EXECUTE) permission is checked on every directory passed through.

        Raises:
            NotADirectoryError_: a non-final component is a file.
            PermissionDeniedError: no EXECUTE on a directory on the way.
        """
        if parts is None:
            parts = split_path(path)
        inodes = self.inodes
        cur = inodes[ROOT_INODE_ID]
        nodes = [cur]
        check = ctx is not None and not self._is_super(ctx)
        for i, p in enumerate(parts):
            if not cur.is_dir:
                raise NotADirectoryError_(
                    f"{join_path(parts[:i])} (is not a directory) in path {path}",
                    path=join_path(parts[:i]))
            if check and not self._allows(ctx, cur, EXECUTE):  # type: ignore[arg-type]
                self._refuse(ctx, cur, EXECUTE, join_path(parts[:i]))  # type: ignore[arg-type]
            cid = cur.children.get(p)  # type: ignore[union-attr]
            if cid is None:
                break
            cur = inodes[cid]
            nodes.append(cur)
        return nodes, parts

    def _get(self, ctx: CallContext | None, path: str) -> tuple[INode, list[INode], list[str]]:
        nodes, parts = self._resolve(ctx, path)
        if len(nodes) != len(parts) + 1:
            raise FileNotFoundError_(f"{path}: No such file or directory", path=path)
        return nodes[-1], nodes, parts

    def exists(self, path: str) -> bool:
        try:
            self._get(None, path)
            return True
        except (FileNotFoundError_, NotADirectoryError_):
            return False

    # ------------------------------------------------------------- mutations
    def mkdirs(self, ctx: CallContext, path: str, perm: int = 0o755,
               create_parent: bool = True) -> list[EditOp]:
        """``mkdir`` (with parents when ``create_parent``); returns one OP_MKDIR per new directory.

        Raises:
            FileAlreadyExistsError: the path exists as a file, or (without
                ``create_parent``) as a directory.
            FileNotFoundError_: without ``create_parent``, the parent is missing.
            NotADirectoryError_: an ancestor is a file.
            PermissionDeniedError: no WRITE|EXECUTE on the deepest existing ancestor.
        """
        _check_perm(perm, path, "mkdir")
        nodes, parts = self._resolve(ctx, path)
        if len(nodes) == len(parts) + 1:
            last = nodes[-1]
            if not last.is_dir:
                raise FileAlreadyExistsError(f"{path}: File exists (is not a directory)", path=path)
            if not create_parent:
                raise FileAlreadyExistsError(f"{path}: File exists", path=path)
            return []
        existing = len(nodes) - 1
        if not nodes[-1].is_dir:
            raise NotADirectoryError_(f"{join_path(parts[:existing])} (is not a directory) in path {path}",
                                      path=join_path(parts[:existing]))
        if not create_parent and existing != len(parts) - 1:
            raise FileNotFoundError_(f"{join_path(parts[:-1])}: No such file or directory "
                                     f"(parent of {path})", path=join_path(parts[:-1]))
        self._check(ctx, nodes[-1], WRITE | EXECUTE, join_path(parts[:existing]))
        ops: list[EditOp] = []
        parent = nodes[-1]
        group = parent.group
        next_id = self.last_inode_id
        pid = parent.id
        for i in range(existing, len(parts)):
            next_id += 1
            # HDFS gives implicitly created parents u+wx on top of the mode
            p = perm if i == len(parts) - 1 else (perm | 0o300)
            ops.append(MkdirOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=next_id,
                               parent=pid, name=parts[i], path=join_path(parts[:i + 1]),
                               perm=p & 0o1777, owner=ctx.user, group=group, mtime=ctx.ts))
            pid = next_id
        for op in ops:
            self.apply(op)
        return ops

    def create(self, ctx: CallContext, path: str, perm: int = 0o644, overwrite: bool = False,
               replication: int = DEFAULT_REPLICATION, block_size: int = DEFAULT_BLOCK_SIZE,
               create_parent: bool = False) -> list[EditOp]:
        """Create an empty file (``touchz``); with ``overwrite`` an existing file is replaced.

        Parents are not created (``create_parent`` is accepted only as False
        here; use :meth:`mkdirs` first).

        Raises:
            FileAlreadyExistsError: the path exists (as a directory, or as a file without ``overwrite``).
            FileNotFoundError_: the parent directory is missing.
            NotADirectoryError_: an ancestor is a file.
            PermissionDeniedError: no WRITE|EXECUTE on the parent.
            InvalidRequestError: bad replication / block size, or the root.
        """
        if create_parent:
            raise InvalidRequestError(f"create {path}: create_parent is not supported; mkdirs first",
                                      path=path)
        _check_replication(replication, path)
        _check_perm(perm, path, "create")
        check_int(block_size, "block size", path, 1)
        nodes, parts = self._resolve(ctx, path)
        if not parts:
            raise FileAlreadyExistsError(f"{path}: File exists (is a directory)", path=path)
        overwrite_id = 0
        if len(nodes) == len(parts) + 1:
            cur = nodes[-1]
            if cur.is_dir:
                raise FileAlreadyExistsError(f"{path}: File exists (is a directory)", path=path)
            if not overwrite:
                raise FileAlreadyExistsError(f"{path}: File exists", path=path)
            overwrite_id = cur.id
            parent = nodes[-2]
        elif len(nodes) == len(parts):
            parent = nodes[-1]
            if not parent.is_dir:
                raise NotADirectoryError_(f"{join_path(parts[:-1])} (is not a directory) in path {path}",
                                          path=join_path(parts[:-1]))
        else:
            raise FileNotFoundError_(f"{join_path(parts[:-1])}: No such file or directory "
                                     f"(parent of {path})", path=join_path(parts[:-1]))
        if not self._is_super(ctx) and not self._allows(ctx, parent, WRITE | EXECUTE):
            self._refuse(ctx, parent, WRITE | EXECUTE, join_path(parts[:-1]))  # the path built only here
        op = CreateOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=self.last_inode_id + 1,
                      parent=parent.id, name=parts[-1], path=join_path(parts), perm=perm & 0o1777,
                      owner=ctx.user, group=parent.group, mtime=ctx.ts, atime=ctx.ts,
                      replication=replication, block_size=block_size, length=0,
                      overwrite_inode=overwrite_id)
        self.apply(op)
        return [op]

    def delete(self, ctx: CallContext, path: str, recursive: bool = False) -> list[EditOp]:
        """Delete a file or directory (a non-empty directory only with ``recursive``).

        Raises:
            FileNotFoundError_: the path does not exist.
            DirectoryNotEmptyError: a non-empty directory without ``recursive``.
            InvalidRequestError: the root.
            PermissionDeniedError: no WRITE|EXECUTE on the parent, or (recursive)
                no full access to a directory of the subtree.
        """
        node, nodes, parts = self._get(ctx, path)
        if not parts:
            raise InvalidRequestError("Cannot delete the root directory /", path="/")
        if node.is_dir and node.children and not recursive:
            raise DirectoryNotEmptyError(f"{path}: Directory is not empty", path=path)
        parent = nodes[-2]
        self._check(ctx, parent, WRITE | EXECUTE, join_path(parts[:-1]))
        self._check_sticky(ctx, parent, node, path)
        if node.is_dir and node.children and not self._is_super(ctx):
            for sub_id in self._subtree(node.id):
                sub = self.inodes[sub_id]
                if sub.is_dir and sub.children:
                    self._check(ctx, sub, READ | WRITE | EXECUTE, self.path_of(sub_id))
        op = DeleteOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id,
                      parent=parent.id, path=join_path(parts), mtime=ctx.ts)
        self.apply(op)
        return [op]

    def _check_sticky(self, ctx: CallContext, parent: INode, node: INode, path: str) -> None:
        if (parent.perm & 0o1000) and not self._is_super(ctx) and ctx.user not in (parent.owner,
                                                                                   node.owner):
            raise PermissionDeniedError(
                f"Permission denied by sticky bit: user={ctx.user}, path=\"{path}\"",
                path=path, user=ctx.user)

    def rename(self, ctx: CallContext, src: str, dst: str, overwrite: bool = False) -> list[EditOp]:
        """Rename a file or a whole directory, with HDFS semantics.

        If ``dst`` is an existing directory, ``src`` moves inside it under its
        own name. If the final destination exists it is an error unless
        ``overwrite`` and it is a file or an empty directory (then it is replaced).

        Raises:
            FileNotFoundError_: ``src`` or the destination's parent is missing.
            FileAlreadyExistsError: the destination exists (and may not be overwritten).
            InvalidRequestError: renaming the root, or a directory into its own subtree.
            NotADirectoryError_: the destination's parent is a file.
            PermissionDeniedError: no WRITE|EXECUTE on either parent.
        """
        node, snodes, sparts = self._get(ctx, src)
        if not sparts:
            raise InvalidRequestError("Cannot rename the root directory /", path="/")
        dnodes, dparts = self._resolve(ctx, dst)
        if len(dnodes) == len(dparts) + 1 and dnodes[-1].is_dir and dnodes[-1].id != node.id:
            # into an existing directory: move inside it
            dparts = dparts + [sparts[-1]]
            dnodes, dparts = self._resolve(ctx, join_path(dparts), dparts)
        dst_path = join_path(dparts)
        src_path = join_path(sparts)
        if dparts == sparts:
            return []  # rename onto itself: nothing to do (HDFS returns true)
        if dparts[:len(sparts)] == sparts:
            raise InvalidRequestError(
                f"rename {src_path} to {dst_path}: a directory cannot be moved into its own subtree",
                path=src_path)
        overwrite_id = 0
        if len(dnodes) == len(dparts) + 1:
            target = dnodes[-1]
            if not overwrite:
                raise FileAlreadyExistsError(f"rename destination {dst_path}: File exists", path=dst_path)
            if target.is_dir and target.children:
                raise DirectoryNotEmptyError(f"rename destination {dst_path}: Directory is not empty",
                                             path=dst_path)
            if target.is_dir != node.is_dir:
                raise FileAlreadyExistsError(
                    f"rename destination {dst_path}: cannot overwrite a "
                    f"{'directory' if target.is_dir else 'file'} with a "
                    f"{'directory' if node.is_dir else 'file'}", path=dst_path)
            overwrite_id = target.id
            dparent = dnodes[-2]
        elif len(dnodes) == len(dparts):
            dparent = dnodes[-1]
            if not dparent.is_dir:
                raise NotADirectoryError_(f"{join_path(dparts[:-1])} (is not a directory) in path {dst_path}",
                                          path=join_path(dparts[:-1]))
        else:
            raise FileNotFoundError_(f"rename destination parent {join_path(dparts[:-1])}: "
                                     f"No such file or directory", path=join_path(dparts[:-1]))
        sparent = snodes[-2]
        self._check(ctx, sparent, WRITE | EXECUTE, join_path(sparts[:-1]))
        self._check_sticky(ctx, sparent, node, src_path)
        self._check(ctx, dparent, WRITE | EXECUTE, join_path(dparts[:-1]))
        op = RenameOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id,
                      src_parent=sparent.id, dst_parent=dparent.id, dst_name=dparts[-1],
                      src_path=src_path, dst_path=dst_path, mtime=ctx.ts, overwrite_inode=overwrite_id)
        self.apply(op)
        return [op]

    def set_permission(self, ctx: CallContext, path: str, perm: int) -> list[EditOp]:
        """chmod. Raises FileNotFoundError_, PermissionDeniedError (not the owner), InvalidRequestError."""
        if not isinstance(perm, int) or isinstance(perm, bool) or not 0 <= perm <= 0o1777:
            raise InvalidRequestError(f"chmod {path}: invalid permission {perm!r}", path=str(path))
        node, _nodes, parts = self._get(ctx, path)
        self._check_owner(ctx, node, join_path(parts))
        op = SetPermissionOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id,
                             path=join_path(parts), perm=perm)
        self.apply(op)
        return [op]

    def set_owner(self, ctx: CallContext, path: str, owner: str | None = None,
                  group: str | None = None) -> list[EditOp]:
        """chown. Only a superuser changes the owner; an owner may change the group to one of theirs.

        Raises:
            FileNotFoundError_, PermissionDeniedError, InvalidRequestError (neither given).
        """
        if owner is None and group is None:
            raise InvalidRequestError(f"chown {path}: neither owner nor group given", path=str(path))
        for v, what in ((owner, "owner"), (group, "group")):
            if v is not None:
                check_name(v, what, path)
        node, _nodes, parts = self._get(ctx, path)
        p = join_path(parts)
        if not self._is_super(ctx):
            if owner is not None and owner != node.owner:
                raise PermissionDeniedError(f"Permission denied: user={ctx.user} is not a superuser "
                                            f"and cannot change the owner of {p}", path=p, user=ctx.user)
            self._check_owner(ctx, node, p)
            if group is not None and group not in ctx.groups:
                raise PermissionDeniedError(f"Permission denied: user={ctx.user} does not belong to "
                                            f"group {group} (path {p})", path=p, user=ctx.user)
        op = SetOwnerOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id, path=p,
                        owner=owner, group=group)
        self.apply(op)
        return [op]

    def set_times(self, ctx: CallContext, path: str, mtime: int = -1, atime: int = -1) -> list[EditOp]:
        """Set mtime / atime (-1 = unchanged). Needs WRITE on the inode (or ownership)."""
        for v, what in ((mtime, "mtime"), (atime, "atime")):
            check_int(v, what, path, -1)
        node, _nodes, parts = self._get(ctx, path)
        p = join_path(parts)
        if ctx.user != node.owner:
            self._check(ctx, node, WRITE, p)
        op = SetTimesOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id, path=p,
                        mtime=mtime, atime=atime)
        self.apply(op)
        return [op]

    def set_replication(self, ctx: CallContext, path: str, replication: int) -> list[EditOp]:
        """setrep on a file. Raises FileNotFoundError_, PermissionDeniedError, InvalidRequestError (a directory)."""
        _check_replication(replication, path)
        node, _nodes, parts = self._get(ctx, path)
        p = join_path(parts)
        if node.is_dir:
            raise InvalidRequestError(f"setReplication {p}: is a directory", path=p)
        self._check(ctx, node, WRITE, p)
        op = SetReplicationOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node.id, path=p,
                              replication=replication)
        self.apply(op)
        return [op]

    # ----------------------------------------------------------------- reads
    def status(self, node: INode, path: str) -> dict:
        """A FileStatus dict for ``node`` at ``path``."""
        return {"path": path, "name": node.name, "type": "d" if node.is_dir else "f",
                "permission": node.perm, "owner": node.owner, "group": node.group,
                "mtime": node.mtime, "atime": node.atime, "replication": node.replication,
                "block_size": node.block_size, "length": node.length, "inode_id": node.id,
                "children_num": len(node.children) if node.is_dir else 0}  # type: ignore[arg-type]

    def check_access(self, ctx: CallContext, path: str, access: int) -> None:
        """HDFS ``checkAccess`` (``FileSystem.access``): may the caller ``access`` the path?

        Args:
            access: the wanted bits, ``READ | WRITE | EXECUTE`` (0..7).

        Raises:
            FileNotFoundError_, PermissionDeniedError (naming the access), InvalidRequestError (bad ``access``).
        """
        check_int(access, "access", path, 0, 7)
        node, _nodes, parts = self._get(ctx, path)
        self._check(ctx, node, access, join_path(parts))

    def get_file_info(self, ctx: CallContext, path: str) -> dict | None:
        """stat; None when the path does not exist (as HDFS getFileInfo)."""
        nodes, parts = self._resolve(ctx, path)
        if len(nodes) != len(parts) + 1:
            return None
        return self.status(nodes[-1], join_path(parts))

    def list_status(self, ctx: CallContext, path: str) -> list[dict]:
        """ls: children sorted by name (invariant 4); a file lists itself.

        Raises:
            FileNotFoundError_, PermissionDeniedError (no READ|EXECUTE on the directory).
        """
        return self.get_listing(ctx, path)["entries"]

    def get_listing(self, ctx: CallContext, path: str, start_after: str = "",
                    limit: int | None = None) -> dict:
        """One batch of ``ls`` (HDFS ``getListing``): the children named after ``start_after``, in
        name order (invariant 4), at most ``limit`` (None: all); a file lists itself.

        Returns:
            ``{"entries": [FileStatus dicts], "remaining": children left after this batch}``.

        Raises:
            FileNotFoundError_, PermissionDeniedError (no READ|EXECUTE on the directory),
            InvalidRequestError (``start_after`` not a string, ``limit`` below 1).
        """
        if not isinstance(start_after, str):
            raise InvalidRequestError(f"ls {path}: invalid start_after {start_after!r}", path=str(path))
        if limit is not None:
            check_int(limit, "listing limit", path, 1)
        node, _nodes, parts = self._get(ctx, path)
        p = join_path(parts)
        if not node.is_dir:
            return {"entries": [self.status(node, p)], "remaining": 0}
        self._check(ctx, node, READ | EXECUTE, p)
        base = p.rstrip("/")
        names = sorted(node.children)  # type: ignore[arg-type]
        first = bisect.bisect_right(names, start_after) if start_after else 0
        last = len(names) if limit is None else min(len(names), first + limit)
        return {"entries": [self.status(self.inodes[node.children[n]], f"{base}/{n}")  # type: ignore[index]
                            for n in names[first:last]],
                "remaining": len(names) - last}

    def get_content_summary(self, ctx: CallContext, path: str) -> dict:
        """du / count: length, file_count, directory_count (including itself), space_consumed.

        Raises:
            FileNotFoundError_, PermissionDeniedError (no READ|EXECUTE on a directory of the subtree).
        """
        node, _nodes, parts = self._get(ctx, path)
        length = files = dirs = space = 0
        for nid in self._subtree(node.id):
            n = self.inodes[nid]
            if n.is_dir:
                dirs += 1
                self._check(ctx, n, READ | EXECUTE, self.path_of(nid))
            else:
                files += 1
                length += n.length
                space += n.length * n.replication
        return {"path": join_path(parts), "length": length, "file_count": files,
                "directory_count": dirs, "quota": -1, "space_consumed": space,
                "space_quota": -1}

    def _subtree(self, root_id: int) -> Iterator[int]:
        stack = [root_id]
        while stack:
            nid = stack.pop()
            yield nid
            ch = self.inodes[nid].children
            if ch:
                stack.extend(ch[k] for k in sorted(ch, reverse=True))

    # ----------------------------------------------------------------- apply
    def apply(self, op: EditOp) -> None:
        """Apply one op (live path and replay alike; invariants 1 and 3).

        Raises:
            InvariantViolation: the op does not fit the tree (unknown inode,
                name taken, reused inode id).
        """
        fn = _APPLY.get(type(op))
        if fn is None:
            raise InvariantViolation(f"no apply rule for {type(op).__name__}")
        fn(self, op)

    def _node(self, inode_id: int, op: EditOp, want_dir: bool | None = None) -> INode:
        n = self.inodes.get(inode_id)
        if n is None:
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} does not exist")
        if want_dir is not None and n.is_dir != want_dir:
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} is_dir={n.is_dir}, expected {want_dir}")
        return n

    def _add(self, op: EditOp, node: INode) -> None:
        inodes, nid = self.inodes, node.id
        if nid in inodes or nid <= ROOT_INODE_ID:
            raise InvariantViolation(f"{op.NAME}: inode id {nid} is already used")
        parent = inodes.get(node.parent)
        if parent is None or not parent.is_dir:
            parent = self._node(node.parent, op, True)  # raises, naming what is wrong
        children = parent.children
        if node.name in children:  # type: ignore[operator]
            raise InvariantViolation(f"{op.NAME}: {node.name!r} already exists in inode {parent.id}")
        children[node.name] = nid  # type: ignore[index]
        node.parent = parent.id  # the parent's own id object (memory: one int fewer per inode)
        parent.mtime = op.mtime  # type: ignore[attr-defined]
        inodes[nid] = node
        if nid > self.last_inode_id:
            self.last_inode_id = nid

    def _remove_subtree(self, op: EditOp, inode_id: int) -> None:
        n = self._node(inode_id, op)
        parent = self._node(n.parent, op, True)
        if parent.children.get(n.name) != inode_id:  # type: ignore[union-attr]
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} is not a child of {parent.id}")
        del parent.children[n.name]  # type: ignore[union-attr]
        for sid in list(self._subtree(inode_id)):
            del self.inodes[sid]

    def _apply_mkdir(self, op: MkdirOp) -> None:
        share = self._shared.setdefault
        self._add(op, INode(op.inode, op.parent, op.name, True, share(op.perm, op.perm), share(op.owner, op.owner),
                            share(op.group, op.group), op.mtime))

    def _apply_create(self, op: CreateOp) -> None:
        if op.overwrite_inode:
            old = self._node(op.overwrite_inode, op, False)
            if old.parent != op.parent or old.name != op.name:
                raise InvariantViolation(f"{op.NAME}: overwrite_inode {old.id} is not {op.path}")
            self._remove_subtree(op, old.id)
        share = self._shared.setdefault
        mtime, atime = op.mtime, op.atime
        self._add(op, INode(op.inode, op.parent, op.name, False, share(op.perm, op.perm), share(op.owner, op.owner),
                            share(op.group, op.group), mtime, mtime if atime == mtime else atime,
                            share(op.replication, op.replication), share(op.block_size, op.block_size), op.length))

    def _apply_delete(self, op: DeleteOp) -> None:
        n = self._node(op.inode, op)
        if n.parent != op.parent:
            raise InvariantViolation(f"{op.NAME}: inode {op.inode} has parent {n.parent}, op says {op.parent}")
        self._remove_subtree(op, op.inode)
        self.inodes[op.parent].mtime = op.mtime

    def _apply_rename(self, op: RenameOp) -> None:
        n = self._node(op.inode, op)
        if n.parent != op.src_parent:
            raise InvariantViolation(f"{op.NAME}: inode {op.inode} has parent {n.parent}, "
                                     f"op says {op.src_parent}")
        dparent = self._node(op.dst_parent, op, True)
        if op.overwrite_inode:
            old = self._node(op.overwrite_inode, op)
            if old.parent != op.dst_parent or old.name != op.dst_name:
                raise InvariantViolation(f"{op.NAME}: overwrite_inode {old.id} is not {op.dst_path}")
            self._remove_subtree(op, old.id)
        if op.dst_name in dparent.children:  # type: ignore[operator]
            raise InvariantViolation(f"{op.NAME}: {op.dst_name!r} already exists in inode {dparent.id}")
        # the destination parent must not be inside the moved subtree
        a = dparent
        while a.id != ROOT_INODE_ID:
            if a.id == n.id:
                raise InvariantViolation(f"{op.NAME}: inode {n.id} moved into its own subtree")
            a = self.inodes[a.parent]
        sparent = self.inodes[n.parent]
        del sparent.children[n.name]  # type: ignore[union-attr]
        n.parent = dparent.id
        n.name = op.dst_name
        dparent.children[n.name] = n.id  # type: ignore[index]
        sparent.mtime = op.mtime
        dparent.mtime = op.mtime

    def _apply_set_permission(self, op: SetPermissionOp) -> None:
        self._node(op.inode, op).perm = self._shared.setdefault(op.perm, op.perm)

    def _apply_set_owner(self, op: SetOwnerOp) -> None:
        n = self._node(op.inode, op)
        share = self._shared.setdefault
        if op.owner is not None:
            n.owner = share(op.owner, op.owner)
        if op.group is not None:
            n.group = share(op.group, op.group)

    def _apply_set_times(self, op: SetTimesOp) -> None:
        n = self._node(op.inode, op)
        if op.mtime != -1:
            n.mtime = op.mtime
        if op.atime != -1:
            n.atime = op.atime

    def _apply_set_replication(self, op: SetReplicationOp) -> None:
        self._node(op.inode, op, False).replication = self._shared.setdefault(op.replication, op.replication)

    def _apply_segment_marker(self, op: EditOp) -> None:
        return None

    # ----------------------------------------------------------------- image
    def to_image_columns(self) -> dict[str, list]:
        """Rows for :func:`qjournal.namenode.image.save_image`, sorted by inode id (``INode.row``
        gives the values in :data:`~qjournal.namenode.image_schema.IMAGE_COLUMNS` order)."""
        cols: dict[str, list] = {c: [] for c in IMAGE_COLUMNS}
        apps = [cols[c].append for c in cols]
        for i in sorted(self.inodes):
            for app, v in zip(apps, self.inodes[i].row()):
                app(v)
        return cols

    @classmethod
    def from_image_columns(cls, cols: dict[str, list], last_inode_id: int, *,
                           superuser: str = "root", supergroup: str = "supergroup",
                           permissions_enabled: bool = True, where: str = "image") -> "Namespace":
        """Rebuild a namespace from image rows (``{column: list}``).

        Raises:
            CorruptSegmentError: no root, a dangling parent, a duplicate name or id (naming ``where``).
        """
        ns = cls(superuser, supergroup, permissions_enabled)
        ns.inodes.clear()
        n = len(cols["inode_id"])
        rows = zip(*(cols[c] for c in IMAGE_COLUMNS))
        share = ns._shared.setdefault  # one object per distinct value, as apply keeps them
        for (iid, pid, name, typ, perm, owner, group, mtime, atime, rep, bs, length) in rows:
            if iid in ns.inodes:
                raise CorruptSegmentError(f"{where}: duplicate inode id {iid}", path=where)
            if typ not in ("d", "f"):
                raise CorruptSegmentError(f"{where}: inode {iid} has type {typ!r}", path=where)
            ns.inodes[iid] = INode(iid, pid, name, typ == "d", share(perm, perm), share(owner, owner),
                                   share(group, group), mtime, mtime if atime == mtime else atime,
                                   share(rep, rep), share(bs, bs), length)
        if ROOT_INODE_ID not in ns.inodes or not ns.inodes[ROOT_INODE_ID].is_dir:
            raise CorruptSegmentError(f"{where}: the root directory (inode {ROOT_INODE_ID}) is missing",
                                      path=where)
        for iid in sorted(ns.inodes):
            if iid == ROOT_INODE_ID:
                continue
            node = ns.inodes[iid]
            parent = ns.inodes.get(node.parent)
            if parent is None or not parent.is_dir:
                raise CorruptSegmentError(f"{where}: inode {iid} has no parent directory {node.parent}",
                                          path=where)
            if node.name in parent.children:  # type: ignore[operator]
                raise CorruptSegmentError(f"{where}: duplicate name {node.name!r} in inode {parent.id}",
                                          path=where)
            parent.children[node.name] = iid  # type: ignore[index]
            node.parent = parent.id  # the parent's own id object
        # every inode must be reachable from the root (no cycles)
        if sum(1 for _ in ns._subtree(ROOT_INODE_ID)) != n:
            raise CorruptSegmentError(f"{where}: some inodes are not reachable from the root", path=where)
        ns.last_inode_id = max(last_inode_id, max(ns.inodes))
        return ns


def _check_perm(perm: Any, path: Any, what: str) -> None:
    if not isinstance(perm, int) or isinstance(perm, bool) or not 0 <= perm <= 0o1777:
        raise InvalidRequestError(f"{what} {path}: invalid permission {perm!r} (0..0o1777)", path=str(path))


def _check_replication(replication: Any, path: Any) -> None:
    if not isinstance(replication, int) or isinstance(replication, bool) or not 1 <= replication <= 512:
        raise InvalidRequestError(f"{path}: invalid replication {replication!r} (1..512)", path=str(path))


_APPLY = {
    MkdirOp: Namespace._apply_mkdir, CreateOp: Namespace._apply_create,
    DeleteOp: Namespace._apply_delete, RenameOp: Namespace._apply_rename,
    SetPermissionOp: Namespace._apply_set_permission, SetOwnerOp: Namespace._apply_set_owner,
    SetTimesOp: Namespace._apply_set_times, SetReplicationOp: Namespace._apply_set_replication,
    StartLogSegmentOp: Namespace._apply_segment_marker, EndLogSegmentOp: Namespace._apply_segment_marker,
}

__all__ = ["CallContext", "INode", "Namespace", "split_path", "join_path", "mode_string",
           "READ", "WRITE", "EXECUTE", "FIRST_INODE_ID", "DEFAULT_BLOCK_SIZE", "DEFAULT_REPLICATION"]
