"""Namespace semantics and permission checks, table by table (HDFS behaviour, path in every message)."""

from __future__ import annotations

import re

import pytest

from qjournal.errors import (CorruptSegmentError, DirectoryNotEmptyError, FileAlreadyExistsError,
                             FileNotFoundError_, InvalidRequestError, InvariantViolation,
                             NotADirectoryError_, PermissionDeniedError)
from qjournal.namenode.namespace import READ, WRITE, CallContext, Namespace, mode_string, split_path
from qjournal.namenode.ops import FIRST_INODE_ID, MkdirOp, RenameOp

SU = CallContext("hdfs", ("supergroup",), ts=1)


def fresh():
    ns = Namespace(superuser="hdfs")
    ns.mkdirs(SU, "/d/sub")
    ns.create(SU, "/d/f")
    ns.create(SU, "/g")
    return ns


@pytest.mark.parametrize("call,err,needle", [
    (lambda ns: ns.mkdirs(SU, "/x/y", create_parent=False), FileNotFoundError_, "/x: No such file"),
    (lambda ns: ns.mkdirs(SU, "/d", create_parent=False), FileAlreadyExistsError, "/d: File exists"),
    (lambda ns: ns.mkdirs(SU, "/g"), FileAlreadyExistsError, "/g"),
    (lambda ns: ns.mkdirs(SU, "/g/x"), NotADirectoryError_, "/g (is not a directory)"),
    (lambda ns: ns.create(SU, "/g/x"), NotADirectoryError_, "/g (is not a directory)"),
    (lambda ns: ns.create(SU, "/d"), FileAlreadyExistsError, "is a directory"),
    (lambda ns: ns.create(SU, "/g"), FileAlreadyExistsError, "/g: File exists"),
    (lambda ns: ns.create(SU, "/nope/f"), FileNotFoundError_, "/nope: No such file"),
    (lambda ns: ns.create(SU, "/h", replication=0), InvalidRequestError, "invalid replication"),
    (lambda ns: ns.delete(SU, "/d"), DirectoryNotEmptyError, "/d: Directory is not empty"),
    (lambda ns: ns.delete(SU, "/"), InvalidRequestError, "root"),
    (lambda ns: ns.delete(SU, "/zz"), FileNotFoundError_, "/zz: No such file or directory"),
    (lambda ns: ns.rename(SU, "/d", "/d/sub"), InvalidRequestError, "own subtree"),
    (lambda ns: ns.rename(SU, "/g", "/d/f"), FileAlreadyExistsError, "/d/f: File exists"),
    (lambda ns: ns.rename(SU, "/zz", "/y"), FileNotFoundError_, "/zz"),
    (lambda ns: ns.rename(SU, "/g", "/nope/y"), FileNotFoundError_, "/nope"),
    (lambda ns: ns.set_replication(SU, "/d", 2), InvalidRequestError, "/d: is a directory"),
    (lambda ns: ns.set_permission(SU, "/d", 0o17777), InvalidRequestError, "invalid permission"),
    (lambda ns: ns.mkdirs(SU, "relative"), InvalidRequestError, "absolute"),
    (lambda ns: ns.mkdirs(SU, "/a/../b"), InvalidRequestError, "'..'"),
    (lambda ns: ns.set_owner(SU, "/d"), InvalidRequestError, "neither owner nor group"),
])
def test_errors_leave_the_namespace_unchanged(call, err, needle):
    ns = fresh()
    before = ns.snapshot()
    with pytest.raises(err) as ei:
        call(ns)
    assert needle in str(ei.value)
    assert ns.snapshot() == before


def test_rename_semantics():
    ns = fresh()
    # into an existing directory: moves inside it under its own name
    [op] = ns.rename(SU, "/g", "/d/sub")
    assert isinstance(op, RenameOp) and op.dst_path == "/d/sub/g" and op.overwrite_inode == 0
    assert ns.exists("/d/sub/g") and not ns.exists("/g")
    # a whole directory moves with its subtree
    ns.rename(SU, "/d", "/e")
    assert ns.exists("/e/sub/g") and ns.exists("/e/f") and not ns.exists("/d")
    # overwrite replaces a file and names the replaced inode
    ns.create(SU, "/h")
    old = ns.get_file_info(SU, "/e/f")["inode_id"]
    [op] = ns.rename(SU, "/h", "/e/f", overwrite=True)
    assert op.overwrite_inode == old and old not in ns.inodes
    # onto itself: nothing to log
    assert ns.rename(SU, "/e", "/e") == []
    assert ns.rename(SU, "/e/f", "/e") == []


