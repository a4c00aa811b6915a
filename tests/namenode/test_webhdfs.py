"""WebHDFS on the NameNode's HTTP server, in process over real HTTP: every operation and its JSON shape
(checked against the namespace itself), Hadoop's error shapes and statuses, identity and server-side
groups, garbage requests (never a 500), the HA gate (standby and observer), and fsspec's WebHDFS client.

One NameNode (HA-configured, made active) serves the whole module from a background event loop; the
tests speak HTTP with ``requests`` (and fsspec on top of it) from the test thread.
"""

from __future__ import annotations

import asyncio
import grp
import os
import pwd
import socket
import threading
import urllib.parse

import fsspec
import pytest
import requests
from aiohttp import web

from qjournal.config import Configuration
from qjournal.errors import ConfigError, ObserverRetryOnActiveError, QJournalError, RpcTimeoutError, StandbyError
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import format_namenode
from qjournal.security.groups import GroupMapping, parse_static_overrides, unix_groups
from qjournal.namenode.http import NameNodeHttpServer
from qjournal.namenode.webhdfs import DATA_STEP, WebHdfs, hadoop_exception_of
from qjournal.transport.http import start_site

OVERRIDES = "hdfs=supergroup;alice=staff,users;bob=;dr.who=;"
FILE_STATUS_KEYS = {"accessTime", "blockSize", "childrenNum", "fileId", "group", "length", "modificationTime",
                    "owner", "pathSuffix", "permission", "replication", "storagePolicy", "type"}


class Server:
    """A NameNode and its HTTP server on a background loop, plus a second WebHDFS without a static user."""

    def __init__(self, tmp: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        conf = Configuration()
        for k, v in {"dfs.namenode.name.dir": f"file://{tmp}/name", "qjournal.namenode.superuser": "hdfs",
                     "dfs.namenode.checkpoint.check.period": "3600s", "dfs.ha.log-roll.period": "0",
                     "dfs.namenode.shared.edits.dir": f"file://{tmp}/shared", "dfs.ha.tail-edits.period": "3600s",
                     "hadoop.user.group.static.mapping.overrides": OVERRIDES, "dfs.ls.limit": "2"}.items():
            conf.set(k, v)
        self.conf = conf
        self.nn = NameNode(conf, "nn1")
        self.http = NameNodeHttpServer(self.nn)
        strict = conf.copy()
        strict.set("hadoop.http.staticuser.user", "")
        self.strict_app = web.Application()
        WebHdfs(self.nn.client_protocol, strict).register(self.strict_app)
        self.strict_runner = None
        self.do(self._up())

    async def _up(self) -> None:
        await format_namenode(self.conf, cluster_id="CID-webhdfs", namespace_id=9)
        await self.nn.start(serve=False)
        await self.nn.ha_service.transition_to_active("user")
        host, port = await self.http.start("127.0.0.1", 0)
        self.base = f"http://{host}:{port}/webhdfs/v1"
        self.strict_runner, (h, p) = await start_site(self.strict_app, "127.0.0.1", 0)
        self.strict_base = f"http://{h}:{p}/webhdfs/v1"

    def do(self, coro, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def info(self, path: str):
        """The namespace's own answer (the oracle), read on the NameNode's loop."""
        async def read():
            return self.nn.namespace.get_file_info(None, path)
        return self.do(read())

    def close(self) -> None:
        async def down():
            await self.strict_runner.cleanup()
            await self.http.stop()
            await self.nn.stop()
        self.do(down())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("webhdfs")))
    try:
        yield s
    finally:
        s.close()


def call(server, method, path, op, user="hdfs", base=None, data=None, **params):
    """One WebHDFS request (no redirect following): ``(status, json or None, response)``."""
    q = {"op": op, **({"user.name": user} if user else {}), **params}
    r = requests.request(method, (base or server.base) + urllib.parse.quote(path), params=q, data=data,
                         allow_redirects=False, timeout=30)
    try:
        body = r.json() if r.content else None
    except ValueError:
        body = None
    return r.status_code, body, r


def remote(status_body):
    status, body = status_body[0], status_body[1]
    assert set(body) == {"RemoteException"}, body
    exc = body["RemoteException"]
    assert set(exc) == {"exception", "javaClassName", "message"} and exc["javaClassName"].endswith(exc["exception"])
    return status, exc["javaClassName"], exc["message"]


