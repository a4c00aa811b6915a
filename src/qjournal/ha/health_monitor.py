"""HealthMonitor: watch one NameNode through HAServiceProtocol and report health changes.

Why it exists (seed 004, "HealthMonitor实现"): the failover controller may only
keep, or compete for, the active role while its local NameNode is healthy. The
monitor turns a stream of RPC outcomes into a small set of states and calls back
on every change; the ZKFC decides what a state means for the election.

Theory of operation:

* The **rules** are one pure function, :func:`next_health_state`, from
  ``(current state, check outcome)`` to the next state. No clock, no I/O; it is
  table-tested (tests/ha/test_health_rules.py).
* The **shell**, :class:`HealthMonitor`, is a watched background task
  (:func:`qjournal.util.tasks.spawn`): connect to the service
  (retrying every ``connect_retry_interval_ms``), then every ``check_interval_ms``
  call ``monitor_health`` and ``get_service_status`` with ``rpc_timeout_ms`` each,
  classify the outcome, apply the rules and fire callbacks on change.

States (seed 004): ``INITIALIZING`` (no check done yet), ``SERVICE_HEALTHY``,
``SERVICE_NOT_RESPONDING`` (no answer, timeout, connection refused or lost),
``SERVICE_UNHEALTHY`` (``monitor_health`` raised ``HealthCheckFailedError``),
``HEALTH_MONITOR_FAILED`` (the monitor itself broke: a programming error or an
answer it cannot interpret; terminal; the ZKFC exits).

Invariants:

1. ``HEALTH_MONITOR_FAILED`` is terminal: no outcome leaves it.
2. Only a completed ``monitor_health`` *and* ``get_service_status`` with a valid
   state makes the service ``SERVICE_HEALTHY``.
3. Callbacks fire once per state change, in order, from the event loop (never from
   another thread); the service-status callback fires when the HA state changes.
4. The monitor never stops silently: if its task dies of an unexpected error (a
   callback's bug included), the error is logged, the state becomes
   ``HEALTH_MONITOR_FAILED`` and ``on_crash`` tells the owner (the ZKFC then exits
   non-zero).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Protocol

from qjournal.errors import (
    HealthCheckFailedError, QJournalError, RpcTimeoutError, TransportError,
)
from qjournal.transport import RpcClient
from qjournal.util.tasks import cancel_and_wait, spawn
from qjournal.protocol.protocols import HA_SERVICE

__all__ = ["HealthState", "CheckOutcome", "next_health_state", "classify_error",
           "HealthMonitor", "HAServiceProxy", "ProxyFactory", "tcp_proxy_factory",
           "HA_SERVICE_STATES"]

log = logging.getLogger("qjournal.ha.health_monitor")

#: the values ``get_service_status()["state"]`` may take (docs/architecture.md)
HA_SERVICE_STATES = ("initializing", "standby", "active", "observer", "stopping")


class HealthState(str, enum.Enum):
    INITIALIZING = "INITIALIZING"
    SERVICE_HEALTHY = "SERVICE_HEALTHY"
    SERVICE_NOT_RESPONDING = "SERVICE_NOT_RESPONDING"
    SERVICE_UNHEALTHY = "SERVICE_UNHEALTHY"
    HEALTH_MONITOR_FAILED = "HEALTH_MONITOR_FAILED"


class CheckOutcome(str, enum.Enum):
    """What one health check (or connection attempt) produced."""

    HEALTHY = "healthy"                  # monitor_health ok and status valid
    UNHEALTHY = "unhealthy"              # HealthCheckFailedError
    NOT_RESPONDING = "not_responding"    # timeout / transport error / connect refused
    MONITOR_ERROR = "monitor_error"      # a bug or an uninterpretable answer


_TABLE: dict[CheckOutcome, HealthState] = {
    CheckOutcome.HEALTHY: HealthState.SERVICE_HEALTHY,
    CheckOutcome.UNHEALTHY: HealthState.SERVICE_UNHEALTHY,
    CheckOutcome.NOT_RESPONDING: HealthState.SERVICE_NOT_RESPONDING,
    CheckOutcome.MONITOR_ERROR: HealthState.HEALTH_MONITOR_FAILED,
}


def next_health_state(current: HealthState, outcome: CheckOutcome) -> HealthState:
    """The pure transition rule of the HealthMonitor.

    Args:
        current: the state before the check.
        outcome: what the check produced.

    Returns:
        The next state: ``current`` if it is ``HEALTH_MONITOR_FAILED`` (invariant 1),
        otherwise the state the outcome names (the latest check wins: one good
        answer makes a not-responding service healthy again, one timeout makes a
        healthy one not responding, as in Hadoop's HealthMonitor).
    """
    if current is HealthState.HEALTH_MONITOR_FAILED:
        return current
    return _TABLE[outcome]


def classify_error(exc: BaseException) -> CheckOutcome:
    """Map an exception from a health-check RPC to a :class:`CheckOutcome`.

    Args:
        exc: the exception raised by ``monitor_health``/``get_service_status``/connect.

    Returns:
        ``UNHEALTHY`` for ``HealthCheckFailedError``; ``NOT_RESPONDING`` for timeouts,
        transport errors, OS-level connection errors and any other expected
        ``QJournalError`` from the service; ``MONITOR_ERROR`` for anything else.
    """
    if isinstance(exc, HealthCheckFailedError):
        return CheckOutcome.UNHEALTHY
    if isinstance(exc, (RpcTimeoutError, TransportError, asyncio.TimeoutError, OSError,
                        ConnectionError, EOFError)):
        return CheckOutcome.NOT_RESPONDING
    if isinstance(exc, QJournalError):
        return CheckOutcome.NOT_RESPONDING
    return CheckOutcome.MONITOR_ERROR


class HAServiceProxy(Protocol):
    """The part of ``qjournal.transport.RpcClient`` the HA code uses."""

    async def call(self, method: str, timeout_ms: int | None = None, **kwargs: Any) -> Any: ...

    async def close(self) -> None: ...


#: ``async () -> HAServiceProxy``; raises on connection failure
ProxyFactory = Callable[[], Awaitable[HAServiceProxy]]


def tcp_proxy_factory(host: str, port: int, connect_timeout_ms: int, ssl_context=None) -> ProxyFactory:
    """A :data:`ProxyFactory` connecting with ``qjournal.transport.RpcClient`` over TCP.

    Args:
        host, port: the HAServiceProtocol (NameNode RPC) address.
        connect_timeout_ms: connect deadline.
        ssl_context: optional client TLS context.
    """
    async def connect() -> HAServiceProxy:
        kwargs: dict[str, Any] = {"connect_timeout_ms": connect_timeout_ms}
        if ssl_context is not None:
            kwargs["ssl"] = ssl_context
        return await RpcClient.connect_tcp(host, port, **kwargs)
    return connect


@dataclass
class HealthMonitorSettings:
    """The HealthMonitor's limits (Hadoop keys ``ha.health-monitor.*``)."""

    check_interval_ms: int = 1000
    rpc_timeout_ms: int = 45000
    connect_retry_interval_ms: int = 1000
    sleep_after_disconnect_ms: int = 1000

    @classmethod
    def from_conf(cls, conf) -> "HealthMonitorSettings":
        """Read ``ha.health-monitor.{check-interval,rpc-timeout,connect-retry-interval,sleep-after-disconnect}.ms``."""
        return cls(check_interval_ms=conf.get_duration_ms("ha.health-monitor.check-interval.ms"),
                   rpc_timeout_ms=conf.get_duration_ms("ha.health-monitor.rpc-timeout.ms"),
                   connect_retry_interval_ms=conf.get_duration_ms(
                       "ha.health-monitor.connect-retry-interval.ms"),
                   sleep_after_disconnect_ms=conf.get_duration_ms(
                       "ha.health-monitor.sleep-after-disconnect.ms"))

    def wait_after_ms(self, outcome: "CheckOutcome", connected: bool, disconnected: bool) -> int:
        """How long to wait before the next check (Hadoop's HealthMonitor loop).

        Args:
            outcome: the check's outcome.
            connected: a connection to the service is open now.
            disconnected: this check lost an open connection (a failed call closed it).
        """
        if outcome is not CheckOutcome.NOT_RESPONDING or connected:
            return self.check_interval_ms
        return self.sleep_after_disconnect_ms if disconnected else self.connect_retry_interval_ms


HealthCallback = Callable[[HealthState], Any]
StatusCallback = Callable[[dict], Any]


class HealthMonitor:
    """The asyncio shell around :func:`next_health_state`.

    Args:
        proxy_factory: connects to the monitored service.
        settings: intervals and timeouts.
        on_health_change: called (sync or async) with the new :class:`HealthState`.
        on_service_status: called with the new ``get_service_status`` dict when its
            ``state`` changes.
        name: for logs (e.g. ``nn1``).
        on_crash: called with the error if the monitor's task dies (invariant 4).
    """

    def __init__(self, proxy_factory: ProxyFactory, settings: HealthMonitorSettings,
                 on_health_change: HealthCallback | None = None,
                 on_service_status: StatusCallback | None = None, name: str = "",
                 on_crash: Callable[[BaseException], None] | None = None) -> None:
        self._factory = proxy_factory
        self.settings = settings
        self._on_health = on_health_change
        self._on_status = on_service_status
        self._on_crash = on_crash
        self.name = name
        self.state = HealthState.INITIALIZING
        self.last_status: dict | None = None
        self.last_error: str = ""
        self._proxy: HAServiceProxy | None = None
        self._disconnected = False  # the last check closed a connection that had been open
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()
        self._changed = asyncio.Condition()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Start polling in a watched task on the running loop (invariant 4)."""
        if self._task is None:
            self._task = spawn(self._run(), name=f"health-{self.name}", on_crash=self._crashed)

    def _crashed(self, exc: BaseException) -> None:
        """The monitor's task died (invariant 4): it is failed, and the owner is told."""
        self.last_error = f"health monitor task died: {exc!r}"
        self.state = HealthState.HEALTH_MONITOR_FAILED
        if self._on_crash is not None:
            self._on_crash(exc)

    async def stop(self) -> None:
        """Stop polling and close the connection."""
        self._stop.set()
        await cancel_and_wait(self._task, ignore_errors=True)
        self._task = None
        await self._drop_proxy()

    async def wait_for_state(self, states: tuple[HealthState, ...], timeout_s: float) -> HealthState:
        """Wait until the state is one of ``states``.

        Raises:
            asyncio.TimeoutError: not reached within ``timeout_s``.
        """
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.state in states), timeout_s)
        return self.state

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        s = self.settings
        while not self._stop.is_set():
            try:
                outcome = await self._check_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug in the monitor itself
                log.exception("health monitor %s failed", self.name)
                self.last_error = repr(e)
                outcome = CheckOutcome.MONITOR_ERROR
            await self._apply(outcome)
            if self.state is HealthState.HEALTH_MONITOR_FAILED:
                return
            wait_ms = s.wait_after_ms(outcome, self._proxy is not None, self._disconnected)
            try:
                await asyncio.wait_for(self._stop.wait(), wait_ms / 1000.0)
            except asyncio.TimeoutError:
                pass

    async def _check_once(self) -> CheckOutcome:
        s = self.settings
        self._disconnected = False
        if self._proxy is None:
            try:
                self._proxy = await asyncio.wait_for(self._factory(), s.rpc_timeout_ms / 1000.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.last_error = f"connect: {e!r}"
                return classify_error(e)
        try:
            await self._proxy.call(HA_SERVICE.monitor_health, timeout_ms=s.rpc_timeout_ms)
            status = await self._proxy.call(HA_SERVICE.get_service_status, timeout_ms=s.rpc_timeout_ms)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self.last_error = repr(e)
            outcome = classify_error(e)
            if outcome is CheckOutcome.NOT_RESPONDING:
                await self._drop_proxy()
                self._disconnected = True
            return outcome
        if not isinstance(status, dict) or status.get("state") not in HA_SERVICE_STATES:
            self.last_error = f"uninterpretable get_service_status answer {status!r}"
            return CheckOutcome.MONITOR_ERROR
        self.last_error = ""
        if self.last_status is None or status.get("state") != self.last_status.get("state"):
            self.last_status = status
            await _maybe_await(self._on_status, status)
        self.last_status = status
        return CheckOutcome.HEALTHY

    async def _apply(self, outcome: CheckOutcome) -> None:
        new = next_health_state(self.state, outcome)
        if new is self.state:
            return
        old, self.state = self.state, new
        log.info("health of %s: %s -> %s", self.name, old.value, new.value,
                 extra={"event": "health_state", "nn": self.name, "old": old.value,
                        "new": new.value, "error": self.last_error})
        async with self._changed:
            self._changed.notify_all()
        await _maybe_await(self._on_health, new)

    async def _drop_proxy(self) -> None:
        p, self._proxy = self._proxy, None
        if p is not None:
            try:
                await p.close()
            except Exception:
                pass


async def _maybe_await(cb: Callable | None, arg: Any) -> None:
    if cb is None:
        return
    r = cb(arg)
    if asyncio.iscoroutine(r) or isinstance(r, asyncio.Future):
        await r
