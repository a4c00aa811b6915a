"""ZKFailoverController: one per NameNode; wires HealthMonitor -> ActiveStandbyElector -> HAServiceProtocol.

Why it exists (seed 004, "ZKFailoverController实现"): automatic failover needs a
process beside each NameNode that (a) watches its health, (b) competes for the
active role in ZooKeeper only while that NameNode is healthy, (c) makes it active
or standby as the election decides, and (d) fences the previous active first.

Theory of operation:

* Health drives election. ``SERVICE_HEALTHY`` -> ``join_election``;
  ``SERVICE_UNHEALTHY`` / ``SERVICE_NOT_RESPONDING`` -> ``quit_election(need_fence=True)``
  (the breadcrumb stays, so the next active fences this NameNode);
  ``HEALTH_MONITOR_FAILED`` -> the controller fails (the daemon exits non-zero).
* Election drives the NameNode. ``become_active`` -> ``transition_to_active(request_source="zkfc")``
  with ``ha.failover-controller.new-active.rpc-timeout.ms``; a failure makes the
  elector release the lock and back off. ``become_standby`` ->
  ``transition_to_standby``. Neutral mode (ZooKeeper connection suspended) starts
  nothing: an active NameNode that is really cut off is fenced by QJM epochs
  and, once its session expires, by the new active's fencing.
* Observers (HDFS-12943, Hadoop's ``ZKFailoverController`` after HDFS-14130):
  a NameNode whose state is ``observer`` takes no part in the election. The
  health monitor reports the state before the health (``on_service_status``
  first), so a controller whose NameNode is an observer never joins; one that
  sees its NameNode become an observer quits; when the NameNode is made standby
  again (and is healthy) it joins again.
* Fencing of the old active: :func:`qjournal.ha.fencing.fence_old_active`
  (graceful first, then ``dfs.ha.fencing.methods``).
* Manual graceful failover (``haadmin -failover nn1 nn2`` with automatic failover
  enabled): the *target's* controller (``graceful_failover``) asks the active's
  controller to ``cede_active`` (it makes its NameNode standby, stays out of the
  election for a while and deletes its breadcrumb when the hand-over was clean),
  then waits until it has won the election itself.
* The controller serves a small RPC interface on ``dfs.ha.zkfc.port`` (or
  ``dfs.ha.zkfc.rpc-address.<ns>.<nn>``): ``get_zkfc_status``, ``cede_active``,
  ``graceful_failover`` (ZKFCProtocol, under ``security.zkfc.protocol.acl`` when
  ``hadoop.security.authorization`` is on), and the policy refresh calls.

Invariants:

1. The controller never calls ``transition_to_active`` unless its elector holds the
   lock and the old active was fenced (elector invariant 2).
2. While the local NameNode is not ``SERVICE_HEALTHY``, or is an observer, the
   controller is not in the election.
3. Every step of a failover is recorded with a wall-clock timestamp in
   :attr:`ZKFailoverController.events` and in the structured log (``event=``),
   which the failover benchmark reads.
4. The controller never stops watching silently: if the health monitor's or the
   elector's task dies, the controller fails (:attr:`failed`, the daemon exits
   non-zero and its supervisor restarts it).

ZooKeeper and time come in through injection (``zk_factory``, the event loop's
clock, ``wall_clock``), so the deterministic simulator runs this class unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from qjournal.errors import ConfigError, QJournalError, ServiceFailedError
from qjournal.ha.elector import ActiveStandbyElector, ElectorSettings, ElectorState, ZooKeeperFactory
from qjournal.ha.fencing import FenceMethodRunner, FencingSettings, HATarget, fence_old_active
from qjournal.ha.health_monitor import (
    HealthMonitor, HealthMonitorSettings, HealthState, ProxyFactory, tcp_proxy_factory,
)
from qjournal.ha.zk_kazoo import KazooZooKeeper
from qjournal.ha.zk_kazoo import format_zk as kazoo_format_zk
from qjournal.protocol.protocols import HA_SERVICE, ZKFC, ZKFC_ACLS
from qjournal.security.service_auth import HTTP_ZKFC, ServiceAuthorization
from qjournal.transport import RpcServer
from qjournal.transport import RpcHandlers
from qjournal.transport.tls import client_context_from_conf, server_context_from_conf

__all__ = ["ZKFailoverController", "ZKFCSettings", "resolve_ha_addresses", "kazoo_zk_factory",
           "format_zk"]

log = logging.getLogger("qjournal.ha.zkfc")


@dataclass
class ZKFCSettings:
    """Everything a controller needs besides its collaborators."""

    nameservice: str
    nn_id: str
    nn_host: str
    nn_port: int
    zkfc_host: str
    zkfc_port: int
    elector: ElectorSettings
    health: HealthMonitorSettings
    fencing: FencingSettings
    new_active_timeout_ms: int = 60000
    standby_timeout_ms: int = 5000
    connect_timeout_ms: int = 5000
    graceful_failover_timeout_ms: int = 60000
    ssl_client: Any = None   # ssl.SSLContext for calls to NameNodes and other ZKFCs (qjournal.rpc.tls.*)
    ssl_server: Any = None   # ssl.SSLContext of this ZKFC's RPC server
    service_auth: ServiceAuthorization | None = None  # the service-level ACLs of its RPC server

    @classmethod
    def from_conf(cls, conf, nn_id: str | None = None, nameservice: str | None = None) -> "ZKFCSettings":
        """Build the settings of the controller of NameNode ``nn_id``.

        Raises:
            ConfigError: no nameservice, unknown NameNode id, no NameNode address, or a
                malformed ZooKeeper / fencing key.
        """
        ns, nn, (nn_host, nn_port), (zk_host, zk_port) = resolve_ha_addresses(conf, nn_id, nameservice)
        return cls(ssl_client=client_context_from_conf(conf), ssl_server=server_context_from_conf(conf),
                   service_auth=ServiceAuthorization(conf, ZKFC_ACLS, service=f"ZKFC {nn}",
                                                     http=HTTP_ZKFC),
                   nameservice=ns, nn_id=nn, nn_host=nn_host, nn_port=nn_port,
                   zkfc_host=zk_host, zkfc_port=zk_port,
                   elector=ElectorSettings.from_conf(conf, ns),
                   health=HealthMonitorSettings.from_conf(conf),
                   fencing=FencingSettings.from_conf(conf),
                   new_active_timeout_ms=conf.get_duration_ms("ha.failover-controller.new-active.rpc-timeout.ms"),
                   standby_timeout_ms=conf.get_duration_ms(
                       "ha.failover-controller.graceful-fence.rpc-timeout.ms"),
                   connect_timeout_ms=conf.get_duration_ms(
                       "ha.failover-controller.graceful-fence.rpc-timeout.ms"),
                   graceful_failover_timeout_ms=conf.get_duration_ms(
                       "ha.failover-controller.new-active.rpc-timeout.ms"))

    def target(self) -> HATarget:
        """This controller's NameNode as lock/breadcrumb data."""
        return HATarget(self.nameservice, self.nn_id, self.nn_host, self.nn_port,
                        self.zkfc_host, self.zkfc_port)