def create(server, path, user="hdfs", data=None, **params):
    """Hadoop's two-step CREATE: the redirect, then the data step at its Location."""
    status, _, r = call(server, "PUT", path, "CREATE", user=user, **params)
    assert status == 307, r.text
    loc = r.headers["Location"]
    assert loc.startswith(server.base.rsplit("/webhdfs", 1)[0]) and f"{DATA_STEP}=true" in loc
    return requests.put(loc, data=data, allow_redirects=False, timeout=30)


def test_every_operation_and_its_json_shape(server):
    s = server
    assert call(s, "PUT", "/w/a/b", "MKDIRS", permission="750")[:2] == (200, {"boolean": True})
    assert s.info("/w/a/b")["permission"] == 0o750 and s.info("/w/a")["permission"] == 0o750 | 0o300
    assert call(s, "PUT", "/w/a/b", "MKDIRS")[:2] == (200, {"boolean": True})  # exists: still true
    r = create(s, "/w/a/f", permission="640", replication="2", blocksize="1048576")
    assert r.status_code == 201 and r.headers["Location"].endswith("/w/a/f")
    f = s.info("/w/a/f")
    assert (f["type"], f["permission"], f["replication"], f["block_size"], f["length"]) == ("f", 0o640, 2, 1 << 20, 0)
    # createparent (Hadoop's default) makes the missing parents with the file's mode plus u+wx
    assert create(s, "/w/new/deep/g").status_code == 201
    assert s.info("/w/new/deep")["permission"] == 0o744
    status, exc, msg = remote(call(s, "PUT", "/w/none/h", "CREATE", createparent="false",
                                   **{DATA_STEP: "true"}))
    assert (status, exc) == (404, "java.io.FileNotFoundException") and "/w/none" in msg
    # noredirect: the Location in a JSON body
    status, body, _ = call(s, "PUT", "/w/a/nr", "CREATE", noredirect="true")
    assert status == 200 and f"{DATA_STEP}=true" in body["Location"] and "noredirect" not in body["Location"]
    assert requests.put(body["Location"], timeout=30).status_code == 201

    status, body, _ = call(s, "GET", "/w/a/f", "GETFILESTATUS")
    st = body["FileStatus"]
    assert status == 200 and set(st) == FILE_STATUS_KEYS
    assert st == {"accessTime": f["atime"], "blockSize": 1 << 20, "childrenNum": 0, "fileId": f["inode_id"],
                  "group": f["group"], "length": 0, "modificationTime": f["mtime"], "owner": "hdfs",
                  "pathSuffix": "", "permission": "640", "replication": 2, "storagePolicy": 0, "type": "FILE"}
    d = call(s, "GET", "/w/a", "GETFILESTATUS")[1]["FileStatus"]
    assert (d["type"], d["childrenNum"], d["blockSize"], d["replication"]) == ("DIRECTORY", 3, 0, 0)

    listing = call(s, "GET", "/w/a", "LISTSTATUS")[1]["FileStatuses"]["FileStatus"]
    assert [e["pathSuffix"] for e in listing] == ["b", "f", "nr"] and all(set(e) == FILE_STATUS_KEYS for e in listing)
    assert call(s, "GET", "/w/a/f", "LISTSTATUS")[1]["FileStatuses"]["FileStatus"][0]["pathSuffix"] == ""
    # LISTSTATUS_BATCH: dfs.ls.limit = 2 per batch, startAfter the last name
    b1 = call(s, "GET", "/w/a", "LISTSTATUS_BATCH")[1]["DirectoryListing"]
    assert [e["pathSuffix"] for e in b1["partialListing"]["FileStatuses"]["FileStatus"]] == ["b", "f"]
    assert b1["remainingEntries"] == 1
    b2 = call(s, "GET", "/w/a", "LISTSTATUS_BATCH", startAfter="f")[1]["DirectoryListing"]
    assert [e["pathSuffix"] for e in b2["partialListing"]["FileStatuses"]["FileStatus"]] == ["nr"]
    assert b2["remainingEntries"] == 0

    assert call(s, "GET", "/w", "GETCONTENTSUMMARY")[1] == {"ContentSummary": {
        "directoryCount": 5, "fileCount": 3, "length": 0, "quota": -1, "spaceConsumed": 0, "spaceQuota": -1,
        "typeQuota": {}}}
    assert call(s, "GET", "/w", "GETQUOTAUSAGE")[1] == {"QuotaUsage": {
        "fileAndDirectoryCount": 8, "quota": -1, "spaceConsumed": 0, "spaceQuota": -1, "typeQuota": {}}}
    assert call(s, "GET", "/", "GETHOMEDIRECTORY", user="alice")[1] == {"Path": "/user/alice"}
    assert call(s, "GET", "/", "GETTRASHROOT", user="alice")[1] == {"Path": "/user/alice/.Trash"}
    defaults = call(s, "GET", "/", "GETSERVERDEFAULTS")[1]["FsServerDefaults"]
    assert defaults["trashInterval"] == 0 and defaults["replication"] == 3 and defaults["checksumType"] == 2
    assert call(s, "GET", "/", "GETSTATUS")[1] == {"FsStatus": {"capacity": 0, "used": 0, "remaining": 0}}
    assert call(s, "GET", "/w/a/f", "GETFILEBLOCKLOCATIONS")[1] == {"BlockLocations": {"BlockLocation": []}}
    assert call(s, "GET", "/", "CHECKACCESS", user="alice", fsaction="r-x")[0] == 200
    assert call(s, "GET", "/", "CHECKACCESS", user="alice", fsaction="-w-")[0] == 403

    assert call(s, "PUT", "/w/a/f", "SETPERMISSION", permission="1755")[0] == 200
    assert s.info("/w/a/f")["permission"] == 0o1755
    assert call(s, "GET", "/w/a/f", "GETACLSTATUS")[1] == {"AclStatus": {
        "entries": [], "group": f["group"], "owner": "hdfs", "permission": "1755", "stickyBit": True}}
    assert call(s, "PUT", "/w/a/f", "SETOWNER", owner="alice", group="staff")[0] == 200
    assert (s.info("/w/a/f")["owner"], s.info("/w/a/f")["group"]) == ("alice", "staff")
    assert call(s, "PUT", "/w/a/f", "SETOWNER", group="users")[0] == 200
    assert (s.info("/w/a/f")["owner"], s.info("/w/a/f")["group"]) == ("alice", "users")
    assert call(s, "PUT", "/w/a/f", "SETREPLICATION", replication="5")[1] == {"boolean": True}
    assert s.info("/w/a/f")["replication"] == 5
    assert call(s, "PUT", "/w/a", "SETREPLICATION", replication="5")[1] == {"boolean": False}  # a directory
    assert call(s, "PUT", "/w/zz", "SETREPLICATION", replication="5")[1] == {"boolean": False}  # missing
    assert call(s, "PUT", "/w/a/f", "SETTIMES", modificationtime="1000", accesstime="2000")[0] == 200
    assert (s.info("/w/a/f")["mtime"], s.info("/w/a/f")["atime"]) == (1000, 2000)
    assert call(s, "PUT", "/w/a/f", "SETTIMES", accesstime="3000")[0] == 200
    assert (s.info("/w/a/f")["mtime"], s.info("/w/a/f")["atime"]) == (1000, 3000)

    # OPEN and APPEND: the two steps, 0 bytes of data
    status, _, r = call(s, "GET", "/w/a/f", "OPEN")
    assert status == 307
    r2 = requests.get(r.headers["Location"], timeout=30)
    assert r2.status_code == 200 and r2.content == b""
    assert requests.get(s.base + "/w/a/f?op=OPEN&user.name=hdfs", timeout=30).content == b""  # followed
    assert remote(call(s, "GET", "/w/a", "OPEN"))[:2] == (404, "java.io.FileNotFoundException")
    status, _, r = call(s, "POST", "/w/a/f", "APPEND")
    assert status == 307 and requests.post(r.headers["Location"], timeout=30).status_code == 200
    # data is refused: the namespace holds metadata only
    status, exc, msg = remote(_as_tuple(create(s, "/w/a/data", data=b"hello")))
    assert (status, exc) == (403, "java.io.IOException") and "metadata only" in msg
    assert s.info("/w/a/data") is None
    status, _, r = call(s, "POST", "/w/a/f", "APPEND")
    status, exc, msg = remote(_as_tuple(requests.post(r.headers["Location"], data=b"x", timeout=30)))
    assert status == 403 and "metadata only" in msg

    # RENAME: true, or false where Hadoop's rename answers false
    assert call(s, "PUT", "/w/a/nr", "RENAME", destination="/w/a/nr2")[1] == {"boolean": True}
    assert s.info("/w/a/nr") is None and s.info("/w/a/nr2") is not None
    assert call(s, "PUT", "/w/a/nr2", "RENAME", destination="/w/a/b")[1] == {"boolean": True}  # into a dir
    assert s.info("/w/a/b/nr2") is not None
    assert call(s, "PUT", "/w/missing", "RENAME", destination="/w/x")[1] == {"boolean": False}
    assert call(s, "PUT", "/w/a/f", "RENAME", destination="/w/new/deep/g")[1] == {"boolean": False}  # exists
    assert call(s, "PUT", "/w/a", "RENAME", destination="/w/a/b/in")[1] == {"boolean": False}  # own subtree
    assert call(s, "PUT", "/w/a/f", "RENAME", destination="/nope/x")[1] == {"boolean": False}  # no parent

    # DELETE: boolean answers, a non-empty directory needs recursive
    status, exc, _ = remote(call(s, "DELETE", "/w/a", "DELETE"))
    assert (status, exc) == (403, "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException")
    assert call(s, "DELETE", "/w/a", "DELETE", recursive="true")[1] == {"boolean": True}
    assert s.info("/w/a") is None
    assert call(s, "DELETE", "/w/a", "DELETE", recursive="true")[1] == {"boolean": False}  # missing
    assert call(s, "DELETE", "/", "DELETE", recursive="true")[1] == {"boolean": False}  # never the root
    assert s.info("/w/new/deep/g") is not None