def test_mkdirs_logs_one_op_per_new_directory_and_ids_count_up():
    ns = Namespace(superuser="hdfs")
    ops = ns.mkdirs(SU, "/a/b/c")
    assert [o.path for o in ops] == ["/a", "/a/b", "/a/b/c"]
    assert [o.inode for o in ops] == [FIRST_INODE_ID, FIRST_INODE_ID + 1, FIRST_INODE_ID + 2]
    assert ns.mkdirs(SU, "/a/b") == []
    ns.delete(SU, "/a", recursive=True)
    [op] = ns.mkdirs(SU, "/a")
    assert op.inode == FIRST_INODE_ID + 3  # ids are never reused


def ctx(user, *groups):
    return CallContext(user, tuple(groups), ts=2)


# (dir owner, dir group, dir perm, caller, caller groups, create allowed?)
PERM_TABLE = [
    ("alice", "staff", 0o755, "alice", (), True),
    ("alice", "staff", 0o555, "alice", (), False),     # owner without w
    ("alice", "staff", 0o775, "bob", ("staff",), True),  # group w
    ("alice", "staff", 0o755, "bob", ("staff",), False),
    ("alice", "staff", 0o757, "carol", (), True),       # other w
    ("alice", "staff", 0o770, "carol", (), False),
    ("alice", "staff", 0o077, "alice", ("staff",), False),  # owner bits win over group/other
    ("alice", "staff", 0o000, "hdfs", (), True),        # superuser
    ("alice", "staff", 0o000, "dave", ("supergroup",), True),  # supergroup
]


@pytest.mark.parametrize("owner,group,perm,user,groups,allowed", PERM_TABLE)
def test_create_permission_table(owner, group, perm, user, groups, allowed):
    ns = Namespace(superuser="hdfs")
    ns.mkdirs(SU, "/p")
    ns.set_owner(SU, "/p", owner, group)
    ns.set_permission(SU, "/p", perm)
    if allowed:
        ns.create(ctx(user, *groups), "/p/f")
        assert ns.get_file_info(SU, "/p/f")["owner"] == user
        assert ns.get_file_info(SU, "/p/f")["group"] == group  # inherited from the parent
    else:
        with pytest.raises(PermissionDeniedError) as ei:
            ns.create(ctx(user, *groups), "/p/f")
        # traverse (EXECUTE) or WRITE_EXECUTE on /p, as HDFS reports it
        assert f'user={user}, access=' in str(ei.value) and f'inode="/p":{owner}:{group}:' in str(ei.value)


def test_traverse_owner_sticky_and_disabled_permissions():
    ns = Namespace(superuser="hdfs")
    ns.mkdirs(SU, "/priv/x")
    ns.set_permission(SU, "/priv", 0o700)
    with pytest.raises(PermissionDeniedError, match="access=EXECUTE"):
        ns.get_file_info(ctx("bob"), "/priv/x")
    with pytest.raises(PermissionDeniedError, match="not the owner"):
        ns.set_permission(ctx("bob"), "/priv", 0o777)
    ns.mkdirs(SU, "/tmp")
    ns.set_permission(SU, "/tmp", 0o1777)
    ns.create(ctx("alice", "users"), "/tmp/a")
    with pytest.raises(PermissionDeniedError, match="sticky bit"):
        ns.delete(ctx("bob", "users"), "/tmp/a")
    ns.delete(ctx("alice", "users"), "/tmp/a")
    # chown: only a superuser changes the owner; an owner may change the group to one of theirs
    ns.create(ctx("alice", "users", "eng"), "/tmp/b")
    with pytest.raises(PermissionDeniedError, match="cannot change the owner"):
        ns.set_owner(ctx("alice", "users"), "/tmp/b", owner="bob")
    ns.set_owner(ctx("alice", "users", "eng"), "/tmp/b", group="eng")
    with pytest.raises(PermissionDeniedError, match="does not belong to group ops"):
        ns.set_owner(ctx("alice", "users"), "/tmp/b", group="ops")
    # checkAccess (FileSystem.access): the same bits, nothing changes
    ns.check_access(ctx("alice"), "/tmp/b", READ | WRITE)
    ns.check_access(ctx("bob"), "/tmp/b", READ)
    with pytest.raises(PermissionDeniedError, match='access=WRITE, inode="/tmp/b"'):
        ns.check_access(ctx("bob", "eng"), "/tmp/b", WRITE)
    with pytest.raises(FileNotFoundError_):
        ns.check_access(ctx("bob"), "/tmp/none", 0)
    with pytest.raises(InvalidRequestError, match="access"):
        ns.check_access(ctx("bob"), "/tmp/b", 8)
    off = Namespace(superuser="hdfs", permissions_enabled=False)
    off.mkdirs(SU, "/priv")
    off.set_permission(SU, "/priv", 0o000)
    off.create(ctx("bob"), "/priv/f")  # dfs.permissions.enabled=false: no checks


