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
5. Every inode but the root is in exactly one directory's children, under its own name, and its parent
   chain reaches the root (an image whose rows break this is refused when loaded).

Storage (memory: ~200 B per file, no object per inode for the garbage collector): every inode's fields are a
row of the :class:`~qjournal.namenode.inode_table.InodeTable` (flat arrays in inode-id order, shared
copy-on-write with a checkpoint's snapshot); a directory's children are a dict ``name -> inode id`` in
``_children``, whose keys are the row names' own str objects. :attr:`Namespace.inodes` is a read-only view
that builds an :class:`INode` value per lookup (tools and tests).
"""

from __future__ import annotations

import bisect
import operator
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain, islice
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Iterable, Iterator, NamedTuple

from qjournal.errors import (CorruptSegmentError, DirectoryNotEmptyError, FileAlreadyExistsError,
                             FileNotFoundError_, InvalidRequestError, InvariantViolation, NotADirectoryError_,
                             PermissionDeniedError)
from qjournal.namenode.image_schema import IMAGE_COLUMNS
from qjournal.namenode.inode_table import DEAD, Attrs, InodeTable, TableSnapshot
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


class INode(NamedTuple):
    """One file or directory (metadata only), as read from the namespace: a value, not the storage
    (``Namespace.inodes``; the namespace changes only through its mutations and ``apply``)."""

    id: int
    parent: int
    name: str
    is_dir: bool
    perm: int
    owner: str
    group: str
    mtime: int
    atime: int = 0
    replication: int = 0
    block_size: int = 0
    length: int = 0
    #: name -> inode id (read-only), directories only
    children: Mapping[str, int] | None = None

    def row(self) -> tuple:
        """The image row (``image_schema.IMAGE_COLUMNS`` order)."""
        return (self.id, self.parent, self.name, "d" if self.is_dir else "f", self.perm,
                self.owner, self.group, self.mtime, self.atime, self.replication,
                self.block_size, self.length)


class ImageBatch(NamedTuple):
    """Image rows in inode-id order, as the image loader hands them to :meth:`Namespace.from_image_batches`.

    Attributes:
        ids, parents, mtimes, atimes, lengths: ``array('q')`` columns.
        names: the names (str).
        attr_keys: ``array('I')``: each row's index into ``attr_values``.
        attr_values: the distinct ``(type, permission, owner, group, replication, block_size)`` of the rows.
        by_parent: the row indexes ordered by parent id (``array('q')``): the rows of one directory together,
            so that its children dict is filled by one ``update`` (no Python step per row).
        run_parents, run_ends: the runs of ``by_parent``: run i holds the rows ``by_parent[run_ends[i-1]:
            run_ends[i]]``, all children of ``run_parents[i]``.
        dir_rows: the indexes of the directory rows (``array('q')``).
    """

    ids: array
    parents: array
    names: list
    attr_keys: array
    attr_values: list
    mtimes: array
    atimes: array
    lengths: array
    by_parent: array
    run_parents: array
    run_ends: array
    dir_rows: array

    @classmethod
    def of_rows(cls, rows: list[tuple]) -> "ImageBatch":
        """A batch of image rows (``INode.row`` tuples, in id order), its groups found in Python (small
        inputs: ``from_image_columns``; the image loader finds them with Arrow)."""
        values: dict[tuple, int] = {}
        keys = array("I", (values.setdefault(tuple(r[3:7]) + (r[9], r[10]), len(values)) for r in rows))
        parents = array("q", (r[1] for r in rows))
        by_parent = array("q", sorted(range(len(rows)), key=parents.__getitem__))
        run_parents, run_ends = array("q"), array("q")
        for i, k in enumerate(by_parent):
            if run_parents and run_parents[-1] == parents[k]:
                run_ends[-1] = i + 1
            else:
                run_parents.append(parents[k])
                run_ends.append(i + 1)
        return cls(array("q", (r[0] for r in rows)), parents, [r[2] for r in rows], keys, list(values),
                   array("q", (r[7] for r in rows)), array("q", (r[8] for r in rows)),
                   array("q", (r[11] for r in rows)), by_parent, run_parents, run_ends,
                   array("q", (k for k, r in enumerate(rows) if r[3] == "d")))


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
        #: every inode's row (module docstring, "Storage")
        self._table = InodeTable()
        #: directory id -> its children (name -> inode id)
        self._children: dict[int, dict[str, int]] = {ROOT_INODE_ID: {}}
        self._table.add(ROOT_INODE_ID, 0, "", Attrs(True, 0o755, superuser, supergroup, 0, 0), root_mtime, 0, 0)
        self.last_inode_id = ROOT_INODE_ID

    # ------------------------------------------------------------------ state
    @property
    def inodes(self) -> "InodesView":
        """A read-only mapping ``inode id -> INode`` (each lookup builds the value)."""
        return InodesView(self)

    def inode(self, inode_id: int) -> INode | None:
        """The inode ``inode_id`` as a value, or None."""
        got = self._table.get(inode_id)
        if got is None:
            return None
        parent, name, a, mtime, atime, length = got
        ch = self._children.get(inode_id)
        return INode(inode_id, parent, name, a.is_dir, a.perm, a.owner, a.group, mtime, atime, a.replication,
                     a.block_size, length, None if ch is None else MappingProxyType(ch))

    @property
    def root(self) -> INode:
        return self.inode(ROOT_INODE_ID)  # type: ignore[return-value]

    def snapshot(self) -> tuple:
        """A comparable value of the whole state (tests: replay equality)."""
        return (self.last_inode_id, tuple(_row(r) for r in self._table.rows()))

    def __len__(self) -> int:
        return len(self._table)

    def path_of(self, inode_id: int) -> str:
        parts = []
        table = self._table
        n = inode_id
        while n != ROOT_INODE_ID:
            parent, name, *_rest = table.get(n)  # type: ignore[misc]
            parts.append(name)
            n = parent
        return "/" + "/".join(reversed(parts))

    def _attrs(self, inode_id: int) -> Attrs:
        return self._table.attrs(inode_id)  # type: ignore[return-value]

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
    def _allows(ctx: CallContext, a: Attrs, access: int) -> bool:
        """The owner, group or other bits of an inode's attrs ``a`` grant ``access`` to ``ctx`` (no superuser
        rule)."""
        if ctx.user == a.owner:
            bits = (a.perm >> 6) & 7
        elif a.group in ctx.groups:
            bits = (a.perm >> 3) & 7
        else:
            bits = a.perm & 7
        return bits & access == access

    def _check(self, ctx: CallContext, a: Attrs, access: int, path: str) -> None:
        if not self._is_super(ctx) and not self._allows(ctx, a, access):
            self._refuse(ctx, a, access, path)

    @staticmethod
    def _refuse(ctx: CallContext, a: Attrs, access: int, path: str) -> None:
        """Raise HDFS's permission-denied error for ``access`` to the inode of attrs ``a`` (at ``path``)."""
        raise PermissionDeniedError(
                f"Permission denied: user={ctx.user}, access={_ACCESS_NAMES.get(access, access)}, "
                f"inode=\"{path}\":{a.owner}:{a.group}:{mode_string(a.is_dir, a.perm)}",
                path=path, user=ctx.user)

    def _check_owner(self, ctx: CallContext, a: Attrs, path: str) -> None:
        if self._is_super(ctx) or ctx.user == a.owner:
            return
        raise PermissionDeniedError(
            f"Permission denied. user={ctx.user} is not the owner of inode={path}",
            path=path, user=ctx.user)

    # ------------------------------------------------------------ resolution
    def _resolve(self, ctx: CallContext | None, path: str,
                 parts: list[str] | None = None) -> tuple[list[int], list[str]]:
        """Walk ``path``; returns (ids of the existing inodes from the root, components).

        The list is shorter than ``parts`` + 1 when the path does not fully exist.
        Traverse (EXECUTE) permission is checked on every directory passed through.

        Raises:
            NotADirectoryError_: a non-final component is a file.
            PermissionDeniedError: no EXECUTE on a directory on the way.
        """
        if parts is None:
            parts = split_path(path)
        children = self._children
        cur = ROOT_INODE_ID
        ids = [cur]
        check = ctx is not None and not self._is_super(ctx)
        for i, p in enumerate(parts):
            ch = children.get(cur)
            if ch is None:
                raise NotADirectoryError_(
                    f"{join_path(parts[:i])} (is not a directory) in path {path}",
                    path=join_path(parts[:i]))
            if check:
                a = self._attrs(cur)
                if not self._allows(ctx, a, EXECUTE):  # type: ignore[arg-type]
                    self._refuse(ctx, a, EXECUTE, join_path(parts[:i]))  # type: ignore[arg-type]
            cid = ch.get(p)
            if cid is None:
                break
            cur = cid
            ids.append(cid)
        return ids, parts

    def _get(self, ctx: CallContext | None, path: str) -> tuple[int, list[int], list[str]]:
        ids, parts = self._resolve(ctx, path)
        if len(ids) != len(parts) + 1:
            raise FileNotFoundError_(f"{path}: No such file or directory", path=path)
        return ids[-1], ids, parts

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
        ids, parts = self._resolve(ctx, path)
        if len(ids) == len(parts) + 1:
            if ids[-1] not in self._children:
                raise FileAlreadyExistsError(f"{path}: File exists (is not a directory)", path=path)
            if not create_parent:
                raise FileAlreadyExistsError(f"{path}: File exists", path=path)
            return []
        existing = len(ids) - 1
        pid = ids[-1]
        if pid not in self._children:
            raise NotADirectoryError_(f"{join_path(parts[:existing])} (is not a directory) in path {path}",
                                      path=join_path(parts[:existing]))
        if not create_parent and existing != len(parts) - 1:
            raise FileNotFoundError_(f"{join_path(parts[:-1])}: No such file or directory "
                                     f"(parent of {path})", path=join_path(parts[:-1]))
        pa = self._attrs(pid)
        self._check(ctx, pa, WRITE | EXECUTE, join_path(parts[:existing]))
        ops: list[EditOp] = []
        group = pa.group
        next_id = self.last_inode_id
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
        ids, parts = self._resolve(ctx, path)
        if not parts:
            raise FileAlreadyExistsError(f"{path}: File exists (is a directory)", path=path)
        overwrite_id = 0
        children = self._children
        if len(ids) == len(parts) + 1:
            cur = ids[-1]
            if cur in children:
                raise FileAlreadyExistsError(f"{path}: File exists (is a directory)", path=path)
            if not overwrite:
                raise FileAlreadyExistsError(f"{path}: File exists", path=path)
            overwrite_id = cur
            parent = ids[-2]
        elif len(ids) == len(parts):
            parent = ids[-1]
            if parent not in children:
                raise NotADirectoryError_(f"{join_path(parts[:-1])} (is not a directory) in path {path}",
                                          path=join_path(parts[:-1]))
        else:
            raise FileNotFoundError_(f"{join_path(parts[:-1])}: No such file or directory "
                                     f"(parent of {path})", path=join_path(parts[:-1]))
        pa = self._attrs(parent)
        if not self._is_super(ctx) and not self._allows(ctx, pa, WRITE | EXECUTE):
            self._refuse(ctx, pa, WRITE | EXECUTE, join_path(parts[:-1]))  # the path built only here
        op = CreateOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=self.last_inode_id + 1,
                      parent=parent, name=parts[-1], path=join_path(parts), perm=perm & 0o1777,
                      owner=ctx.user, group=pa.group, mtime=ctx.ts, atime=ctx.ts,
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
        node, ids, parts = self._get(ctx, path)
        if not parts:
            raise InvalidRequestError("Cannot delete the root directory /", path="/")
        children = self._children
        ch = children.get(node)
        if ch and not recursive:
            raise DirectoryNotEmptyError(f"{path}: Directory is not empty", path=path)
        parent = ids[-2]
        pa = self._attrs(parent)
        self._check(ctx, pa, WRITE | EXECUTE, join_path(parts[:-1]))
        self._check_sticky(ctx, pa, self._attrs(node), path)
        if ch and not self._is_super(ctx):
            for sub_id in self._subtree(node):
                if children.get(sub_id):
                    self._check(ctx, self._attrs(sub_id), READ | WRITE | EXECUTE, self.path_of(sub_id))
        op = DeleteOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node,
                      parent=parent, path=join_path(parts), mtime=ctx.ts)
        self.apply(op)
        return [op]

    def _check_sticky(self, ctx: CallContext, parent: Attrs, node: Attrs, path: str) -> None:
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
        node, sids, sparts = self._get(ctx, src)
        if not sparts:
            raise InvalidRequestError("Cannot rename the root directory /", path="/")
        children = self._children
        dids, dparts = self._resolve(ctx, dst)
        if len(dids) == len(dparts) + 1 and dids[-1] in children and dids[-1] != node:
            # into an existing directory: move inside it
            dparts = dparts + [sparts[-1]]
            dids, dparts = self._resolve(ctx, join_path(dparts), dparts)
        dst_path = join_path(dparts)
        src_path = join_path(sparts)
        if dparts == sparts:
            return []  # rename onto itself: nothing to do (HDFS returns true)
        if dparts[:len(sparts)] == sparts:
            raise InvalidRequestError(
                f"rename {src_path} to {dst_path}: a directory cannot be moved into its own subtree",
                path=src_path)
        overwrite_id = 0
        node_is_dir = node in children
        if len(dids) == len(dparts) + 1:
            target = dids[-1]
            if not overwrite:
                raise FileAlreadyExistsError(f"rename destination {dst_path}: File exists", path=dst_path)
            target_is_dir = target in children
            if target_is_dir and children[target]:
                raise DirectoryNotEmptyError(f"rename destination {dst_path}: Directory is not empty",
                                             path=dst_path)
            if target_is_dir != node_is_dir:
                raise FileAlreadyExistsError(
                    f"rename destination {dst_path}: cannot overwrite a "
                    f"{'directory' if target_is_dir else 'file'} with a "
                    f"{'directory' if node_is_dir else 'file'}", path=dst_path)
            overwrite_id = target
            dparent = dids[-2]
        elif len(dids) == len(dparts):
            dparent = dids[-1]
            if dparent not in children:
                raise NotADirectoryError_(f"{join_path(dparts[:-1])} (is not a directory) in path {dst_path}",
                                          path=join_path(dparts[:-1]))
        else:
            raise FileNotFoundError_(f"rename destination parent {join_path(dparts[:-1])}: "
                                     f"No such file or directory", path=join_path(dparts[:-1]))
        sparent = sids[-2]
        spa = self._attrs(sparent)
        self._check(ctx, spa, WRITE | EXECUTE, join_path(sparts[:-1]))
        self._check_sticky(ctx, spa, self._attrs(node), src_path)
        self._check(ctx, self._attrs(dparent), WRITE | EXECUTE, join_path(dparts[:-1]))
        op = RenameOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node,
                      src_parent=sparent, dst_parent=dparent, dst_name=dparts[-1],
                      src_path=src_path, dst_path=dst_path, mtime=ctx.ts, overwrite_inode=overwrite_id)
        self.apply(op)
        return [op]

    def set_permission(self, ctx: CallContext, path: str, perm: int) -> list[EditOp]:
        """chmod. Raises FileNotFoundError_, PermissionDeniedError (not the owner), InvalidRequestError."""
        if not isinstance(perm, int) or isinstance(perm, bool) or not 0 <= perm <= 0o1777:
            raise InvalidRequestError(f"chmod {path}: invalid permission {perm!r}", path=str(path))
        node, _ids, parts = self._get(ctx, path)
        self._check_owner(ctx, self._attrs(node), join_path(parts))
        op = SetPermissionOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node,
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
        node, _ids, parts = self._get(ctx, path)
        p = join_path(parts)
        if not self._is_super(ctx):
            a = self._attrs(node)
            if owner is not None and owner != a.owner:
                raise PermissionDeniedError(f"Permission denied: user={ctx.user} is not a superuser "
                                            f"and cannot change the owner of {p}", path=p, user=ctx.user)
            self._check_owner(ctx, a, p)
            if group is not None and group not in ctx.groups:
                raise PermissionDeniedError(f"Permission denied: user={ctx.user} does not belong to "
                                            f"group {group} (path {p})", path=p, user=ctx.user)
        op = SetOwnerOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node, path=p,
                        owner=owner, group=group)
        self.apply(op)
        return [op]

    def set_times(self, ctx: CallContext, path: str, mtime: int = -1, atime: int = -1) -> list[EditOp]:
        """Set mtime / atime (-1 = unchanged). Needs WRITE on the inode (or ownership)."""
        for v, what in ((mtime, "mtime"), (atime, "atime")):
            check_int(v, what, path, -1)
        node, _ids, parts = self._get(ctx, path)
        p = join_path(parts)
        a = self._attrs(node)
        if ctx.user != a.owner:
            self._check(ctx, a, WRITE, p)
        op = SetTimesOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node, path=p,
                        mtime=mtime, atime=atime)
        self.apply(op)
        return [op]

    def set_replication(self, ctx: CallContext, path: str, replication: int) -> list[EditOp]:
        """setrep on a file. Raises FileNotFoundError_, PermissionDeniedError, InvalidRequestError (a directory)."""
        _check_replication(replication, path)
        node, _ids, parts = self._get(ctx, path)
        p = join_path(parts)
        a = self._attrs(node)
        if a.is_dir:
            raise InvalidRequestError(f"setReplication {p}: is a directory", path=p)
        self._check(ctx, a, WRITE, p)
        op = SetReplicationOp(ctx.user, ctx.client_id, ctx.call_id, ctx.ts, inode=node, path=p,
                              replication=replication)
        self.apply(op)
        return [op]

    # ----------------------------------------------------------------- reads
    def status_of(self, inode_id: int, path: str) -> dict:
        """A FileStatus dict for the inode ``inode_id`` at ``path``."""
        parent, name, a, mtime, atime, length = self._table.get(inode_id)  # type: ignore[misc]
        ch = self._children.get(inode_id)
        return {"path": path, "name": name, "type": "d" if a.is_dir else "f",
                "permission": a.perm, "owner": a.owner, "group": a.group,
                "mtime": mtime, "atime": atime, "replication": a.replication,
                "block_size": a.block_size, "length": length, "inode_id": inode_id,
                "children_num": len(ch) if ch is not None else 0}

    def check_access(self, ctx: CallContext, path: str, access: int) -> None:
        """HDFS ``checkAccess`` (``FileSystem.access``): may the caller ``access`` the path?

        Args:
            access: the wanted bits, ``READ | WRITE | EXECUTE`` (0..7).

        Raises:
            FileNotFoundError_, PermissionDeniedError (naming the access), InvalidRequestError (bad ``access``).
        """
        check_int(access, "access", path, 0, 7)
        node, _ids, parts = self._get(ctx, path)
        self._check(ctx, self._attrs(node), access, join_path(parts))

    def get_file_info(self, ctx: CallContext, path: str) -> dict | None:
        """stat; None when the path does not exist (as HDFS getFileInfo)."""
        ids, parts = self._resolve(ctx, path)
        if len(ids) != len(parts) + 1:
            return None
        return self.status_of(ids[-1], join_path(parts))

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
        node, _ids, parts = self._get(ctx, path)
        p = join_path(parts)
        ch = self._children.get(node)
        if ch is None:
            return {"entries": [self.status_of(node, p)], "remaining": 0}
        self._check(ctx, self._attrs(node), READ | EXECUTE, p)
        base = p.rstrip("/")
        names = sorted(ch)
        first = bisect.bisect_right(names, start_after) if start_after else 0
        last = len(names) if limit is None else min(len(names), first + limit)
        return {"entries": [self.status_of(ch[n], f"{base}/{n}") for n in names[first:last]],
                "remaining": len(names) - last}

    def get_content_summary(self, ctx: CallContext, path: str) -> dict:
        """du / count: length, file_count, directory_count (including itself), space_consumed.

        Raises:
            FileNotFoundError_, PermissionDeniedError (no READ|EXECUTE on a directory of the subtree).
        """
        node, _ids, parts = self._get(ctx, path)
        length = files = dirs = space = 0
        get = self._table.get
        for nid in self._subtree(node):
            _parent, _name, a, _m, _t, ln = get(nid)  # type: ignore[misc]
            if a.is_dir:
                dirs += 1
                self._check(ctx, a, READ | EXECUTE, self.path_of(nid))
            else:
                files += 1
                length += ln
                space += ln * a.replication
        return {"path": join_path(parts), "length": length, "file_count": files,
                "directory_count": dirs, "quota": -1, "space_consumed": space,
                "space_quota": -1}

    def _subtree(self, root_id: int) -> Iterator[int]:
        stack = [root_id]
        children = self._children
        while stack:
            nid = stack.pop()
            yield nid
            ch = children.get(nid)
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

    def _node(self, inode_id: int, op: EditOp, want_dir: bool | None = None) -> tuple:
        """The row ``(parent, name, attrs, mtime, atime, length)`` of an inode an op names.

        Raises:
            InvariantViolation: it does not exist, or is not (or is) a directory as ``want_dir`` says.
        """
        n = self._table.get(inode_id)
        if n is None:
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} does not exist")
        if want_dir is not None and n[2].is_dir != want_dir:
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} is_dir={n[2].is_dir}, expected {want_dir}")
        return n

    def _add(self, op: EditOp, nid: int, parent: int, name: str, attrs: tuple, mtime: int, atime: int,
             length: int) -> None:
        if nid <= ROOT_INODE_ID or (nid <= self.last_inode_id and nid in self._table):
            raise InvariantViolation(f"{op.NAME}: inode id {nid} is already used")
        children = self._children.get(parent)
        if children is None:
            self._node(parent, op, True)  # raises, naming what is wrong
            raise AssertionError("unreachable: a directory without children")  # pragma: no cover
        if name in children:
            raise InvariantViolation(f"{op.NAME}: {name!r} already exists in inode {parent}")
        self._table.add(nid, parent, name, attrs, mtime, atime, length, op.mtime)  # type: ignore[attr-defined]
        children[name] = nid
        if attrs[0]:
            self._children[nid] = {}
        if nid > self.last_inode_id:
            self.last_inode_id = nid

    def _remove_subtree(self, op: EditOp, inode_id: int) -> None:
        parent, name, *_rest = self._node(inode_id, op)
        pch = self._children.get(parent)
        if pch is None:
            self._node(parent, op, True)  # raises
        if pch.get(name) != inode_id:  # type: ignore[union-attr]
            raise InvariantViolation(f"{op.NAME}: inode {inode_id} is not a child of {parent}")
        del pch[name]  # type: ignore[union-attr]
        table, children = self._table, self._children
        for sid in list(self._subtree(inode_id)):
            table.delete(sid)
            children.pop(sid, None)

    def _apply_mkdir(self, op: MkdirOp) -> None:
        nid, name = op.inode, op.name
        children = self._children.get(op.parent)
        if nid <= self.last_inode_id or children is None or name in children:  # _add raises or inserts
            self._add(op, nid, op.parent, name, (True, op.perm, op.owner, op.group, 0, 0), op.mtime, 0, 0)
            return
        self._table.add(nid, op.parent, name, (True, op.perm, op.owner, op.group, 0, 0), op.mtime, 0, 0, op.mtime)
        children[name] = nid
        self._children[nid] = {}
        self.last_inode_id = nid

    def _apply_create(self, op: CreateOp) -> None:
        if op.overwrite_inode:
            old_parent, old_name, *_rest = self._node(op.overwrite_inode, op, False)
            if old_parent != op.parent or old_name != op.name:
                raise InvariantViolation(f"{op.NAME}: overwrite_inode {op.overwrite_inode} is not {op.path}")
            self._remove_subtree(op, op.overwrite_inode)
        nid, name = op.inode, op.name
        children = self._children.get(op.parent)
        attrs = (False, op.perm, op.owner, op.group, op.replication, op.block_size)
        if nid <= self.last_inode_id or children is None or name in children:  # _add raises or inserts
            self._add(op, nid, op.parent, name, attrs, op.mtime, op.atime, op.length)
            return
        # the common case, inline (the replay's hot path): a new id above every one, a free name
        self._table.add(nid, op.parent, name, attrs, op.mtime, op.atime, op.length, op.mtime)
        children[name] = nid
        self.last_inode_id = nid

    def _apply_delete(self, op: DeleteOp) -> None:
        parent, *_rest = self._node(op.inode, op)
        if parent != op.parent:
            raise InvariantViolation(f"{op.NAME}: inode {op.inode} has parent {parent}, op says {op.parent}")
        self._remove_subtree(op, op.inode)
        self._table.set_mtime(op.parent, op.mtime)

    def _apply_rename(self, op: RenameOp) -> None:
        got = self._table.parent_name(op.inode)
        if got is None:
            self._node(op.inode, op)  # raises
        parent, name = got  # type: ignore[misc]
        if parent != op.src_parent:
            raise InvariantViolation(f"{op.NAME}: inode {op.inode} has parent {parent}, "
                                     f"op says {op.src_parent}")
        dch = self._children.get(op.dst_parent)  # every directory has its children dict
        if dch is None:
            self._node(op.dst_parent, op, True)  # raises, naming what is wrong
        if op.overwrite_inode:
            old_parent, old_name, *_rest = self._node(op.overwrite_inode, op)
            if old_parent != op.dst_parent or old_name != op.dst_name:
                raise InvariantViolation(f"{op.NAME}: overwrite_inode {op.overwrite_inode} is not {op.dst_path}")
            self._remove_subtree(op, op.overwrite_inode)
        if op.dst_name in dch:
            raise InvariantViolation(f"{op.NAME}: {op.dst_name!r} already exists in inode {op.dst_parent}")
        # the destination parent must not be inside the moved subtree (only a directory has one)
        table = self._table
        if op.inode in self._children:
            a = op.dst_parent
            while a != ROOT_INODE_ID:
                if a == op.inode:
                    raise InvariantViolation(f"{op.NAME}: inode {op.inode} moved into its own subtree")
                a = table.parent(a)  # type: ignore[assignment]
        del self._children[parent][name]
        table.move(op.inode, op.dst_parent, op.dst_name)
        dch[op.dst_name] = op.inode  # type: ignore[index]
        table.set_mtime(parent, op.mtime)
        if op.dst_parent != parent:
            table.set_mtime(op.dst_parent, op.mtime)

    def _apply_set_permission(self, op: SetPermissionOp) -> None:
        a = self._node(op.inode, op)[2]
        self._table.set_attrs(op.inode, a._replace(perm=op.perm))

    def _apply_set_owner(self, op: SetOwnerOp) -> None:
        a = self._node(op.inode, op)[2]
        if op.owner is not None:
            a = a._replace(owner=op.owner)
        if op.group is not None:
            a = a._replace(group=op.group)
        self._table.set_attrs(op.inode, a)

    def _apply_set_times(self, op: SetTimesOp) -> None:
        self._node(op.inode, op)
        if op.mtime != -1:
            self._table.set_mtime(op.inode, op.mtime)
        if op.atime != -1:
            self._table.set_atime(op.inode, op.atime)

    def _apply_set_replication(self, op: SetReplicationOp) -> None:
        a = self._node(op.inode, op, False)[2]
        self._table.set_attrs(op.inode, a._replace(replication=op.replication))

    def _apply_segment_marker(self, op: EditOp) -> None:
        return None

    # ----------------------------------------------------------------- image
    def image_snapshot(self) -> TableSnapshot:
        """The rows as they are now, for the checkpoint's thread (copy on write: O(chunks), and the rows it
        holds never change; ``image.save_image`` writes it)."""
        return self._table.snapshot()

    def to_image_columns(self) -> dict[str, list]:
        """Rows for :func:`qjournal.namenode.image.save_image`, sorted by inode id (``INode.row``
        gives the values in :data:`~qjournal.namenode.image_schema.IMAGE_COLUMNS` order)."""
        cols: dict[str, list] = {c: [] for c in IMAGE_COLUMNS}
        apps = [cols[c].append for c in cols]
        for r in self._table.rows():
            for app, v in zip(apps, _row(r)):
                app(v)
        return cols

    @classmethod
    def from_image_columns(cls, cols: dict[str, list], last_inode_id: int, *,
                           superuser: str = "root", supergroup: str = "supergroup",
                           permissions_enabled: bool = True, where: str = "image") -> "Namespace":
        """Rebuild a namespace from image rows (``{column: list}``, in any order).

        Raises:
            CorruptSegmentError: no root, a dangling parent, a duplicate name or id (naming ``where``).
        """
        rows = sorted(zip(*(cols[c] for c in IMAGE_COLUMNS)), key=lambda r: r[0])
        batch = ImageBatch.of_rows(rows)
        return cls.from_image_batches([batch], last_inode_id, superuser=superuser, supergroup=supergroup,
                                      permissions_enabled=permissions_enabled, where=where)

    @classmethod
    def from_image_batches(cls, batches: Iterable[ImageBatch], last_inode_id: int, *,
                           superuser: str = "root", supergroup: str = "supergroup",
                           permissions_enabled: bool = True, where: str = "image") -> "Namespace":
        """Rebuild a namespace from image rows in inode-id order, batch after batch (the NameNode's start-up:
        ``image.iter_image_batches`` streams them from the file; no whole-table copy is ever made).

        Raises:
            CorruptSegmentError: rows out of order or a duplicate id, a bad type, no root, a dangling
                parent, a duplicate name, an inode not reachable from the root (invariant 5), naming ``where``.
        """
        ns = cls(superuser, supergroup, permissions_enabled)
        table = ns._table = InodeTable()
        children: dict[int, dict[str, int]] = {}
        ns._children = children
        dir_parents: dict[int, int] = {}
        pending: list[tuple[int, list]] = []  # children of a directory not met yet (a rename moved them there)
        prev = 0
        for b in batches:
            n = len(b.ids)
            if n == 0:
                continue
            keymap = []
            for k, (typ, perm, owner, group, rep, bs) in enumerate(b.attr_values):
                if typ not in ("d", "f"):
                    bad = next(i for i, key in zip(b.ids, b.attr_keys) if key == k)
                    raise CorruptSegmentError(f"{where}: inode {bad} has type {typ!r}", path=where)
                keymap.append(table.attrs_index(Attrs(typ == "d", perm, owner, group, rep, bs)))
            ids = b.ids
            if ids[0] <= prev or not all(map(operator.lt, ids, islice(ids, 1, None))):
                a, c = next((a, c) for a, c in zip(chain((prev,), ids), ids) if c <= a)
                what = f"duplicate inode id {c}" if c == a else f"inode id {c} after {a}"
                raise CorruptSegmentError(f"{where}: {what}: rows are not sorted by unique inode_id", path=where)
            root_parent = b.parents[0] if prev == 0 and ids[0] == ROOT_INODE_ID else None
            prev = ids[-1]
            idl = ids.tolist()  # the id objects the children dicts keep
            names, parents = b.names, b.parents
            for k in b.dir_rows:
                children[idl[k]] = {}
                dir_parents[idl[k]] = parents[k]
            start = 0
            order = b.by_parent
            for p, end in zip(b.run_parents, b.run_ends):
                rows = order[start:end]
                start, size = end, end - start
                if size == 1:
                    items: Any = ((names[rows[0]], idl[rows[0]]),)
                else:
                    get = itemgetter(*rows)
                    items = zip(get(names), get(idl))
                if p == root_parent:  # the root's own row: in no directory (its parent, 0, is none)
                    items = [(nm, i) for nm, i in items if i != ROOT_INODE_ID]
                    size = len(items)
                    if not size:
                        continue
                ch = children.get(p)
                if ch is None:
                    pending.append((p, list(items)))
                    continue
                before = len(ch)
                ch.update(items)
                if len(ch) - before != size:
                    _raise_duplicate(where, p, ch, [names[k] for k in rows])
            table.load_rows(ids, parents, names, array("q", map(keymap.__getitem__, b.attr_keys)),
                            b.mtimes, b.atimes, b.lengths)
        if ROOT_INODE_ID not in children:
            raise CorruptSegmentError(f"{where}: the root directory (inode {ROOT_INODE_ID}) is missing",
                                      path=where)
        for p, items in pending:
            ch = children.get(p)
            if ch is None:
                raise CorruptSegmentError(f"{where}: inode {items[0][1]} has no parent directory {p}", path=where)
            before = len(ch)
            ch.update(items)
            if len(ch) - before != len(items):
                _raise_duplicate(where, p, ch, [nm for nm, _i in items])
        # every directory's parent chain reaches the root (then so does every file's: its parent is one)
        reachable = {ROOT_INODE_ID}
        for d in dir_parents:
            chain_: list[int] = []
            x = d
            while x not in reachable:
                if x in chain_ or x not in dir_parents:
                    raise CorruptSegmentError(f"{where}: some inodes are not reachable from the root", path=where)
                chain_.append(x)
                x = dir_parents[x]
            reachable.update(chain_)
        ns.last_inode_id = max(last_inode_id, table.max_id())
        return ns


