"""WebHDFS on the NameNode's HTTP server: ``/webhdfs/v1/<path>?op=...`` as Hadoop's own client speaks it.

Why: operators reach HDFS with the tools they already have. Hadoop's FsShell
(``webhdfs://host:port/``, and ``webhdfs://<nameservice>/`` with failover),
distcp, and Python clients such as fsspec speak the WebHDFS REST API; with it a
qjournal NameNode is an HDFS namespace to them (PRODUCT requirement 10).

Theory of operation:

* Every operation is a call of the NameNode's :class:`ClientProtocolHandler`
  (``client_protocol.py``), exactly as an RPC client's: the HA gate, the observer
  rule, the read barrier, the durability of a write before its answer and the
  permission checks of the namespace all apply unchanged. WebHDFS calls carry no
  client id, so (as on Hadoop's NameNode) they are not in the retry cache, and no
  state id, so they are answered bare.
* Identity. Over HTTPS (``dfs.http.policy = HTTPS_ONLY``: mutual TLS) the user is
  the client certificate's (:mod:`qjournal.security.identity`); a ``user.name`` or
  ``doas`` naming anyone else is refused with Hadoop's ``AuthorizationException``
  ("User: alice ... is not allowed to impersonate hdfs"), 403. Over plain HTTP
  (simple authentication, Hadoop's ``PseudoAuthenticationHandler``) the user is
  the ``user.name`` query parameter, else ``hadoop.http.staticuser.user``
  (default ``dr.who``; set it empty and a request without ``user.name`` gets 401),
  and ``doas`` naming another user is refused: there are no proxy users. Either
  way the groups are the server's (:mod:`qjournal.security.groups`), never the
  caller's.
* Answers are Hadoop's JSON shapes (``FileStatus``, ``FileStatuses``,
  ``DirectoryListing``, ``ContentSummary``, ``QuotaUsage``, ``boolean``, ``Path``,
  ``AclStatus``, ``FsServerDefaults``, ``BlockLocations``). An error is
  ``{"RemoteException": {"exception", "javaClassName", "message"}}``; the Java class
  comes from :data:`HADOOP_EXCEPTIONS` by the error's class name (the first match
  along its class hierarchy; anything else is ``java.io.IOException``), and the
  status from Hadoop's ``ExceptionHandler``: 404 for ``FileNotFoundException``, 400
  for ``IllegalArgumentException`` and ``UnsupportedOperationException``, 403 for
  every other ``IOException`` (``StandbyException`` included: Hadoop's HA WebHDFS
  client fails over on it).
* JSON answers carry no ``Content-Type`` header. Hadoop's client checks a
  Content-Type with JAX-RS's ``MediaType``, whose runtime the shaded client jars
  (``hadoop-client-api``/``-runtime`` 3.5, as pyspark ships them) lack: any
  Content-Type fails every call with ``ClassNotFoundException ...RuntimeDelegateImpl``,
  while an absent one is skipped and the body parsed. Other clients (fsspec,
  requests, curl) read the JSON body either way.
* Data. The namespace holds metadata only, so a file is always empty. ``CREATE``,
  ``APPEND`` and ``OPEN`` keep Hadoop's two steps: the first request answers 307
  with a ``Location`` back to this NameNode (the same query plus
  :data:`DATA_STEP`), or 200 ``{"Location": ...}`` with ``noredirect=true``; the
  second carries the data. ``OPEN`` needs READ on the file and ``APPEND`` WRITE
  (``checkAccess``), as in HDFS. An empty body creates the file (201) or appends nothing
  (200); a non-empty one is refused with an ``IOException`` saying why (FsShell's
  ``-put`` prints it). ``OPEN`` answers the file's 0 bytes; ``GETSTATUS`` (``df``)
  reports no data capacity and no use.
* Hadoop's answers where an operation fails softly: ``DELETE`` of a missing path
  (or of ``/``) is ``{"boolean": false}``, as is a ``RENAME`` that the namespace
  refuses for a missing source or destination parent, an existing destination, or
  a move into its own subtree; ``SETREPLICATION`` of a directory or a missing path
  is ``false``. A permission refusal is always an error.
* Operations Hadoop's client knows but qjournal has no concept for (ACL changes,
  xattrs, snapshots, storage and erasure-coding policies, delegation tokens,
  symlinks, checksums, truncate, concat, quotas) answer ``UnsupportedOperationException``,
  so a client degrades as against an HDFS with the feature off. An op name that no
  Hadoop client sends, or one sent with the wrong HTTP method, is an
  ``IllegalArgumentException`` naming the parameter.

Invariants:

1. A request changes the namespace only through the ClientProtocol handler's
   write path (durable before the answer, HA-gated), and reads only through its
   read path.
2. Malformed input (unknown op, bad octal, non-integer, bad path, bad user name,
   an unreadable body) is a 400 naming the parameter; the server never answers
   500 for it and never dies.
3. The ``Location`` of a first step points at this server with the original
   query, so the second step is the same request against the same NameNode.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from aiohttp import web

from qjournal.errors import (ConfigError, DirectoryNotEmptyError, FileAlreadyExistsError, FileNotFoundError_,
                             InvalidRequestError, NotADirectoryError_, PermissionDeniedError, QJournalError)
from qjournal.namenode.client_protocol import ClientProtocolHandler
from qjournal.security.identity import Authenticator
from qjournal.transport.http import peer_cert, remote_exception
from qjournal.namenode.ha_state import OpCategory
from qjournal.namenode.namespace import (DEFAULT_BLOCK_SIZE, DEFAULT_REPLICATION, EXECUTE, INT64_MAX, READ,
                                         WRITE, check_name, join_path, split_path)
from qjournal.protocol.protocols import CLIENT

__all__ = ["WebHdfs", "API_PREFIX", "DATA_STEP", "HADOOP_EXCEPTIONS", "HADOOP_OPS", "hadoop_exception_of",
           "remote_exception", "file_status_json"]

log = logging.getLogger(__name__)

API_PREFIX = "/webhdfs/v1"
#: the query parameter that marks the second (data) step of CREATE, APPEND and OPEN
DATA_STEP = "qjournal.datastep"

#: qjournal error class name -> Hadoop exception class (looked up along the error's class hierarchy)
HADOOP_EXCEPTIONS: dict[str, str] = {
    "FileNotFoundError_": "java.io.FileNotFoundException",
    "FileAlreadyExistsError": "org.apache.hadoop.fs.FileAlreadyExistsException",
    "PermissionDeniedError": "org.apache.hadoop.security.AccessControlException",
    "NotADirectoryError_": "org.apache.hadoop.fs.ParentNotDirectoryException",
    "DirectoryNotEmptyError": "org.apache.hadoop.fs.PathIsNotEmptyDirectoryException",
    "InvalidRequestError": "java.lang.IllegalArgumentException",
    "ObserverRetryOnActiveError": "org.apache.hadoop.ipc.ObserverRetryOnActiveException",
    "StandbyError": "org.apache.hadoop.ipc.StandbyException",
    "SafeModeError": "org.apache.hadoop.hdfs.server.namenode.SafeModeException",
    "WebHdfsUnsupportedError": "java.lang.UnsupportedOperationException",
    "WebHdfsDataError": "java.io.IOException",
    "WebHdfsAuthError": "java.lang.SecurityException",
    "AuthorizationError": "org.apache.hadoop.security.authorize.AuthorizationException",
    "AuthenticationError": "org.apache.hadoop.security.AccessControlException",
}
#: anything not in the table
DEFAULT_EXCEPTION = "java.io.IOException"

#: every op of Hadoop's client, by HTTP method (GetOpParam, PutOpParam, PostOpParam, DeleteOpParam)
HADOOP_OPS: dict[str, tuple[str, ...]] = {
    "GET": ("OPEN", "GETFILESTATUS", "LISTSTATUS", "GETCONTENTSUMMARY", "GETQUOTAUSAGE", "GETFILECHECKSUM",
            "GETHOMEDIRECTORY", "GETDELEGATIONTOKEN", "GET_BLOCK_LOCATIONS", "GETFILEBLOCKLOCATIONS",
            "GETACLSTATUS", "GETXATTRS", "GETTRASHROOT", "LISTXATTRS", "GETALLSTORAGEPOLICY",
            "GETSTORAGEPOLICY", "GETECPOLICY", "CHECKACCESS", "LISTSTATUS_BATCH", "GETSERVERDEFAULTS",
            "GETSNAPSHOTDIFF", "GETSNAPSHOTDIFFLISTING", "GETSNAPSHOTTABLEDIRECTORYLIST", "GETLINKTARGET",
            "GETFILELINKSTATUS", "GETSTATUS", "GETECPOLICIES", "GETECCODECS", "GETTRASHROOTS",
            "GETSNAPSHOTLIST"),
    "PUT": ("CREATE", "MKDIRS", "CREATESYMLINK", "RENAME", "SETREPLICATION", "SETOWNER", "SETPERMISSION",
            "SETTIMES", "RENEWDELEGATIONTOKEN", "CANCELDELEGATIONTOKEN", "MODIFYACLENTRIES",
            "REMOVEACLENTRIES", "REMOVEDEFAULTACL", "REMOVEACL", "SATISFYSTORAGEPOLICY", "SETACL", "SETXATTR",
            "REMOVEXATTR", "ENABLEECPOLICY", "DISABLEECPOLICY", "SETECPOLICY", "ALLOWSNAPSHOT",
            "DISALLOWSNAPSHOT", "CREATESNAPSHOT", "RENAMESNAPSHOT", "SETSTORAGEPOLICY", "SETQUOTA",
            "SETQUOTABYSTORAGETYPE"),
    "POST": ("APPEND", "CONCAT", "TRUNCATE", "UNSETECPOLICY", "UNSETSTORAGEPOLICY"),
    "DELETE": ("DELETE", "DELETESNAPSHOT"),
}

#: FsServerDefaults of a namespace without blocks: the client's defaults, CRC32C (type id 2), HOT (policy 7)
_SERVER_DEFAULTS = {"blockSize": DEFAULT_BLOCK_SIZE, "bytesPerChecksum": 512, "writePacketSize": 65536,
                    "replication": DEFAULT_REPLICATION, "fileBufferSize": 4096, "encryptDataTransfer": False,
                    "trashInterval": 0, "checksumType": 2, "keyProviderUri": "", "defaultStoragePolicyId": 7}


class WebHdfsUnsupportedError(QJournalError):
    """A WebHDFS operation (or a file's data) that a metadata-only namespace does not serve."""


class WebHdfsDataError(QJournalError):
    """A request that carries a file's data: the namespace holds metadata only (files are empty)."""


class WebHdfsAuthError(QJournalError):
    """A WebHDFS request without a user (no ``user.name`` and no static user configured)."""


def hadoop_exception_of(e: BaseException) -> str:
    """The Hadoop exception class for ``e``: the first class name of its hierarchy in
    :data:`HADOOP_EXCEPTIONS`, else :data:`DEFAULT_EXCEPTION`."""
    for cls in type(e).__mro__:
        java = HADOOP_EXCEPTIONS.get(cls.__name__)
        if java is not None:
            return java
    return DEFAULT_EXCEPTION


async def _drop_json_content_type(request: web.Request, response: web.StreamResponse) -> None:
    """A WebHDFS JSON answer leaves without its Content-Type (module docstring: the shaded client)."""
    if request.path.startswith(API_PREFIX) and response.content_type == "application/json":
        response.headers.popall("Content-Type", None)


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, text=json.dumps(obj), content_type="application/json")