def _as_tuple(r):
    return r.status_code, (r.json() if r.content else None), r


def test_error_shapes_and_statuses(server):
    s = server
    call(s, "PUT", "/e", "MKDIRS")
    call(s, "PUT", "/e/private", "MKDIRS", permission="700")
    assert create(s, "/e/file").status_code == 201
    assert create(s, "/e/secret", permission="600").status_code == 201
    cases = [
        (("GET", "/e/nope", "GETFILESTATUS"), {}, 404, "java.io.FileNotFoundException", "/e/nope"),
        (("GET", "/e/nope", "LISTSTATUS"), {}, 404, "java.io.FileNotFoundException", "/e/nope"),
        (("PUT", "/e/file", "MKDIRS"), {}, 403, "org.apache.hadoop.fs.FileAlreadyExistsException", "/e/file"),
        (("PUT", "/e/file/sub", "MKDIRS"), {}, 403, "org.apache.hadoop.fs.ParentNotDirectoryException", "/e/file"),
        (("GET", "/e/private", "LISTSTATUS"), {"user": "alice"}, 403,
         "org.apache.hadoop.security.AccessControlException", "user=alice"),
        (("PUT", "/e/private/x", "MKDIRS"), {"user": "bob"}, 403,
         "org.apache.hadoop.security.AccessControlException", "user=bob"),
        (("PUT", "/e/file", "CREATE"), {DATA_STEP: "true"}, 403,
         "org.apache.hadoop.fs.FileAlreadyExistsException", "/e/file"),
        (("PUT", "/e/file", "SETPERMISSION"), {"permission": "8"}, 400, "java.lang.IllegalArgumentException",
         '"permission"'),
        (("GET", "/e/secret", "OPEN"), {"user": "alice"}, 403,
         "org.apache.hadoop.security.AccessControlException", "access=READ,"),
        (("POST", "/e/file", "APPEND"), {"user": "alice"}, 403,
         "org.apache.hadoop.security.AccessControlException", "access=WRITE,"),
        (("GET", "/e/file", "CHECKACCESS"), {"user": "alice", "fsaction": "rw-"}, 403,
         "org.apache.hadoop.security.AccessControlException", "access=READ_WRITE,"),
        (("GET", "/e/file", "CHECKACCESS"), {"fsaction": "rwz"}, 400, "java.lang.IllegalArgumentException",
         '"fsaction"'),
        (("PUT", "/e", "SETACL"), {"aclspec": "user::rwx"}, 400, "java.lang.UnsupportedOperationException",
         "SETACL"),
        (("PUT", "/e/file", "RENAME"), {"destination": "/e/x", "renameoptions": "OVERWRITE"}, 400,
         "java.lang.UnsupportedOperationException", "renameoptions"),
    ]
    for (method, path, op), params, want_status, want_exc, needle in cases:
        status, exc, msg = remote(call(s, method, path, op, **params))
        assert (status, exc) == (want_status, want_exc), (method, path, op, params, msg)
        assert needle in msg, msg