def kazoo_zk_factory(settings: ElectorSettings) -> KazooZooKeeper:
    """The production :data:`~qjournal.ha.elector.ZooKeeperFactory`: a kazoo session."""
    return KazooZooKeeper(settings.quorum, settings.session_timeout_ms, auth=settings.auth,
                          default_acl=settings.acls, tls=settings.tls,
                          op_timeout_s=(settings.op_timeout_ms or settings.session_timeout_ms) / 1000.0)


def format_zk(settings: ElectorSettings, force: bool = False, timeout_s: float = 15.0) -> str:
    """Create ``<parent>/<nameservice>`` (``qjournal zkfc -formatZK``). Blocking; for the CLI.

    Raises:
        ElectorError: the znode exists and ``force`` was not given, or ZooKeeper failed.
    """
    return kazoo_format_zk(settings.quorum, settings.znode_dir, settings.parent_znode, acls=settings.acls,
                           auth=settings.auth, session_timeout_ms=settings.session_timeout_ms, force=force,
                           timeout_s=timeout_s, tls=settings.tls)


def resolve_ha_addresses(conf, nn_id: str | None = None, nameservice: str | None = None
                         ) -> tuple[str, str, tuple[str, int], tuple[str, int]]:
    """Find ``(nameservice, nn_id, NameNode RPC address, ZKFC RPC address)`` in the configuration.

    The ZKFC address is ``dfs.ha.zkfc.rpc-address.<ns>.<nn>`` when set, else the
    NameNode's host with ``dfs.ha.zkfc.port``.

    Raises:
        ConfigError: names the missing key.
    """
    nss = conf.get_list("dfs.nameservices")
    ns = nameservice or (nss[0] if nss else None)
    if not ns:
        raise ConfigError("dfs.nameservices is empty: the ZKFC needs a nameservice", key="dfs.nameservices")
    nn = nn_id or conf.get("dfs.ha.namenode.id")
    nns = conf.get_list(f"dfs.ha.namenodes.{ns}")
    if not nn:
        raise ConfigError("no NameNode id: pass --nn-id or set dfs.ha.namenode.id", key="dfs.ha.namenode.id")
    if nns and nn not in nns:
        raise ConfigError(f"NameNode id {nn!r} is not in dfs.ha.namenodes.{ns} = {nns}",
                          key=f"dfs.ha.namenodes.{ns}")
    nn_addr = conf.get_address(f"dfs.namenode.rpc-address.{ns}.{nn}")
    if nn_addr is None:
        raise ConfigError(f"dfs.namenode.rpc-address.{ns}.{nn} is not set",
                          key=f"dfs.namenode.rpc-address.{ns}.{nn}")
    zk_addr = conf.get_address(f"dfs.ha.zkfc.rpc-address.{ns}.{nn}")
    if zk_addr is None:
        zk_addr = (nn_addr[0], conf.get_int("dfs.ha.zkfc.port"))
    return ns, nn, nn_addr, zk_addr


