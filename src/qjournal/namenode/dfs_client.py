"""DFSClient: the NameNode client with a failover proxy.

Why: an HA pair is only useful if clients find the active NameNode by
themselves and carry on through a failover without losing or doubling a
write. HDFS's ``ConfiguredFailoverProxyProvider`` + ``RetryPolicies.failoverOnNetworkException``.

Theory of operation:

* The NameNodes come from the nameservice configuration: ``dfs.nameservices``,
  ``dfs.ha.namenodes.<ns>``, ``dfs.namenode.rpc-address.<ns>.<nn>`` (or the
  non-HA ``dfs.namenode.rpc-address``), in configured order.
* A call goes to the current NameNode. ``StandbyError``, a lost or refused
  connection, a deadline and an edit-log failure of the NameNode
  (``EditLogFatalError``) make the client *fail over*: it moves to the next
  NameNode and retries, sleeping ``base * 2^(k-1)`` ms (capped) before the
  k-th consecutive failover after the first, for at most
  ``dfs.client.failover.max.attempts`` failovers. Every other error (``File
  exists``, ``Permission denied``, ...) is the answer and is raised at once.
* Writes carry this client's 16-byte ``client_id`` and a ``call_id`` that stays
  the same across the retries of one call, so a NameNode that already applied
  the call (or whose predecessor did) answers from its retry cache.

Invariants:

1. A write is retried only with its original ``(client_id, call_id)``.
2. At most ``max_attempts + 1`` sends per call; back-off is bounded by
   ``sleep_max_ms``.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import logging
import os
from typing import Any

from qjournal.errors import InvalidRequestError, RpcTimeoutError, StandbyError, TransportError
from qjournal.namenode.editlog import EditLogFatalError  # registers the type for the wire
from qjournal.transport.rpc import RpcClient, RpcConnector, tcp_connector
from qjournal.transport.tls import client_context_from_conf

log = logging.getLogger(__name__)

WRITE_METHODS = ("mkdirs", "create", "delete", "rename", "set_permission", "set_owner",
                 "set_times", "set_replication")


def _failover_error(e: BaseException) -> bool:
    return isinstance(e, (StandbyError, TransportError, RpcTimeoutError, EditLogFatalError,
                          ConnectionError, OSError))


class DFSClient:
    """A client of one nameservice (module docstring).

    Args:
        conf: a :class:`~qjournal.config.Configuration`, used for addresses and retry keys.
        nameservice: which nameservice (default: the first of ``dfs.nameservices``).
        addresses: explicit ``[(name, host, port)]`` instead of the configuration.
        user / groups: the identity sent with each call (simple authentication).
        connect: how to reach a NameNode (default: TCP, mutual TLS when ``qjournal.rpc.tls.enabled``).
        client_id: the 16-byte id of the retry cache (default: random).
    """

    def __init__(self, conf: Any = None, *, nameservice: str | None = None,
                 addresses: list[tuple[str, str, int]] | None = None,
                 user: str | None = None, groups: list[str] | None = None,
                 connect: RpcConnector | None = None, client_id: bytes | None = None) -> None:
        self.conf = conf
        self._connect = connect
        self.addresses = addresses if addresses is not None else self._configured(conf, nameservice)
        if not self.addresses:
            raise InvalidRequestError(
                "no NameNode address: set dfs.nameservices, dfs.ha.namenodes.<ns> and "
                "dfs.namenode.rpc-address.<ns>.<nn> (or dfs.namenode.rpc-address)")
        self.user = user or _default_user()
        self.groups = list(groups) if groups is not None else [self.user]
        self.client_id = client_id or os.urandom(16)
        self._call_ids = itertools.count(0)
        g = (lambda k, d: conf.get_int(k) if conf is not None else d)
        gd = (lambda k, d: conf.get_duration_ms(k) if conf is not None else d)
        self.max_attempts = int(g("dfs.client.failover.max.attempts", 15))
        self.sleep_base_ms = int(gd("dfs.client.failover.sleep.base.millis", 500))
        self.sleep_max_ms = int(gd("dfs.client.failover.sleep.max.millis", 15000))
        self.rpc_timeout_ms = int(gd("qjournal.client.rpc-timeout.ms", 60000))
        self.connect_timeout_ms = int(gd("ipc.client.connect.timeout", 20000))
        self.current = 0
        self._clients: dict[int, Any] = {}
        self.failovers = 0

    @staticmethod
    def _configured(conf: Any, nameservice: str | None) -> list[tuple[str, str, int]]:
        if conf is None:
            return []
        ns = nameservice or (conf.get_list("dfs.nameservices") or [None])[0]
        out = []
        if ns:
            for nn in conf.get_list(f"dfs.ha.namenodes.{ns}"):
                addr = conf.get_address(f"dfs.namenode.rpc-address.{ns}.{nn}")
                if addr is None:
                    raise InvalidRequestError(f"configuration key dfs.namenode.rpc-address.{ns}.{nn} is not set",
                                              key=f"dfs.namenode.rpc-address.{ns}.{nn}")
                out.append((nn, addr[0], addr[1]))
        if not out:
            addr = conf.get_address("dfs.namenode.rpc-address")
            if addr is not None:
                out.append(("nn", addr[0], addr[1]))
        return out

    async def _client(self, idx: int) -> Any:
        c = self._clients.get(idx)
        if c is not None and not c.is_closed:
            return c
        _name, host, port = self.addresses[idx]
        if self._connect is None:
            ssl = client_context_from_conf(self.conf) if self.conf is not None else None
            self._connect = tcp_connector(ssl=ssl, connect_timeout_ms=self.connect_timeout_ms)
        c = await self._connect(host, port)
        self._clients[idx] = c
        return c

    async def _drop(self, idx: int) -> None:
        c = self._clients.pop(idx, None)
        if c is not None:
            try:
                await c.close()
            except Exception:  # closing a dead connection
                pass

    async def call(self, method: str, **kwargs: Any) -> Any:
        """Call ``method`` on the active NameNode, failing over as needed (invariants 1-2).

        Raises:
            The NameNode's error (typed), or the last failover error once
            ``max_attempts`` failovers did not reach an active NameNode.
        """
        kwargs = dict(kwargs, user=self.user, groups=self.groups)
        if method in WRITE_METHODS:
            kwargs["client_id"] = self.client_id
            kwargs["call_id"] = next(self._call_ids)
        attempt = 0
        while True:
            idx = self.current
            try:
                c = await self._client(idx)
                return await c.call(method, timeout_ms=self.rpc_timeout_ms, **kwargs)
            except Exception as e:
                if not _failover_error(e):
                    raise
                if isinstance(e, (TransportError, RpcTimeoutError, OSError)):
                    await self._drop(idx)
                if attempt >= self.max_attempts:
                    raise
                attempt += 1
                self.failovers += 1
                self.current = (idx + 1) % len(self.addresses)
                if attempt > 1 and attempt > len(self.addresses) - 1:
                    delay = min(self.sleep_max_ms, self.sleep_base_ms * 2 ** (attempt - len(self.addresses)))
                    await asyncio.sleep(delay / 1000.0)
                log.debug("failing over to %s after %s", self.addresses[self.current][0], e)

    async def close(self) -> None:
        for idx in sorted(self._clients):
            await self._drop(idx)

    async def __aenter__(self) -> "DFSClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------ ClientProtocol
    # Each method is one ClientProtocol call (docs/architecture.md, "NameNode client RPC"):
    # the arguments and results are those of the table; every method raises the
    # NameNode's typed error (FileNotFoundError_, FileAlreadyExistsError,
    # PermissionDeniedError, ...) or, after max_attempts failovers, the last
    # StandbyError / TransportError / RpcTimeoutError.
    async def mkdirs(self, path: str, perm: int = 0o755, create_parent: bool = True) -> bool:
        """mkdir (-p with create_parent). Returns True. Raises the NameNode's typed errors."""
        return await self.call("mkdirs", path=path, perm=perm, create_parent=create_parent)

    async def create(self, path: str, perm: int = 0o644, overwrite: bool = False,
                     replication: int = 3, block_size: int = 134217728) -> dict:
        """Create an empty file. Returns its FileStatus dict. Raises FileAlreadyExistsError and others."""
        return await self.call("create", path=path, perm=perm, overwrite=overwrite,
                               replication=replication, block_size=block_size)

    async def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete (recursive for a tree). Returns True. Raises FileNotFoundError_, DirectoryNotEmptyError."""
        return await self.call("delete", path=path, recursive=recursive)

    async def rename(self, src: str, dst: str, overwrite: bool = False) -> bool:
        """Rename (into dst when it is a directory). Returns True. Raises FileAlreadyExistsError and others."""
        return await self.call("rename", src=src, dst=dst, overwrite=overwrite)

    async def set_permission(self, path: str, perm: int) -> None:
        """chmod. Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self.call("set_permission", path=path, perm=perm)

    async def set_owner(self, path: str, owner: str | None = None, group: str | None = None) -> None:
        """chown. Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self.call("set_owner", path=path, owner=owner, group=group)

    async def set_times(self, path: str, mtime: int = -1, atime: int = -1) -> None:
        """Set mtime/atime (-1 unchanged). Returns None. Raises FileNotFoundError_."""
        return await self.call("set_times", path=path, mtime=mtime, atime=atime)

    async def set_replication(self, path: str, replication: int) -> None:
        """setrep. Returns None. Raises FileNotFoundError_, InvalidRequestError."""
        return await self.call("set_replication", path=path, replication=replication)

    async def get_file_info(self, path: str) -> dict | None:
        """stat. Returns the FileStatus dict or None. Raises PermissionDeniedError."""
        return await self.call("get_file_info", path=path)

    async def list_status(self, path: str) -> list[dict]:
        """ls. Returns FileStatus dicts sorted by name. Raises FileNotFoundError_."""
        return await self.call("list_status", path=path)

    async def get_content_summary(self, path: str) -> dict:
        """du/count. Returns the summary dict. Raises FileNotFoundError_."""
        return await self.call("get_content_summary", path=path)


class HAServiceClient:
    """HAServiceProtocol calls to one NameNode (haadmin, ZKFC)."""

    def __init__(self, host: str, port: int, timeout_ms: int = 20000, ssl: Any = None) -> None:
        self.host, self.port, self.timeout_ms = host, port, timeout_ms
        self.ssl = ssl  # client TLS context (qjournal.rpc.tls.*), None: plain TCP
        self._c: Any = None

    async def _client(self) -> Any:
        if self._c is None or self._c.is_closed:  # reconnect after a lost connection
            self._c = await RpcClient.connect_tcp(self.host, self.port,
                                                  connect_timeout_ms=self.timeout_ms, ssl=self.ssl)
        return self._c

    async def get_service_status(self) -> dict:
        """HAServiceProtocol get_service_status. Returns the status dict."""
        return await (await self._client()).call("get_service_status", timeout_ms=self.timeout_ms)

    async def monitor_health(self) -> None:
        """HAServiceProtocol monitor_health. Returns None. Raises HealthCheckFailedError."""
        return await (await self._client()).call("monitor_health", timeout_ms=self.timeout_ms)

    async def transition_to_active(self, request_source: str = "user") -> None:
        """HAServiceProtocol transition_to_active. Raises ServiceFailedError."""
        return await (await self._client()).call("transition_to_active", timeout_ms=self.timeout_ms,
                                                 request_source=request_source)

    async def transition_to_standby(self, request_source: str = "user") -> None:
        """HAServiceProtocol transition_to_standby. Raises ServiceFailedError."""
        return await (await self._client()).call("transition_to_standby", timeout_ms=self.timeout_ms,
                                                 request_source=request_source)

    async def close(self) -> None:
        if self._c is not None:
            c, self._c = self._c, None
            await c.close()


def _default_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in a container
        return os.environ.get("USER", "nobody")


__all__ = ["DFSClient", "HAServiceClient", "WRITE_METHODS"]
