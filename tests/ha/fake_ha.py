"""A small fake HA service (the four HAServiceProtocol methods) and in-process controller wiring.

Why: the elector, health monitor, fencing and controller are tested against a
real ZooKeeper but without real NameNodes, so each test takes about a second.
The fake records every transition so tests can check "never two actives" and
"never active without fencing".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from qjournal.errors import HealthCheckFailedError, InvalidRequestError, ServiceFailedError, TransportError
from qjournal.ha.elector import ElectorSettings
from qjournal.ha.fencing import FencingSettings, HATarget, parse_fencing_methods
from qjournal.ha.health_monitor import HealthMonitorSettings
from qjournal.ha.zkfc import ZKFailoverController, ZKFCSettings, format_zk


@dataclass
class FakeHAService:
    """A NameNode stand-in: state, health, reachability, and a log of transitions."""

    nn_id: str
    state: str = "standby"
    healthy: bool = True
    reachable: bool = True
    refuse_active: bool = False
    history: list = field(default_factory=list)   # (wall time, nn_id, new state, request_source)
    shared_log: list | None = None                 # one timeline across services

    async def rpc_get_service_status(self) -> dict:
        return {"state": self.state, "ready_to_become_active": True, "not_ready_reason": ""}

    async def rpc_monitor_health(self) -> None:
        if not self.healthy:
            raise HealthCheckFailedError(f"{self.nn_id}: resources low")

    async def rpc_transition_to_active(self, request_source: str) -> None:
        if self.refuse_active:
            raise ServiceFailedError(f"{self.nn_id} refuses to become active")
        self._set("active", request_source)

    async def rpc_transition_to_standby(self, request_source: str) -> None:
        self._set("standby", request_source)

    def _set(self, state: str, source: str) -> None:
        if state != self.state:
            entry = (time.time(), self.nn_id, state, source)
            self.history.append(entry)
            if self.shared_log is not None:
                self.shared_log.append(entry)
        self.state = state


class FakeProxy:
    """An in-process HAServiceProxy (or ZKFC proxy) calling ``rpc_<method>`` on an object."""

    def __init__(self, target: Any, reachable=lambda: True) -> None:
        self.target = target
        self.reachable = reachable

    async def call(self, method: str, timeout_ms: int | None = None, **kwargs: Any) -> Any:
        if not self.reachable():
            raise TransportError(f"connection to {getattr(self.target, 'nn_id', '?')} refused")
        fn = getattr(self.target, f"rpc_{method}", None)
        if fn is None:
            raise InvalidRequestError(f"unknown method {method}")
        return await fn(**kwargs)

    async def close(self) -> None:
        return None


def service_factory(svc: FakeHAService):
    async def connect() -> FakeProxy:
        if not svc.reachable:
            raise ConnectionRefusedError(f"{svc.nn_id} not reachable")
        return FakeProxy(svc, lambda: svc.reachable)
    return connect


class Harness:
    """N in-process controllers for fake services, sharing one ZooKeeper and one znode parent."""

    def __init__(self, quorum: str, parent: str, n: int, fencing: str = "", session_timeout_ms: int = 2000,
                 nameservice: str = "ns1") -> None:
        self.quorum = quorum
        self.parent = parent
        self.nameservice = nameservice
        self.session_timeout_ms = session_timeout_ms
        self.fencing_text = fencing
        self.log: list = []
        self.services = {f"nn{i + 1}": FakeHAService(f"nn{i + 1}", shared_log=self.log) for i in range(n)}
        self.zkfcs: dict[str, ZKFailoverController] = {}

    def settings(self, nn_id: str) -> ZKFCSettings:
        return ZKFCSettings(
            nameservice=self.nameservice, nn_id=nn_id, nn_host="127.0.0.1",
            nn_port=10000 + int(nn_id[2:]), zkfc_host="127.0.0.1", zkfc_port=20000 + int(nn_id[2:]),
            elector=ElectorSettings(quorum=self.quorum, nameservice=self.nameservice,
                                    parent_znode=self.parent, session_timeout_ms=self.session_timeout_ms,
                                    sleep_after_failure_ms=200),
            health=HealthMonitorSettings(check_interval_ms=100, rpc_timeout_ms=1000,
                                         connect_retry_interval_ms=100),
            fencing=FencingSettings(methods=parse_fencing_methods(self.fencing_text),
                                    graceful_timeout_ms=500, shell_timeout_ms=5000, pid_wait_ms=2000),
            new_active_timeout_ms=5000, standby_timeout_ms=500, connect_timeout_ms=500,
            graceful_failover_timeout_ms=10000)

    def make(self, nn_id: str) -> ZKFailoverController:
        svc = self.services[nn_id]

        def target_factory(t: HATarget):
            return service_factory(self.services[t.nn_id])

        def zkfc_factory(t: HATarget):
            async def connect() -> FakeProxy:
                return FakeProxy(self.zkfcs[t.nn_id])
            return connect

        z = ZKFailoverController(self.settings(nn_id), proxy_factory=service_factory(svc),
                                 target_proxy_factory=target_factory, zkfc_client_factory=zkfc_factory)
        self.zkfcs[nn_id] = z
        return z

    async def start_all(self) -> None:
        await asyncio.to_thread(format_zk, self.settings("nn1").elector)
        for nn_id in sorted(self.services):
            await self.make(nn_id).start(serve_rpc=False)

    async def stop_all(self) -> None:
        for nn_id in sorted(self.zkfcs):
            try:
                await self.zkfcs[nn_id].stop()
            except Exception:
                pass

    def actives(self) -> list[str]:
        return sorted(n for n, s in self.services.items() if s.state == "active")

    def elector_actives(self) -> list[str]:
        return sorted(n for n, z in self.zkfcs.items()
                      if z.elector is not None and z.elector.state.value == "ACTIVE")

    def check_never_two_actives(self) -> None:
        """Replay the shared transition log: at no instant were two services active."""
        active: set = set()
        for _, nn, state, _ in self.log:
            if state == "active":
                active.add(nn)
            else:
                active.discard(nn)
            assert len(active) <= 1, f"two actives at once: {sorted(active)}; log={self.log}"