def _empty(status: int = 200, headers: dict | None = None) -> web.Response:
    return web.Response(status=status, headers=headers)


def file_status_json(st: dict, suffix: str) -> dict:
    """A namespace FileStatus dict in Hadoop's ``FileStatus`` JSON properties (``pathSuffix`` = ``suffix``)."""
    return {"accessTime": st["atime"], "blockSize": st["block_size"], "childrenNum": st["children_num"],
            "fileId": st["inode_id"], "group": st["group"], "length": st["length"],
            "modificationTime": st["mtime"], "owner": st["owner"], "pathSuffix": suffix,
            "permission": format(st["permission"], "o"), "replication": st["replication"],
            "storagePolicy": 0, "type": "DIRECTORY" if st["type"] == "d" else "FILE"}


def _bad_param(name: str, value: str, why: str) -> InvalidRequestError:
    return InvalidRequestError(f'Invalid value for webhdfs parameter "{name}": {why} (got {value[:100]!r})')


@dataclass(frozen=True)
class _Call:
    """One WebHDFS request, parsed: the operation's path, its parameters and who asks."""

    request: web.Request
    method: str
    op: str
    path: str
    #: query parameters, names lower-cased (Hadoop's ParamFilter), the first value of each
    params: dict[str, str]
    user: str
    groups: list[str]

    @property
    def who(self) -> dict:
        return {"user": self.user, "groups": self.groups}

    def text(self, name: str) -> str | None:
        return self.params.get(name)

    def flag(self, name: str, default: bool) -> bool:
        v = self.params.get(name)
        if v is None or v == "":
            return default
        if v.lower() in ("true", "false"):
            return v.lower() == "true"
        raise _bad_param(name, v, "expected true or false")

    def integer(self, name: str, default: int, lo: int, hi: int = INT64_MAX) -> int:
        v = self.params.get(name)
        if v is None or v == "":
            return default
        try:
            n = int(v, 10)
        except ValueError:
            raise _bad_param(name, v, "not an integer") from None
        if not lo <= n <= hi:
            raise _bad_param(name, v, f"out of range {lo}..{hi}")
        return n

    def permission(self, default: int | None) -> int:
        v = self.params.get("permission")
        if v is None or v == "":
            if default is None:
                raise InvalidRequestError(f'{self.op} {self.path}: the webhdfs parameter "permission" is required')
            return default
        try:
            perm = int(v, 8)
        except ValueError:
            raise _bad_param("permission", v, "not an octal number") from None
        if not 0 <= perm <= 0o1777:
            raise _bad_param("permission", v, "out of range 0..1777")
        return perm

    def abs_path(self, name: str) -> str:
        v = self.params.get(name)
        if not v:
            raise InvalidRequestError(f'{self.op} {self.path}: the webhdfs parameter "{name}" is required')
        try:
            return join_path(split_path(v))
        except InvalidRequestError as e:
            raise _bad_param(name, v, e.message) from None