def test_error_classes_map_by_name_along_the_hierarchy():
    class SafeModeError(QJournalError):  # issue 17's class, by name: webhdfs needs no import of it
        pass

    class SomeStandbySubclass(StandbyError):
        pass
    assert hadoop_exception_of(SafeModeError("x")) == "org.apache.hadoop.hdfs.server.namenode.SafeModeException"
    assert hadoop_exception_of(SomeStandbySubclass("x")) == "org.apache.hadoop.ipc.StandbyException"
    assert hadoop_exception_of(ObserverRetryOnActiveError("x")) == \
        "org.apache.hadoop.ipc.ObserverRetryOnActiveException"
    assert hadoop_exception_of(RpcTimeoutError("x")) == "java.io.IOException"  # the safe default
    assert hadoop_exception_of(ValueError("x")) == "java.io.IOException"


def test_identity_static_user_and_server_side_groups(server):
    s = server
    call(s, "PUT", "/id", "MKDIRS")
    call(s, "PUT", "/id/staff", "MKDIRS", permission="770")
    call(s, "PUT", "/id/staff", "SETOWNER", group="staff")
    # alice is in staff by the static overrides; bob has no groups; a group named by the caller counts for nothing
    assert call(s, "PUT", "/id/staff/a", "MKDIRS", user="alice")[1] == {"boolean": True}
    status, exc, _ = remote(call(s, "PUT", "/id/staff/b", "MKDIRS", user="bob", groups="staff",
                                 **{"user.groups": "staff"}))
    assert exc == "org.apache.hadoop.security.AccessControlException"
    # ... nor a claimed supergroup
    assert remote(call(s, "PUT", "/id/staff/c", "MKDIRS", user="bob", groups="supergroup"))[0] == 403
    # without user.name: the static user dr.who (hadoop.http.staticuser.user)
    assert remote(call(s, "GET", "/id/staff", "LISTSTATUS", user=None))[2].count("user=dr.who") == 1
    assert call(s, "GET", "/id", "GETFILESTATUS", user=None)[0] == 200
    assert call(s, "GET", "/", "GETHOMEDIRECTORY", user=None)[1] == {"Path": "/user/dr.who"}
    # no static user configured: 401, as Hadoop's PseudoAuthenticationHandler without anonymous access
    status, exc, msg = remote(call(s, "GET", "/id", "GETFILESTATUS", user=None, base=s.strict_base))
    assert (status, exc) == (401, "java.lang.SecurityException") and "user.name" in msg
    assert call(s, "GET", "/id", "GETFILESTATUS", base=s.strict_base)[0] == 200
    # doas names another user: no proxy users
    status, exc, msg = remote(call(s, "GET", "/id", "GETFILESTATUS", user="alice", doas="hdfs"))
    assert status == 403 and "impersonate" in msg
    # OS groups (no override): a user's primary group lets it into a group-owned directory
    me = pwd.getpwuid(os.getuid()).pw_name
    primary = grp.getgrgid(pwd.getpwuid(os.getuid()).pw_gid).gr_name
    assert me not in parse_static_overrides(OVERRIDES) and unix_groups(me)[0] == primary
    call(s, "PUT", "/id/os", "MKDIRS", permission="770")
    call(s, "PUT", "/id/os", "SETOWNER", group=primary)
    assert call(s, "PUT", "/id/os/mine", "MKDIRS", user=me)[1] == {"boolean": True}
    assert remote(call(s, "PUT", "/id/os/not", "MKDIRS", user="no-such-user-xyz"))[0] == 403