def test_reads_list_sorted_and_content_summary():
    ns = fresh()
    ns.create(SU, "/d/sub/big", replication=2)
    # metadata only: no op changes a length; the inode table's row does (an INode is a read-only value)
    ns._table.set_length(ns.get_file_info(SU, "/d/sub/big")["inode_id"], 10)
    assert [s["name"] for s in ns.list_status(SU, "/d")] == ["f", "sub"]
    assert ns.list_status(SU, "/g")[0]["path"] == "/g"
    cs = ns.get_content_summary(SU, "/d")
    assert (cs["directory_count"], cs["file_count"], cs["length"], cs["space_consumed"]) == (2, 2, 10, 20)
    assert ns.get_file_info(SU, "/missing") is None
    for name in ("b", "a", "c", "é"):  # name (code point = UTF-8 byte) order
        ns.create(SU, f"/d/sub/{name}")

    def batch(start, limit):
        out = ns.get_listing(SU, "/d/sub", start, limit)
        return [s["name"] for s in out["entries"]], out["remaining"]
    assert batch("", 2) == (["a", "b"], 3)
    assert batch("b", 2) == (["big", "c"], 1)
    assert batch("bz", None) == (["c", "é"], 0)
    assert batch("zz", 5) == (["é"], 0) and batch("é", 5) == ([], 0)
    assert ns.get_listing(SU, "/g", "x", 1) == {"entries": [ns.get_file_info(SU, "/g")], "remaining": 0}
    with pytest.raises(InvalidRequestError, match="listing limit"):
        ns.get_listing(SU, "/d", "", 0)
    assert mode_string(True, 0o1777) == "drwxrwxrwt" and mode_string(False, 0o1644) == "-rw-r--r-T"


def test_apply_refuses_ops_that_do_not_fit():
    ns = fresh()
    with pytest.raises(InvariantViolation, match="already used"):
        ns.apply(MkdirOp("hdfs", b"\0" * 16, 0, 1, inode=FIRST_INODE_ID, parent=16385, name="z",
                         path="/z"))
    with pytest.raises(InvariantViolation, match="does not exist"):
        ns.apply(MkdirOp("hdfs", b"\0" * 16, 0, 1, inode=99999, parent=12345, name="z", path="/z"))


def test_image_rows_are_checked_on_load():
    ns = fresh()
    cols = ns.to_image_columns()
    bad = {k: list(v) for k, v in cols.items()}
    bad["parent_id"][-1] = 424242
    with pytest.raises(CorruptSegmentError, match="no parent directory 424242"):
        Namespace.from_image_columns(bad, ns.last_inode_id, where="img")
    noroot = {k: v[1:] for k, v in cols.items()}
    with pytest.raises(CorruptSegmentError, match="root directory"):
        Namespace.from_image_columns(noroot, ns.last_inode_id, where="img")
    assert Namespace.from_image_columns(cols, ns.last_inode_id, superuser="hdfs").snapshot() == ns.snapshot()


@pytest.mark.parametrize("path,parts", [
    ("/", []), ("//a//b/", ["a", "b"]), ("/.hidden/a.b/c.", [".hidden", "a.b", "c."]),
    ("/" + "x" * 255, ["x" * 255]), ("/é/" + "é" * 127, ["é", "é" * 127]),
    ("/" + "/".join(["d"] * 1000), ["d"] * 1000),
])
def test_split_path_accepts(path, parts):
    assert split_path(path) == parts


@pytest.mark.parametrize("path,needle", [
    ("a/b", "must be an absolute path"), (7, "must be an absolute path"),
    ("/a/./b", "bad component '.'"), ("/a/..", "bad component '..'"), ("/a:b", "bad component 'a:b'"),
    ("/a\x00", "bad component"), ("/" + "x" * 256, "longer than 255 bytes"),
    ("/" + "é" * 128, "longer than 255 bytes"), ("/ok/" + "é" * 200, "longer than 255 bytes"),
    ("/\udc80", "not valid UTF-8"), ("/" + "/".join(["d"] * 1001), "deeper than 1000"),
])
def test_split_path_refuses_naming_the_path(path, needle):
    with pytest.raises(InvalidRequestError, match=re.escape(needle)):
        split_path(path)