def _raise_duplicate(where: str, parent: int, children: dict, names: list[str]) -> None:
    """Raise for the name of ``names`` that was already in ``children`` or is twice in ``names``."""
    seen: set[str] = set()
    for nm in names:
        if nm in seen:
            break
        seen.add(nm)
    else:
        nm = names[0]
    raise CorruptSegmentError(f"{where}: duplicate name {nm!r} in inode {parent}", path=where)


class InodesView(Mapping):
    """``Namespace.inodes``: inode id -> :class:`INode`, read-only, ids in increasing order."""

    def __init__(self, ns: Namespace) -> None:
        self._ns = ns

    def __getitem__(self, inode_id: int) -> INode:
        n = self._ns.inode(inode_id) if type(inode_id) is int else None
        if n is None:
            raise KeyError(inode_id)
        return n

    def __contains__(self, inode_id: object) -> bool:
        return inode_id in self._ns._table

    def __iter__(self) -> Iterator[int]:
        return self._ns._table.ids()

    def __len__(self) -> int:
        return len(self._ns._table)


def _row(r: tuple) -> tuple:
    """An image row (``INode.row``) of an inode table row."""
    iid, parent, name, a, mtime, atime, length = r
    return (iid, parent, name, "d" if a.is_dir else "f", a.perm, a.owner, a.group, mtime, atime,
            a.replication, a.block_size, length)


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

__all__ = ["CallContext", "INode", "ImageBatch", "Namespace", "split_path", "join_path", "mode_string",
           "READ", "WRITE", "EXECUTE", "FIRST_INODE_ID", "DEFAULT_BLOCK_SIZE", "DEFAULT_REPLICATION"]