def test_group_mapping_rules():
    assert parse_static_overrides("user1=g1,g2;user2=; user3 = a , a ,b ;") == {
        "user1": ["g1", "g2"], "user2": [], "user3": ["a", "b"]}
    assert parse_static_overrides("") == {} and parse_static_overrides(None) == {}
    for bad in ("user1", "=g1", "u=g;oops"):
        with pytest.raises(ConfigError, match="hadoop.user.group.static.mapping.overrides"):
            parse_static_overrides(bad)
    assert unix_groups("no-such-user-xyz") == []
    asked, now = [], [0.0]

    def lookup(user):
        asked.append(user)
        return ["g", "g", "h"]
    m = GroupMapping(Configuration({"hadoop.user.group.static.mapping.overrides": "root=;",
                                    "hadoop.security.groups.cache.secs": "10"}), lookup, lambda: now[0])
    assert m.groups("root") == [] and asked == []  # the override wins over the OS
    assert m.groups("u") == ["g", "h"] and m.groups("u") == ["g", "h"] and asked == ["u"]  # cached
    now[0] = 10.5
    assert asyncio.run(m.groups_async("u")) == ["g", "h"] and asked == ["u", "u"]  # expired: asked again


def test_malformed_requests_get_400_never_500(server):
    s = server
    create(s, "/m/f")
    garbage = [
        ("GET", "/m?user.name=hdfs"),                               # no op
        ("GET", "/m?op=&user.name=hdfs"),
        ("GET", "/m?op=FROBNICATE&user.name=hdfs"),                 # unknown op
        ("GET", "/m?op=MKDIRS&user.name=hdfs"),                     # a PUT op sent with GET
        ("POST", "/m?op=DELETE&user.name=hdfs"),
        ("PATCH", "/m?op=GETFILESTATUS&user.name=hdfs"),            # not a WebHDFS method
        ("PUT", "/m?op=MKDIRS&permission=abc&user.name=hdfs"),      # bad octal
        ("PUT", "/m?op=MKDIRS&permission=-1&user.name=hdfs"),
        ("PUT", "/m?op=MKDIRS&permission=77777777777777777777777&user.name=hdfs"),
        ("PUT", "/m/f?op=SETREPLICATION&replication=x&user.name=hdfs"),   # not an integer
        ("PUT", "/m/f?op=SETREPLICATION&replication=0&user.name=hdfs"),
        ("PUT", "/m/f?op=SETTIMES&modificationtime=1e3&user.name=hdfs"),
        ("PUT", "/m/g?op=CREATE&blocksize=-5&user.name=hdfs"),
        ("PUT", "/m/g?op=CREATE&overwrite=maybe&user.name=hdfs"),
        ("DELETE", "/m?op=DELETE&recursive=yes&user.name=hdfs"),
        ("GET", "/m/f?op=OPEN&offset=x&user.name=hdfs"),
        ("GET", "/m/f?op=OPEN&offset=5&user.name=hdfs"),            # beyond the (empty) file
        ("PUT", "/m/f?op=RENAME&user.name=hdfs"),                   # no destination
        ("PUT", "/m/f?op=RENAME&destination=relative/x&user.name=hdfs"),
        ("PUT", "/m/f?op=RENAME&destination=/a/../b&user.name=hdfs"),
        ("PUT", "/m/f?op=SETOWNER&user.name=hdfs"),                 # neither owner nor group
        ("PUT", "/m/f?op=SETOWNER&owner=a:b&user.name=hdfs"),
        ("PUT", "/m/f?op=SETPERMISSION&user.name=hdfs"),            # no permission
        ("GET", "/m?op=GETFILESTATUS&user.name=bad:name"),
        ("GET", "/m?op=GETFILESTATUS&user.name=" + "u" * 300),
        ("GET", "/m/%00x?op=GETFILESTATUS&user.name=hdfs"),        # NUL in the path
        ("GET", "/m/%ff%fe?op=GETFILESTATUS&user.name=hdfs"),      # not UTF-8
        ("GET", "/m/" + "x" * 300 + "?op=GETFILESTATUS&user.name=hdfs"),  # component too long
        ("GET", "/m/a:b?op=GETFILESTATUS&user.name=hdfs"),
        ("GET", "/m?op=x&op=GETFILESTATUS&user.name=hdfs&user.name=&%%%=%"),
    ]
    for method, url in garbage:
        r = requests.request(method, s.base + url, allow_redirects=False, timeout=30)
        assert 400 <= r.status_code < 500, (method, url, r.status_code, r.text)
        if r.content:
            assert set(r.json()) == {"RemoteException"}, (method, url, r.text)
    # a data step whose body is cut short: the server answers or drops it, and carries on
    host, port = urllib.parse.urlsplit(s.base).hostname, urllib.parse.urlsplit(s.base).port
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(f"PUT /webhdfs/v1/m/cut?op=CREATE&user.name=hdfs&{DATA_STEP}=true HTTP/1.1\r\n"
                     f"Host: {host}\r\nContent-Length: 100\r\n\r\nabc".encode())
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(65536)
    assert not answer or answer.startswith(b"HTTP/1.1 4"), answer[:200]
    assert s.info("/m/cut") is None
    assert requests.get(s.base + "/m?op=GETFILESTATUS&user.name=hdfs", timeout=30).status_code == 200
    assert s.nn.state.value == "active" and s.nn.fatal_error is None


