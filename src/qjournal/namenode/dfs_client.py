"""DFSClient: the NameNode client with a failover proxy, and observer reads.

Why: an HA pair is only useful if clients find the active NameNode by
themselves and carry on through a failover without losing or doubling a
write. HDFS's ``ConfiguredFailoverProxyProvider`` + ``RetryPolicies.failoverOnNetworkException``;
with ``dfs.client.failover.proxy.provider.<ns>`` set to
``org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider``, also
HDFS's ``ObserverReadProxyProvider`` (HDFS-12943): reads go to observers.

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

* State id (the client half of HDFS's alignment context). Every call sends
  :attr:`DFSClient.state_id`, the highest state id seen in any answer (or in a
  namespace error's ``state_id`` field), and every answer raises it.
* Observer reads. ``list_status``, ``get_file_info`` and ``get_content_summary``
  go to an observer: the NameNodes' states are probed with
  ``get_service_status`` on first use, and again once the observers known
  all left that state (after a probe found none, not before
  ``dfs.client.failover.observer.probe.retry.period``). Before its first read the
  client calls ``msync`` on the active (and again whenever
  ``dfs.client.failover.observer.auto-msync-period.<ns>`` has passed), so it
  reads at least every write acknowledged before. An observer behind the
  client's state id holds the read for at most its
  ``dfs.namenode.observer.read.wait.ms`` and then refuses it
  (``ObserverRetryOnActiveError``); the client tries the next observer, and when
  no observer answers the read goes to the active through the failover path.
  Writes and ``msync`` always take the failover path.

Invariants:

1. A write is retried only with its original ``(client_id, call_id)``.
2. At most ``max_attempts + 1`` sends per call; back-off is bounded by
   ``sleep_max_ms``. An observer read tries each known observer once.
3. :attr:`DFSClient.state_id` never decreases; with observer reads every read is
   sent with it, so no read reflects an older namespace than one this client has
   seen or written (read-your-writes and monotonic reads, ``observer_rules``).
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import logging
import os
import time
from typing import Any, Callable

from qjournal.errors import (ConfigError, InvalidRequestError, ObserverRetryOnActiveError, QJournalError,
                             RpcTimeoutError, StandbyError, TransportError)
from qjournal.namenode.addresses import namenode_addresses
from qjournal.namenode.editlog import EditLogFatalError  # registers the type for the wire
from qjournal.protocol.protocols import CLIENT, CLIENT_READS, CLIENT_WRITES, HA_SERVICE
from qjournal.transport import RpcClient, RpcConnector, tcp_connector
from qjournal.transport.tls import client_context_from_conf

log = logging.getLogger(__name__)

#: the ClientProtocol calls sent with a client id and call id (the retry cache's), and those an observer
#: serves (the protocol table's)
WRITE_METHODS = frozenset(CLIENT_WRITES)
READ_METHODS = frozenset(CLIENT_READS)

CONFIGURED_FAILOVER_PROXY_PROVIDER = "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
OBSERVER_READ_PROXY_PROVIDER = "org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider"


def observer_reads_configured(conf: Any, nameservice: str | None) -> bool:
    """``dfs.client.failover.proxy.provider.<ns>`` names the ObserverReadProxyProvider.

    Raises:
        ConfigError: it names a provider this client does not implement.
    """
    if conf is None or not nameservice:
        return False
    key = f"dfs.client.failover.proxy.provider.{nameservice}"
    v = (conf.get(key) or "").strip()
    if not v or v.rsplit(".", 1)[-1] == "ConfiguredFailoverProxyProvider":
        return False
    if v.rsplit(".", 1)[-1] == "ObserverReadProxyProvider":
        return True
    raise ConfigError(f"{key} = {v!r}: unsupported proxy provider (expected {CONFIGURED_FAILOVER_PROXY_PROVIDER} "
                      f"or {OBSERVER_READ_PROXY_PROVIDER})", key=key)


def _failover_error(e: BaseException) -> bool:
    return isinstance(e, (StandbyError, TransportError, RpcTimeoutError, EditLogFatalError,
                          ConnectionError, OSError))


class DFSClient:
    """A client of one nameservice (module docstring).

    Args:
        conf: a :class:`~qjournal.config.Configuration`, used for addresses and retry keys.
        nameservice: which nameservice (default: the first of ``dfs.nameservices``).
        addresses: explicit ``[(name, host, port)]`` instead of the configuration.
        user / groups: the identity sent with each call (simple authentication). With
            ``qjournal.rpc.tls.enabled`` the NameNode knows the caller by its certificate:
            without ``user`` the client claims none, and a ``user`` other than the
            certificate's is refused (docs/security.md).
        connect: how to reach a NameNode (default: TCP, mutual TLS when ``qjournal.rpc.tls.enabled``).
        client_id: the 16-byte id of the retry cache (default: random).
        observer_reads: send reads to observers (default: as ``dfs.client.failover.proxy.provider.<ns>`` says).
        clock_ms: a monotonic clock in ms (msync period, probe retry period).
    """

    def __init__(self, conf: Any = None, *, nameservice: str | None = None,
                 addresses: list[tuple[str, str, int]] | None = None,
                 user: str | None = None, groups: list[str] | None = None,
                 connect: RpcConnector | None = None, client_id: bytes | None = None,
                 observer_reads: bool | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.conf = conf
        self._connect = connect
        ns = nameservice or ((conf.get_list("dfs.nameservices") or [None])[0] if conf is not None else None)
        self.nameservice = ns
        self.observer_reads = (observer_reads if observer_reads is not None
                               else observer_reads_configured(conf, ns))
        self.addresses = addresses if addresses is not None else self._configured(conf, nameservice)
        if not self.addresses:
            raise InvalidRequestError(
                "no NameNode address: set dfs.nameservices, dfs.ha.namenodes.<ns> and "
                "dfs.namenode.rpc-address.<ns>.<nn> (or dfs.namenode.rpc-address)")
        tls = bool(conf.get_bool("qjournal.rpc.tls.enabled")) if conf is not None else False
        self.user = user or ("" if tls else _default_user())
        self.groups = list(groups) if groups is not None else ([self.user] if self.user else [])
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
        self.clock_ms = clock_ms or (lambda: int(time.monotonic() * 1000))
        #: the highest state id seen (invariant 3)
        self.state_id = 0
        period = conf.get_duration_ms(f"dfs.client.failover.observer.auto-msync-period.{ns}") if (
            conf is not None and ns) else None
        #: msync before a read once this much passed since the last (None: only before the first)
        self.auto_msync_period_ms: int | None = period
        self.probe_retry_period_ms = int(gd("dfs.client.failover.observer.probe.retry.period", 600000))
        self._last_msync_ms: int | None = None
        #: indices (into addresses) of the NameNodes last seen in the observer state, in order
        self._observers: list[int] | None = None
        self._probe_found_none_at_ms: int | None = None
        # clients spread over the observers by their id, then each stays with one (below)
        self._observer_cursor = int.from_bytes(self.client_id[:4], "big")
        #: reads answered by an observer / sent to the active (tests, bench)
        self.observer_read_count = 0
        self.active_read_count = 0
        #: ``ObserverRetryOnActiveError`` answers: an observer behind this client's state id
        #: refused a read after its bounded wait (tests, the simulator's counts)
        self.observer_retry_count = 0
        #: the configured name (``nn1``, ...) of the NameNode that answered the last call, None
        #: before any answer (the simulator records which NameNode each read came from)
        self.last_answered_by: str | None = None

    @staticmethod
    def _configured(conf: Any, nameservice: str | None) -> list[tuple[str, str, int]]:
        return namenode_addresses(conf, nameservice) if conf is not None else []

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

    def _absorb(self, answer: Any) -> Any:
        """Unwrap ``{"result", "state_id"}`` and keep the highest state id (invariant 3)."""
        if type(answer) is dict and len(answer) == 2 and "result" in answer and "state_id" in answer:
            sid = answer["state_id"]
            if isinstance(sid, int) and sid > self.state_id:
                self.state_id = sid
            return answer["result"]
        return answer

    def _absorb_error(self, e: BaseException) -> None:
        fields = getattr(e, "fields", None) or {}
        sid = fields.get("state_id")
        if isinstance(sid, int) and sid > self.state_id and not isinstance(e, StandbyError):
            self.state_id = sid

    async def call(self, method: str, **kwargs: Any) -> Any:
        """Call ``method``: a read on an observer when observer reads are on, else on the active,
        failing over as needed (invariants 1-3).

        Raises:
            The NameNode's error (typed), or the last failover error once
            ``max_attempts`` failovers did not reach an active NameNode.
        """
        kwargs["user"] = self.user  # kwargs is this call's own dict: no copy
        kwargs["groups"] = self.groups
        if method in WRITE_METHODS:
            kwargs["client_id"] = self.client_id
            kwargs["call_id"] = next(self._call_ids)
        if self.observer_reads and method in READ_METHODS:
            await self._maybe_msync()
            done, answer = await self._observer_call(method, kwargs)
            if done:
                self.observer_read_count += 1
                return answer
            self.active_read_count += 1
        return await self._active_call(method, kwargs)

    async def msync(self) -> int:
        """ClientProtocol msync: learn the active's latest state id (HDFS-13688).

        Returns:
            The client's state id afterwards.
        """
        await self._active_call(CLIENT.msync, dict(user=self.user, groups=self.groups))
        self._last_msync_ms = self.clock_ms()
        return self.state_id

    async def _maybe_msync(self) -> None:
        last = self._last_msync_ms
        if last is None or (self.auto_msync_period_ms is not None
                            and self.clock_ms() - last >= self.auto_msync_period_ms):
            await self.msync()

    async def _probe_observers(self) -> list[int]:
        """The NameNodes now in the observer state, asked with ``get_service_status``."""
        now = self.clock_ms()
        if (self._probe_found_none_at_ms is not None
                and now - self._probe_found_none_at_ms < self.probe_retry_period_ms):
            return []
        found = []
        for idx in range(len(self.addresses)):
            try:
                c = await self._client(idx)
                st = await c.call(HA_SERVICE.get_service_status, timeout_ms=self.rpc_timeout_ms)
            except (QJournalError, OSError) as e:
                if isinstance(e, (TransportError, RpcTimeoutError, OSError)):
                    await self._drop(idx)
                continue
            if isinstance(st, dict) and st.get("state") == "observer":
                found.append(idx)
        self._probe_found_none_at_ms = None if found else now
        return found

    async def _observer_call(self, method: str, kwargs: dict) -> tuple[bool, Any]:
        """Try the known observers in turn (invariant 2).

        Returns:
            ``(True, answer)`` from an observer, or ``(False, None)``: send the read to the active.

        Raises:
            The observer's namespace error (FileNotFoundError_, PermissionDeniedError, ...): the answer.
        """
        if not self._observers:
            self._observers = await self._probe_observers()
        observers = list(self._observers)
        if not observers:
            return False, None
        start = self._observer_cursor % len(observers)
        for k in range(len(observers)):
            idx = observers[(start + k) % len(observers)]
            try:
                answer = await self._call_on(idx, method, kwargs)
            except Exception as e:
                if not _failover_error(e):
                    raise
                if isinstance(e, ObserverRetryOnActiveError):
                    self.observer_retry_count += 1
                elif isinstance(e, StandbyError):
                    # no longer an observer: forget it (probe again once none is left)
                    self._observers = [i for i in self._observers if i != idx]
                log.debug("observer %s did not serve %s: %s", self.addresses[idx][0], method, e)
                continue
            # Stay with the observer that answered: another may be behind the state id this answer
            # carried, and would hold the next read until it caught up (Hadoop's provider also
            # keeps its observer until it fails).
            self._observer_cursor = (start + k) % len(observers)
            return True, answer
        return False, None

    async def _call_on(self, idx: int, method: str, kwargs: dict) -> Any:
        """One call on NameNode ``idx`` with the client's state id; the answer's (or a namespace
        error's) state id is absorbed, and a connection that failed is dropped.

        Raises:
            Whatever the call raised; the caller decides whether it is a failover error.
        """
        try:
            c = self._clients.get(idx)
            if c is None or c.is_closed:  # connected once, then reused: no coroutine of _client per call
                c = await self._client(idx)
            answer = self._absorb(await c.call(method, timeout_ms=self.rpc_timeout_ms,
                                                state_id=self.state_id, **kwargs))
        except Exception as e:
            if not _failover_error(e):
                self._absorb_error(e)
            elif isinstance(e, (TransportError, RpcTimeoutError, OSError)):
                await self._drop(idx)
            raise
        self.last_answered_by = self.addresses[idx][0]
        return answer

    async def _active_call(self, method: str, kwargs: dict) -> Any:
        """The failover path: the current NameNode, then the next, ... (invariants 1-2)."""
        attempt = 0
        while True:
            idx = self.current
            try:
                return await self._call_on(idx, method, kwargs)
            except Exception as e:
                if not _failover_error(e):
                    raise
                if attempt >= self.max_attempts:
                    raise
                attempt += 1
                self.failovers += 1
                self.current = (idx + 1) % len(self.addresses)
                if attempt > 1 and attempt > len(self.addresses) - 1:
                    delay = min(self.sleep_max_ms, self.sleep_base_ms * 2 ** (attempt - len(self.addresses)))
                    await asyncio.sleep(delay / 1000.0)
                log.debug("failing over to %s after %s", self.addresses[self.current][0], e)

    async def call_on(self, name: str, method: str, *, client_protocol: bool = True, **kwargs: Any) -> Any:
        """One call on the NameNode ``name`` (of :attr:`addresses`) with this client's identity, without
        failover: ``dfsadmin``'s commands that go to every NameNode of the nameservice.

        Args:
            client_protocol: a ClientProtocol call, sent with ``user``, ``groups`` and the state id
                (False: a call of another protocol, such as the policy refreshes, whose caller is
                known by its certificate alone: sent as it is).

        Raises:
            InvalidRequestError: no NameNode of that name; else whatever the call raised.
        """
        for idx, (n, _host, _port) in enumerate(self.addresses):
            if n == name:
                if not client_protocol:
                    return await (await self._client(idx)).call(method, timeout_ms=self.rpc_timeout_ms, **kwargs)
                return await self._call_on(idx, method, dict(kwargs, user=self.user, groups=self.groups))
        raise InvalidRequestError(f"no NameNode {name!r} (known: {', '.join(a[0] for a in self.addresses)})")

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
        return await self.call(CLIENT.mkdirs, path=path, perm=perm, create_parent=create_parent)

    async def create(self, path: str, perm: int = 0o644, overwrite: bool = False,
                     replication: int = 3, block_size: int = 134217728) -> dict:
        """Create an empty file. Returns its FileStatus dict. Raises FileAlreadyExistsError and others."""
        return await self.call(CLIENT.create, path=path, perm=perm, overwrite=overwrite,
                               replication=replication, block_size=block_size)

    async def delete(self, path: str, recursive: bool = False) -> bool:
        """Delete (recursive for a tree). Returns True. Raises FileNotFoundError_, DirectoryNotEmptyError."""
        return await self.call(CLIENT.delete, path=path, recursive=recursive)

    async def rename(self, src: str, dst: str, overwrite: bool = False) -> bool:
        """Rename (into dst when it is a directory). Returns True. Raises FileAlreadyExistsError and others."""
        return await self.call(CLIENT.rename, src=src, dst=dst, overwrite=overwrite)

    async def set_permission(self, path: str, perm: int) -> None:
        """chmod. Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self.call(CLIENT.set_permission, path=path, perm=perm)

    async def set_owner(self, path: str, owner: str | None = None, group: str | None = None) -> None:
        """chown. Returns None. Raises FileNotFoundError_, PermissionDeniedError."""
        return await self.call(CLIENT.set_owner, path=path, owner=owner, group=group)

    async def set_times(self, path: str, mtime: int = -1, atime: int = -1) -> None:
        """Set mtime/atime (-1 unchanged). Returns None. Raises FileNotFoundError_."""
        return await self.call(CLIENT.set_times, path=path, mtime=mtime, atime=atime)

    async def set_replication(self, path: str, replication: int) -> None:
        """setrep. Returns None. Raises FileNotFoundError_, InvalidRequestError."""
        return await self.call(CLIENT.set_replication, path=path, replication=replication)

    async def get_file_info(self, path: str) -> dict | None:
        """stat. Returns the FileStatus dict or None. Raises PermissionDeniedError."""
        return await self.call(CLIENT.get_file_info, path=path)

    async def list_status(self, path: str) -> list[dict]:
        """ls. Returns FileStatus dicts sorted by name. Raises FileNotFoundError_."""
        return await self.call(CLIENT.list_status, path=path)

    async def get_content_summary(self, path: str) -> dict:
        """du/count. Returns the summary dict. Raises FileNotFoundError_."""
        return await self.call(CLIENT.get_content_summary, path=path)


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
        return await (await self._client()).call(HA_SERVICE.get_service_status, timeout_ms=self.timeout_ms)

    async def monitor_health(self) -> None:
        """HAServiceProtocol monitor_health. Returns None. Raises HealthCheckFailedError."""
        return await (await self._client()).call(HA_SERVICE.monitor_health, timeout_ms=self.timeout_ms)

    async def transition_to_active(self, request_source: str = "user") -> None:
        """HAServiceProtocol transition_to_active. Raises ServiceFailedError."""
        return await (await self._client()).call(HA_SERVICE.transition_to_active, timeout_ms=self.timeout_ms,
                                                 request_source=request_source)

    async def transition_to_standby(self, request_source: str = "user") -> None:
        """HAServiceProtocol transition_to_standby. Raises ServiceFailedError."""
        return await (await self._client()).call(HA_SERVICE.transition_to_standby, timeout_ms=self.timeout_ms,
                                                 request_source=request_source)

    async def transition_to_observer(self, request_source: str = "user") -> None:
        """HAServiceProtocol transition_to_observer. Raises ServiceFailedError."""
        return await (await self._client()).call(HA_SERVICE.transition_to_observer, timeout_ms=self.timeout_ms,
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


__all__ = ["DFSClient", "HAServiceClient", "WRITE_METHODS", "READ_METHODS", "OBSERVER_READ_PROXY_PROVIDER",
           "CONFIGURED_FAILOVER_PROXY_PROVIDER", "observer_reads_configured"]