class WebHdfs:
    """The WebHDFS operations of one NameNode (module docstring).

    Args:
        client: the NameNode's ClientProtocol handler (every operation goes through it).
        conf: the configuration (static user, group mapping, ``dfs.ls.limit``).
        authenticator: certificates to callers, and the group mapping (default: from ``conf``).

    Raises:
        ConfigError: malformed group overrides or rules, or ``dfs.ls.limit`` below 1.
    """

    def __init__(self, client: ClientProtocolHandler, conf: Any,
                 authenticator: Authenticator | None = None) -> None:
        self.client = client
        self.static_user = conf.get("hadoop.http.staticuser.user") or ""
        self.ls_limit = int(conf.get_int("dfs.ls.limit") or 0)
        if self.ls_limit < 1:
            raise ConfigError(f"dfs.ls.limit = {self.ls_limit}: a listing batch holds at least 1 entry",
                              key="dfs.ls.limit")
        self.authenticator = authenticator or Authenticator(conf)
        Handler = Callable[[_Call], Awaitable[web.Response]]
        self.ops: dict[str, dict[str, Handler]] = {
            "GET": {"OPEN": self.open, "GETFILESTATUS": self.get_file_status, "LISTSTATUS": self.list_status,
                    "LISTSTATUS_BATCH": self.list_status_batch, "GETCONTENTSUMMARY": self.content_summary,
                    "GETQUOTAUSAGE": self.quota_usage, "GETHOMEDIRECTORY": self.home_directory,
                    "GETTRASHROOT": self.trash_root, "GETSERVERDEFAULTS": self.server_defaults,
                    "GETACLSTATUS": self.acl_status, "GETFILEBLOCKLOCATIONS": self.block_locations,
                    "GETSTATUS": self.fs_status, "CHECKACCESS": self.check_access},
            "PUT": {"CREATE": self.create, "MKDIRS": self.mkdirs, "RENAME": self.rename,
                    "SETREPLICATION": self.set_replication, "SETOWNER": self.set_owner,
                    "SETPERMISSION": self.set_permission, "SETTIMES": self.set_times},
            "POST": {"APPEND": self.append},
            "DELETE": {"DELETE": self.delete},
        }

    def register(self, app: web.Application) -> None:
        """Serve ``/webhdfs/v1[/<path>]`` (every method) in ``app``, JSON answers without a Content-Type."""
        app.router.add_route("*", API_PREFIX + "{path:(/.*)?}", self.handle)
        app.on_response_prepare.append(_drop_json_content_type)

    # --- request -> call ------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one WebHDFS request (invariant 2: every expected failure is a RemoteException)."""
        try:
            call = await self._parse(request)
            return await self.ops[call.method][call.op](call)
        except QJournalError as e:
            if not isinstance(e, (FileNotFoundError_, InvalidRequestError)):
                log.debug("webhdfs %s %s: %s", request.method, request.path_qs[:300], e)
            return remote_exception(hadoop_exception_of(e), e.message or str(e))
        except Exception as e:  # noqa: BLE001 - a bug answers 500 and the server carries on
            log.exception("webhdfs %s %s failed", request.method, request.path_qs[:300])
            return remote_exception("java.lang.RuntimeException", f"{type(e).__name__}: {e}")

    async def _parse(self, request: web.Request) -> _Call:
        method = request.method.upper()
        params: dict[str, str] = {}
        for k, v in request.query.items():
            params.setdefault(k.lower(), v)
        op = (params.get("op") or "").upper()
        if method not in self.ops:
            raise InvalidRequestError(f"HTTP method {method} is not a WebHDFS method (GET, PUT, POST, DELETE)")
        if op not in self.ops[method]:
            if not op:
                raise InvalidRequestError('Invalid value for webhdfs parameter "op": missing')
            if op in HADOOP_OPS[method]:
                raise WebHdfsUnsupportedError(
                    f"{op} is not supported by qjournal's WebHDFS (the namespace holds metadata only: no "
                    f"blocks, ACL entries, xattrs, snapshots, quotas, storage policies or tokens)")
            raise _bad_param("op", params["op"], f"not a valid {method} operation")
        raw = request.match_info.get("path") or "/"
        try:
            path = join_path(split_path(raw))
        except InvalidRequestError as e:
            raise InvalidRequestError(f"Invalid path {raw[:300]!r}: {e.message}") from None
        user, groups = await self.caller(request, params)
        return _Call(request, method, op, path, params, user, groups)

    async def caller(self, request: web.Request, params: dict[str, str]) -> tuple[str, list[str]]:
        """Who asks (module docstring, "Identity"): the certificate's user over HTTPS, else ``user.name``
        or the static user; the groups are the server's.

        Args:
            request: the HTTP request (its TLS peer certificate, if any).
            params: the query parameters, names lower-cased.

        Returns:
            ``(user, groups)``.

        Raises:
            WebHdfsAuthError: plain HTTP with no user at all. PermissionDeniedError: a ``doas`` or
            ``user.name`` naming someone else. InvalidRequestError: a malformed user name.
        """
        cert = peer_cert(request)
        if cert is not None:  # HTTPS: the certificate's user; a different claim is refused
            for claim in (params.get("doas"), params.get("user.name")):
                caller = await self.authenticator.caller(cert, claim or "")
            return caller.user, list(caller.groups)
        user = params.get("user.name") or self.static_user
        if not user:
            raise WebHdfsAuthError("Authentication required: no user.name parameter and no "
                                   "hadoop.http.staticuser.user configured")
        check_name(user, "user.name")
        doas = params.get("doas")
        if doas and doas != user:
            raise PermissionDeniedError(f"User: {user} is not allowed to impersonate {doas} "
                                        f"(qjournal has no proxy users)", user=user)
        return user, await self.authenticator.groups.groups_async(user)

    def _location(self, call: _Call) -> str:
        """The second step's URL: this server, the same path and query, plus the data-step marker."""
        query = [(k, v) for k, v in call.request.query.items() if k.lower() != "noredirect"]
        return str(call.request.url.with_query(query + [(DATA_STEP, "true")]))

    def _redirect(self, call: _Call) -> web.Response:
        """Step one of CREATE / APPEND / OPEN (invariant 3)."""
        location = self._location(call)
        if call.flag("noredirect", False):
            return _json({"Location": location})
        return _empty(307, {"Location": location})

    @staticmethod
    async def _body_is_empty(call: _Call) -> bool:
        """Whether the data step carries no byte (the rest of a non-empty body is left to aiohttp)."""
        try:
            return not await call.request.content.read(1)
        except Exception as e:  # noqa: BLE001 - a truncated or malformed body is a bad request
            raise InvalidRequestError(f"{call.op} {call.path}: the request body could not be read: {e}") from None

    def _refuse_data(self, call: _Call) -> WebHdfsDataError:
        return WebHdfsDataError(
            f"{call.op} {call.path}: qjournal's namespace holds metadata only; a file's data cannot be "
            f"written (only empty files exist)")

    async def _status(self, call: _Call, want_file: bool = False, access: int = 0) -> dict:
        """The path's FileStatus; with ``want_file`` a directory is not found (Hadoop: "Path is not a
        file"); with ``access`` the caller must hold those permission bits on it."""
        st = await self.client.rpc_get_file_info(call.path, **call.who)
        if st is None:
            raise FileNotFoundError_(f"File does not exist: {call.path}", path=call.path)
        if want_file and st["type"] == "d":
            raise FileNotFoundError_(f"Path is not a file: {call.path}", path=call.path)
        if access:
            await self.client.rpc_check_access(call.path, access, **call.who)
        return st

    # --- GET -----------------------------------------------------------------------------------------

    async def get_file_status(self, call: _Call) -> web.Response:
        return _json({"FileStatus": file_status_json(await self._status(call), "")})

    def _statuses(self, call: _Call, entries: list[dict]) -> dict:
        return {"FileStatuses": {"FileStatus": [
            file_status_json(st, "" if st["path"] == call.path else st["name"]) for st in entries]}}

    async def list_status(self, call: _Call) -> web.Response:
        return _json(self._statuses(call, await self.client.rpc_list_status(call.path, **call.who)))

    async def list_status_batch(self, call: _Call) -> web.Response:
        start_after = call.text("startafter") or ""
        batch = await self.client.rpc_get_listing(call.path, start_after, self.ls_limit, **call.who)
        return _json({"DirectoryListing": {"partialListing": self._statuses(call, batch["entries"]),
                                           "remainingEntries": batch["remaining"]}})

    async def content_summary(self, call: _Call) -> web.Response:
        cs = await self.client.rpc_get_content_summary(call.path, **call.who)
        return _json({"ContentSummary": {
            "directoryCount": cs["directory_count"], "fileCount": cs["file_count"], "length": cs["length"],
            "quota": cs["quota"], "spaceConsumed": cs["space_consumed"], "spaceQuota": cs["space_quota"],
            "typeQuota": {}}})

    async def quota_usage(self, call: _Call) -> web.Response:
        cs = await self.client.rpc_get_content_summary(call.path, **call.who)
        return _json({"QuotaUsage": {
            "fileAndDirectoryCount": cs["directory_count"] + cs["file_count"], "quota": cs["quota"],
            "spaceConsumed": cs["space_consumed"], "spaceQuota": cs["space_quota"], "typeQuota": {}}})

    async def home_directory(self, call: _Call) -> web.Response:
        return _json({"Path": f"/user/{call.user}"})

    async def trash_root(self, call: _Call) -> web.Response:
        return _json({"Path": f"/user/{call.user}/.Trash"})

    async def server_defaults(self, call: _Call) -> web.Response:
        return _json({"FsServerDefaults": dict(_SERVER_DEFAULTS)})

    async def fs_status(self, call: _Call) -> web.Response:
        """``df``: a namespace without data has no data capacity and uses none."""
        return _json({"FsStatus": {"capacity": 0, "used": 0, "remaining": 0}})

    async def check_access(self, call: _Call) -> web.Response:
        """``FileSystem.access``: 200 when the caller holds ``fsaction`` (``rwx``, ``r-x``, ...) on the path."""
        action = call.text("fsaction") or "---"
        bits = [(c, want, bit) for c, want, bit in zip(action, "rwx", (READ, WRITE, EXECUTE))]
        if len(action) != 3 or any(c not in (want, "-") for c, want, _ in bits):
            raise _bad_param("fsaction", action, "expected three characters of r, w, x or - (e.g. r-x)")
        await self.client.rpc_check_access(call.path, sum(bit for c, _, bit in bits if c != "-"), **call.who)
        return _empty()

    async def acl_status(self, call: _Call) -> web.Response:
        st = await self._status(call)
        return _json({"AclStatus": {"entries": [], "group": st["group"], "owner": st["owner"],
                                    "permission": format(st["permission"], "o"),
                                    "stickyBit": bool(st["permission"] & 0o1000)}})

    async def block_locations(self, call: _Call) -> web.Response:
        await self._status(call, want_file=True)
        return _json({"BlockLocations": {"BlockLocation": []}})

    async def open(self, call: _Call) -> web.Response:
        st = await self._status(call, want_file=True, access=READ)
        offset = call.integer("offset", 0, 0)
        call.integer("length", 0, 0)
        if offset > st["length"]:
            raise _bad_param("offset", str(offset), f"beyond the end of {call.path} ({st['length']} bytes)")
        if call.text(DATA_STEP) is None:
            return self._redirect(call)
        return web.Response(status=200, body=b"", content_type="application/octet-stream")

    # --- PUT -----------------------------------------------------------------------------------------

    async def create(self, call: _Call) -> web.Response:
        perm = call.permission(0o644)
        overwrite = call.flag("overwrite", False)
        replication = call.integer("replication", DEFAULT_REPLICATION, 1, 32767)
        block_size = call.integer("blocksize", DEFAULT_BLOCK_SIZE, 1)
        create_parent = call.flag("createparent", True)
        if call.text(DATA_STEP) is None:
            self.client.nn.check_operation(OpCategory.WRITE, CLIENT.create)
            return self._redirect(call)
        if not await self._body_is_empty(call):
            raise self._refuse_data(call)
        create = dict(perm=perm, overwrite=overwrite, replication=replication, block_size=block_size, **call.who)
        try:
            await self.client.rpc_create(call.path, **create)
        except FileNotFoundError_:  # the parent is missing
            if not create_parent:
                raise
            parent = join_path(split_path(call.path)[:-1])
            await self.client.rpc_mkdirs(parent, perm=(perm | 0o300) & 0o1777, create_parent=True, **call.who)
            await self.client.rpc_create(call.path, **create)
        host = call.request.host
        return _empty(201, {"Location": f"webhdfs://{host}{call.path}"})

    async def mkdirs(self, call: _Call) -> web.Response:
        perm = call.permission(0o755)
        return _json({"boolean": bool(await self.client.rpc_mkdirs(call.path, perm=perm, create_parent=True,
                                                                    **call.who))})

    async def rename(self, call: _Call) -> web.Response:
        dst = call.abs_path("destination")
        if call.text("renameoptions"):
            raise WebHdfsUnsupportedError(f"RENAME {call.path}: renameoptions (rename2) is not supported; "
                                          f"rename without it moves into an existing directory as HDFS rename")
        try:
            await self.client.rpc_rename(call.path, dst, overwrite=False, **call.who)
        except (FileNotFoundError_, FileAlreadyExistsError, NotADirectoryError_, DirectoryNotEmptyError):
            return _json({"boolean": False})
        except InvalidRequestError as e:  # the root, or into its own subtree (both paths were valid)
            log.debug("webhdfs rename %s -> %s refused: %s", call.path, dst, e)
            return _json({"boolean": False})
        return _json({"boolean": True})

    async def set_replication(self, call: _Call) -> web.Response:
        replication = call.integer("replication", DEFAULT_REPLICATION, 1, 32767)
        st = await self.client.rpc_get_file_info(call.path, **call.who)
        if st is None or st["type"] == "d":
            return _json({"boolean": False})
        try:
            await self.client.rpc_set_replication(call.path, replication, **call.who)
        except FileNotFoundError_:
            return _json({"boolean": False})
        return _json({"boolean": True})

    async def set_owner(self, call: _Call) -> web.Response:
        owner = call.text("owner") or None
        group = call.text("group") or None
        if owner is None and group is None:
            raise InvalidRequestError(f"SETOWNER {call.path}: Both owner and group are empty.")
        await self.client.rpc_set_owner(call.path, owner, group, **call.who)
        return _empty()

    async def set_permission(self, call: _Call) -> web.Response:
        await self.client.rpc_set_permission(call.path, call.permission(None), **call.who)
        return _empty()

    async def set_times(self, call: _Call) -> web.Response:
        mtime = call.integer("modificationtime", -1, -1)
        atime = call.integer("accesstime", -1, -1)
        await self.client.rpc_set_times(call.path, mtime, atime, **call.who)
        return _empty()

    # --- POST / DELETE -------------------------------------------------------------------------------

    async def append(self, call: _Call) -> web.Response:
        self.client.nn.check_operation(OpCategory.WRITE, "append")
        await self._status(call, want_file=True, access=WRITE)
        if call.text(DATA_STEP) is None:
            return self._redirect(call)
        if not await self._body_is_empty(call):
            raise self._refuse_data(call)
        return _empty()  # appending nothing changes nothing

    async def delete(self, call: _Call) -> web.Response:
        recursive = call.flag("recursive", False)
        if call.path == "/":
            return _json({"boolean": False})  # HDFS never deletes the root
        try:
            await self.client.rpc_delete(call.path, recursive=recursive, **call.who)
        except FileNotFoundError_:
            return _json({"boolean": False})
        return _json({"boolean": True})