def test_standby_and_observer_answer_standby_exception(server):
    s = server
    call(s, "PUT", "/ha/d", "MKDIRS")
    s.do(s.nn.ha_service.transition_to_standby("user"))
    try:
        for method, op, params in (("GET", "GETFILESTATUS", {}), ("GET", "LISTSTATUS", {}),
                                   ("PUT", "MKDIRS", {}), ("PUT", "CREATE", {}), ("DELETE", "DELETE", {})):
            status, exc, msg = remote(call(s, method, "/ha/d", op, **params))
            assert (status, exc) == (403, "org.apache.hadoop.ipc.StandbyException"), (op, msg)
            assert "standby" in msg
        s.do(s.nn.ha_service.transition_to_observer("user"))
        assert call(s, "GET", "/ha/d", "GETFILESTATUS")[0] == 200  # an observer serves reads
        status, exc, _ = remote(call(s, "PUT", "/ha/e", "MKDIRS"))
        assert (status, exc) == (403, "org.apache.hadoop.ipc.StandbyException")
        s.do(s.nn.ha_service.transition_to_standby("user"))
    finally:
        s.do(s.nn.ha_service.transition_to_active("user"))
    assert call(s, "PUT", "/ha/e", "MKDIRS")[1] == {"boolean": True}


def test_fsspec_webhdfs_client(server):
    s = server
    port = int(urllib.parse.urlsplit(s.base).port)
    fs = fsspec.filesystem("webhdfs", host="127.0.0.1", port=port, user="alice", skip_instance_cache=True)
    call(s, "PUT", "/fs", "MKDIRS", permission="777")
    fs.mkdir("/fs/a")
    fs.makedirs("/fs/a/b/c", exist_ok=True)
    fs.touch("/fs/a/f")
    assert s.info("/fs/a/f")["owner"] == "alice" and s.info("/fs/a/b/c")["type"] == "d"
    assert fs.ls("/fs/a") == ["/fs/a/b", "/fs/a/f"]
    detail = {e["name"]: e for e in fs.ls("/fs/a", detail=True)}
    assert detail["/fs/a/b"]["type"] == "directory" and detail["/fs/a/f"]["type"] == "file"
    info = fs.info("/fs/a/f")
    assert (info["type"], info["size"], info["owner"]) == ("file", 0, "alice")
    assert fs.exists("/fs/a/f") and not fs.exists("/fs/a/nope")
    with fs.open("/fs/a/f", "rb") as fh:
        assert fh.read() == b""
    fs.mv("/fs/a/f", "/fs/a/g")
    assert not fs.exists("/fs/a/f") and fs.info("/fs/a/g")["type"] == "file"
    assert s.info("/fs/a/f") is None and s.info("/fs/a/g") is not None
    assert fs.content_summary("/fs/a")["fileCount"] == 1
    with pytest.raises(requests.HTTPError) as refused:  # the data step: fsspec raises the HTTP status
        with fs.open("/fs/a/data", "wb") as fh:
            fh.write(b"bytes")
    assert "metadata only" in refused.value.response.text
    with pytest.raises(FileNotFoundError):
        fs.info("/fs/nope")
    fs.rm("/fs/a", recursive=True)
    assert not fs.exists("/fs/a") and s.info("/fs/a") is None
    call(s, "PUT", "/fs/private", "MKDIRS", permission="700")
    with pytest.raises(PermissionError):  # AccessControlException: alice may not list hdfs's 700 directory
        fs.ls("/fs/private")