class ZKFailoverController:
    """The controller of one NameNode (and the handler of its ZKFCProtocol calls).

    Args:
        settings: see :class:`ZKFCSettings`.
        proxy_factory: connects to the local NameNode (default: TCP to ``nn_host:nn_port``).
        target_proxy_factory: ``HATarget -> ProxyFactory`` used to reach an old active
            for graceful fencing (default: TCP).
        zkfc_client_factory: ``HATarget -> ProxyFactory`` reaching another controller's RPC
            (default: TCP to ``zkfc_host:zkfc_port``).
        zk_factory: makes the ZooKeeper client (default: kazoo).
        wall_clock: wall time of the event timeline (default ``time.time``).
        fence_method_runner: runs one configured fencing method (default: real processes).
    """

    #: the protocol this controller serves over RPC (arguments decoded by the RPC server)
    rpc_protocols = (ZKFC,)

    def __init__(self, settings: ZKFCSettings, proxy_factory: ProxyFactory | None = None,
                 target_proxy_factory: Callable[[HATarget], ProxyFactory] | None = None,
                 zkfc_client_factory: Callable[[HATarget], ProxyFactory] | None = None,
                 zk_factory: ZooKeeperFactory = kazoo_zk_factory,
                 wall_clock: Callable[[], float] = time.time,
                 fence_method_runner: FenceMethodRunner | None = None) -> None:
        self.settings = settings
        self._zk_factory = zk_factory
        self._fence_method_runner = fence_method_runner
        self._wall_clock = wall_clock
        s = settings
        self._nn_factory = proxy_factory or tcp_proxy_factory(s.nn_host, s.nn_port, s.connect_timeout_ms,
                                                              s.ssl_client)
        self._target_factory = target_proxy_factory or (
            lambda t: tcp_proxy_factory(t.host, t.port, s.connect_timeout_ms, s.ssl_client))
        self._zkfc_factory = zkfc_client_factory or (
            lambda t: tcp_proxy_factory(t.zkfc_host, t.zkfc_port, s.connect_timeout_ms, s.ssl_client))
        self.health = HealthMonitor(self._nn_factory, s.health, on_health_change=self._on_health,
                                    on_service_status=self._on_service_status, name=s.nn_id,
                                    on_crash=self._crashed)
        self.elector: ActiveStandbyElector | None = None
        self.failed = asyncio.Event()
        self.failure: str = ""
        self.events: list[tuple[float, str, dict]] = []
        #: how often each event of this controller happened since it started (the events list is bounded)
        self.event_counts: dict[str, int] = {}
        self._rpc_server = None
        self._stopping = False
        self._transitioning = False  # a transition_to_active of ours is in flight
        self._observer_state_seen = False  # the NameNode's last reported state was observer

    # ------------------------------------------------------------------ lifecycle
    async def start(self, serve_rpc: bool = True) -> tuple[str, int] | None:
        """Start the RPC server (optional), connect to ZooKeeper and start health monitoring.

        Returns:
            The bound ZKFC RPC address, or None without RPC.

        Raises:
            ElectorError: ZooKeeper unreachable. TransportError: the RPC port cannot be bound.
        """
        bound = None
        if serve_rpc:
            sa = self.settings.service_auth
            self._rpc_server = RpcServer(RpcHandlers(self, sa) if sa is not None else self,
                                         name=f"zkfc-{self.settings.nn_id}",
                                         authorize=sa.authorize_rpc if sa is not None and sa.enabled else None)
            bound = await self._rpc_server.start_tcp(self.settings.zkfc_host, self.settings.zkfc_port,
                                                     ssl=self.settings.ssl_server)
            self.settings.zkfc_host, self.settings.zkfc_port = bound
        self.elector = ActiveStandbyElector(self.settings.elector, self.settings.target().to_bytes(),
                                            self, zk_factory=self._zk_factory, name=self.settings.nn_id,
                                            wall_clock=self._wall_clock)
        self.elector.events = self.events  # one timeline for the controller (invariant 3)
        self.elector.on_crash = self._crashed  # invariant 4
        try:
            await self.elector.start()
        except BaseException:
            if self._rpc_server is not None:
                await self._rpc_server.stop()
            raise
        self.health.start()
        self._record("zkfc_started", zkfc=f"{self.settings.zkfc_host}:{self.settings.zkfc_port}")
        return bound

    async def stop(self) -> None:
        """Stop cleanly: if active, make the NameNode standby first and then delete the breadcrumb."""
        if self._stopping:
            return
        self._stopping = True
        await self.health.stop()
        delete_breadcrumb = False
        if self.elector is not None:
            if self.elector.state is ElectorState.ACTIVE:
                delete_breadcrumb = await self._try_standby() is None
            await self.elector.close(delete_breadcrumb=delete_breadcrumb)
        if self._rpc_server is not None:
            await self._rpc_server.stop()
        self._record("zkfc_stopped", breadcrumb_deleted=delete_breadcrumb)

    # ------------------------------------------------------------------ health -> election
    async def _on_health(self, state: HealthState) -> None:
        self._record("health", state=state.value, error=self.health.last_error)
        if self._stopping or self.elector is None:
            return
        if state is HealthState.SERVICE_HEALTHY:
            if not self._local_is_observer():  # invariant 2
                self.elector.join_election()
        elif state in (HealthState.SERVICE_UNHEALTHY, HealthState.SERVICE_NOT_RESPONDING):
            await self.elector.quit_election(need_fence=True)  # invariant 2
        elif state is HealthState.HEALTH_MONITOR_FAILED:
            await self.elector.quit_election(need_fence=True)
            self._fail(f"health monitor failed: {self.health.last_error}")

    def _crashed(self, exc: BaseException) -> None:
        """A background task of the controller died (invariant 4): the controller fails."""
        self._fail(f"a background task died: {exc!r}")

    def _fail(self, reason: str) -> None:
        if not self.failure:
            self.failure = reason
            self._record("zkfc_failed", reason=reason)
            log.error("zkfc %s: %s", self.settings.nn_id, reason)
        self.failed.set()

    def _local_is_observer(self) -> bool:
        return (self.health.last_status or {}).get("state") == "observer"

    async def _on_service_status(self, status: dict) -> None:
        previous = self._observer_state_seen
        self._observer_state_seen = status.get("state") == "observer"
        self._record("service_state", state=status.get("state"))
        el = self.elector
        if el is None or self._stopping:
            return
        if self._observer_state_seen:  # invariant 2: observers stay out of the election
            if not previous:
                self._record("observer_quit_election", elector_state=el.state.value)
            await el.quit_election(need_fence=el.state is ElectorState.ACTIVE)
            return
        if previous and status.get("state") == "standby" and self.health.state is HealthState.SERVICE_HEALTHY:
            # made standby again: electable (the health state did not change, so no callback)
            self._record("observer_rejoin_election", state=status.get("state"))
            el.join_election()
        # The NameNode left the active state behind our back (e.g. a manual transition):
        # stop claiming the lock, and re-join once it is healthy again.
        if el.state is ElectorState.ACTIVE and status.get("state") == "standby" and not self._transitioning:
            self._record("service_state_mismatch", expected="active", actual="standby")
            await el.quit_election(need_fence=True)
            el.hold_off(self.settings.elector.sleep_after_failure_ms)
            if self.health.state is HealthState.SERVICE_HEALTHY:
                el.join_election()

    # ------------------------------------------------------------------ elector callbacks
    async def become_active(self) -> None:
        """Elector callback: make the local NameNode active (invariant 1).

        Raises:
            ServiceFailedError: the transition failed or timed out.
        """
        t0 = self._now()
        self._record("transition_to_active_start")
        proxy = None
        self._transitioning = True
        try:
            proxy = await self._nn_factory()
            await proxy.call(HA_SERVICE.transition_to_active, timeout_ms=self.settings.new_active_timeout_ms,
                             request_source="zkfc")
        except (QJournalError, OSError, asyncio.TimeoutError) as e:
            self._record("transition_to_active_failed", error=repr(e))
            raise ServiceFailedError(f"zkfc {self.settings.nn_id}: transition_to_active of "
                                     f"{self.settings.nn_id} failed: {e}") from e
        finally:
            self._transitioning = False
            if proxy is not None:
                await _close_quietly(proxy)
        self._record("transition_to_active_done", ms=round((self._now() - t0) * 1000, 1))

    async def become_standby(self) -> None:
        """Elector callback: make the local NameNode standby (errors are logged, not raised)."""
        reason = await self._try_standby()
        if reason is not None:
            log.warning("zkfc %s: transition_to_standby failed: %s", self.settings.nn_id, reason)

    async def enter_neutral_mode(self) -> None:
        """Elector callback: ZooKeeper connection suspended; start nothing new."""
        self._record("neutral_mode")

    async def fence_old_active(self, data: bytes) -> None:
        """Elector callback: fence the NameNode the breadcrumb names.

        Raises:
            FencingError: no method succeeded.
        """
        target = HATarget.from_bytes(data)
        t0 = self._now()
        self._record("fence_old_active_start", target=target.nn_id)
        try:
            how = await fence_old_active(target, self.settings.fencing,
                                         proxy_factory=self._target_factory(target),
                                         run_method=self._fence_method_runner)
        except QJournalError as e:
            self._record("fence_old_active_failed", target=target.nn_id, error=str(e))
            raise
        self._record("fence_old_active_done", target=target.nn_id, method=how,
                     ms=round((self._now() - t0) * 1000, 1))

    async def _try_standby(self) -> str | None:
        proxy = None
        try:
            proxy = await self._nn_factory()
            await proxy.call(HA_SERVICE.transition_to_standby, timeout_ms=self.settings.standby_timeout_ms,
                             request_source="zkfc")
            self._record("transition_to_standby_done")
            return None
        except (QJournalError, OSError, asyncio.TimeoutError) as e:
            self._record("transition_to_standby_failed", error=repr(e))
            return repr(e)
        finally:
            if proxy is not None:
                await _close_quietly(proxy)

    # ------------------------------------------------------------------ RPC (ZKFCProtocol)
    async def rpc_get_zkfc_status(self, events: bool = False) -> dict:
        """Status for ``cluster status``, ``haadmin`` and the benchmark.

        Args:
            events: include the event timeline ``[[wall time, event, details], ...]``.
        """
        el = self.elector
        out: dict[str, Any] = {
            "nameservice": self.settings.nameservice, "nn_id": self.settings.nn_id,
            "nn_address": f"{self.settings.nn_host}:{self.settings.nn_port}",
            "health": self.health.state.value,
            "service_state": (self.health.last_status or {}).get("state"),
            "elector_state": el.state.value if el else "INIT",
            "zk_session": f"{el.session_id:#x}" if el and el.session_id else None,
            "failed": self.failure,
        }
        if events:
            out["events"] = [[t, name, details] for t, name, details in self.events]
        return out

    async def rpc_cede_active(self, millis_to_cede: int) -> dict:
        """Give up the active role and stay out of the election for ``millis_to_cede``.

        The local NameNode is made standby first; only if that succeeded is the
        breadcrumb deleted (so the successor skips fencing).

        Returns:
            ``{"was_active": bool, "clean": bool}``.
        """
        el = self._elector()
        was_active = el.state is ElectorState.ACTIVE
        self._record("cede_active", millis=millis_to_cede, was_active=was_active)
        el.hold_off(int(millis_to_cede))
        reason = await self._try_standby() if was_active else None
        await el.quit_election(need_fence=reason is not None)
        if self.health.state is HealthState.SERVICE_HEALTHY and not self._local_is_observer():
            el.join_election()  # held off until the cede period is over
        return {"was_active": was_active, "clean": reason is None}

    async def rpc_graceful_failover(self) -> dict:
        """Make this controller's NameNode active by asking the current active to cede.

        Returns:
            ``{"active": nn_id, "previous": nn_id or None, "ms": duration}``.

        Raises:
            ServiceFailedError: the local NameNode is not healthy, the old active's
                controller could not be reached, or this node did not win in time.
        """
        el = self._elector()
        s = self.settings
        t0 = self._now()
        self._record("graceful_failover_start")
        if self.health.state is not HealthState.SERVICE_HEALTHY:
            raise ServiceFailedError(f"zkfc {s.nn_id}: cannot fail over to {s.nn_id}: its health is "
                                     f"{self.health.state.value}")
        if self._local_is_observer():
            raise ServiceFailedError(f"zkfc {s.nn_id}: cannot fail over to {s.nn_id}: it is an observer "
                                     f"(make it standby first)")
        if el.state is ElectorState.ACTIVE:
            return {"active": s.nn_id, "previous": s.nn_id, "ms": 0.0}
        el.clear_hold_off()  # this node may have ceded earlier; the operator now wants it active
        data = await el.read_active_data()
        previous = HATarget.from_bytes(data) if data else None
        if previous is not None and previous.nn_id != s.nn_id:
            proxy = None
            try:
                proxy = await self._zkfc_factory(previous)()
                # cede for twice the graceful fence timeout (as Hadoop's ZKFC does), not for the
                # whole failover timeout: a longer cede keeps the old side out of the election when
                # this side fails later (e.g. its ZKFC pauses), delaying the next takeover by it
                await proxy.call(ZKFC.cede_active, timeout_ms=s.graceful_failover_timeout_ms,
                                 millis_to_cede=2 * s.fencing.graceful_timeout_ms)
            except (QJournalError, OSError, asyncio.TimeoutError) as e:
                raise ServiceFailedError(f"zkfc {s.nn_id}: the controller of the active {previous.nn_id} "
                                         f"at {previous.zkfc_host}:{previous.zkfc_port} did not cede: {e}"
                                         ) from e
            finally:
                if proxy is not None:
                    await _close_quietly(proxy)
        el.join_election()
        try:
            await el.wait_for_state((ElectorState.ACTIVE,), s.graceful_failover_timeout_ms / 1000.0)
        except asyncio.TimeoutError as e:
            raise ServiceFailedError(f"zkfc {s.nn_id}: did not become active within "
                                     f"{s.graceful_failover_timeout_ms} ms after the old active ceded") from e
        ms = round((self._now() - t0) * 1000, 1)
        self._record("graceful_failover_done", ms=ms)
        return {"active": s.nn_id, "previous": previous.nn_id if previous else None, "ms": ms}

    # ------------------------------------------------------------------ helpers
    def _elector(self) -> ActiveStandbyElector:
        if self.elector is None:
            raise ServiceFailedError(f"zkfc {self.settings.nn_id} is not started")
        return self.elector

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _record(self, event: str, **details: Any) -> None:
        self.event_counts[event] = self.event_counts.get(event, 0) + 1
        self.events.append((self._wall_clock(), event, details))
        if len(self.events) > 400:
            del self.events[:100]
        log.info("zkfc %s: %s", self.settings.nn_id, event,
                 extra={"event": event, "nn": self.settings.nn_id, **details})


async def _close_quietly(proxy: Any) -> None:
    try:
        await proxy.close()
    except (QJournalError, OSError):
        pass
