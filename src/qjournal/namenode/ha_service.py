"""HAServiceProtocol on the NameNode: status, health, and the transitions between standby, active and observer.

Why a module: the transitions are where a NameNode mistake becomes a split
brain, so their order lives in one place. Whether a transition may happen is
decided by the pure ``ha_state.py``; what it does to journals and tasks is
carried out by the daemon through :class:`HAContext` (HDFS's ``HAContext``:
start / stop the active and the standby services). ``haadmin`` and the ZKFC
call the four RPCs here.

Theory of operation:

* One transition at a time (a lock). Each starts with ``check_transition``
  (``ha_state`` invariants 1 and 3): a no-op when already there; refused when
  not allowed from this state, when manual control meets automatic failover,
  or when HA is not enabled.
* transition-to-active: stop the standby services (the tailer), then start the
  active services: open fresh journals and call ``recover_unfinalized_segments``
  on the set (for the quorum journal this takes a new epoch, which *fences*
  the previous writer), read every remaining edit from the shared journal and
  open a new segment at the next txid; only then does the state become
  ``active``. When that fails the NameNode tails again and stays standby.
* transition-to-standby: the state first (writes are refused at once), then
  stop the active services (finalize the open segment, close the journals),
  then tail. From observer it only changes the state: the tailer never stopped.
* transition-to-observer (from standby only, HDFS-12943): the state changes and
  the tailer keeps tailing; reads are then served under the observer read rule
  (``observer_rules.py``). An observer reports itself not ready to become
  active, so neither a ZKFC nor ``haadmin`` takes it into a failover.
* ``get_service_status``: ready to become active unless initializing,
  stopping, an observer, not HA, a standby in safe mode (as HDFS: ``haadmin
  -failover`` then needs ``--forceactive``), or the standby's tailer found a
  gap (purged edits). It also names the last applied txid (``cluster status``).
* ``monitor_health``: fails when stopping or after a journal failure, when a
  name or edits dir has less free space than ``dfs.namenode.resource.du.reserved``,
  when the standby's or observer's tailer died, or in safe mode with
  ``dfs.ha.nn.not-become-active-in-safemode`` (``ha_state`` invariant 5: the ZKFC
  then leaves the election, and an active in safe mode is made standby).

Invariants:

1. The state becomes ``active`` only after the active services started, that
   is after fencing and reading every finalized edit (the daemon's invariant 2),
   with no ``await`` between the two.
2. Transitions never overlap; the health check does not take the tailer that
   a transition stopped for a dead one.
3. A failed transition to active leaves the NameNode standby and tailing.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from typing import Callable, Protocol

from qjournal.config import Configuration
from qjournal.errors import HealthCheckFailedError, QJournalError, ServiceFailedError
from qjournal.namenode.addresses import nameservice_of
from qjournal.namenode.ha_state import SAFE_MODE_TIP, HAState, Transition, check_transition
from qjournal.namenode.storage import local_edits_dirs
from qjournal.namenode.tailer import EditLogTailer
from qjournal.protocol.protocols import HA_SERVICE

log = logging.getLogger(__name__)


class HAContext(Protocol):
    """What the HA service needs of its NameNode, and nothing more (the daemon implements it)."""

    #: the HA state (the service changes it on transitions)
    state: HAState
    #: this NameNode is in safe mode (``ha_state`` invariant 4)
    safe_mode: bool
    #: the journal failure that stops the NameNode, if any
    fatal_error: BaseException | None
    #: the standby's tailer (None before the image is loaded)
    tailer: EditLogTailer | None
    #: "NameNode <id>", for messages
    label: str
    clock_ms: Callable[[], int]
    #: durations (issue 28, H1: never the wall clock)
    monotonic_ms: Callable[[], int]

    @property
    def last_applied_txid(self) -> int:
        """The txid of the namespace state."""

    async def start_active_services(self) -> dict[str, int]:
        """Fence, catch up, open the edit log; on failure leave nothing open.

        Returns:
            Phase durations ``{"fence_ms", "catch_up_ms", "catch_up_txns"}``.
        """

    async def stop_active_services(self) -> None:
        """Finalize the open segment and close the writer's journals."""

    def start_standby_services(self) -> None:
        """Tail the shared journal."""

    async def stop_standby_services(self) -> None:
        """Stop tailing."""


class HAService:
    """The HAServiceProtocol handlers and transitions of one NameNode (module docstring).

    Args:
        nn: the NameNode, through the narrow :class:`HAContext`.
        conf: the failover and resource keys; the name and edits dirs the health check watches.
        name_dir: the name dir (watched for free space too).
        ha_enabled: a shared edits dir is configured (else no transition is possible).
    """

    #: the protocol this handler serves (calls run concurrently; arguments decoded by the RPC server)
    rpc_protocols = (HA_SERVICE,)

    def __init__(self, nn: HAContext, conf: Configuration, *, name_dir: str, ha_enabled: bool) -> None:
        self.nn = nn
        self.conf = conf
        self.name_dir = name_dir
        self.ha_enabled = ha_enabled
        self.automatic_failover = bool(conf.get_bool("dfs.ha.automatic-failover.enabled"))
        nameservice = nameservice_of(conf)
        if nameservice:
            per_ns = conf.get_bool(f"dfs.ha.automatic-failover.enabled.{nameservice}")
            if per_ns is not None:
                self.automatic_failover = per_ns
        self.du_reserved_bytes = int(conf.get_bytes("dfs.namenode.resource.du.reserved") or 0)
        #: ``ha_state`` invariant 5
        self.not_active_in_safe_mode = bool(conf.get_bool("dfs.ha.nn.not-become-active-in-safemode"))
        self._transition_lock = asyncio.Lock()
        #: test hook: free bytes the resource check sees instead of the real ones
        self.health_free_bytes_override: int | None = None
        #: when this NameNode last became active (ms; /jmx LastHATransitionTime)
        self.became_active_at_ms: int | None = None
        #: phase durations of the last transition to active (fence, catch-up), for operators and the bench
        self.last_transition: dict = {}

    # ------------------------------------------------------- HAServiceProtocol
    async def rpc_get_service_status(self) -> dict:
        """HAServiceProtocol getServiceStatus.

        Returns:
            ``{"state", "ready_to_become_active", "not_ready_reason", "last_applied_txid"}``.
        """
        nn = self.nn
        ready, reason = True, ""
        if nn.state == HAState.STOPPING:
            ready, reason = False, "the NameNode is stopping"
        elif nn.state == HAState.INITIALIZING:
            ready, reason = False, "the NameNode is still loading its namespace"
        elif nn.state == HAState.OBSERVER:
            ready, reason = False, "an observer becomes active only through standby"
        elif not self.ha_enabled and nn.state != HAState.ACTIVE:
            ready, reason = False, "HA is not enabled"
        elif nn.state == HAState.STANDBY and nn.safe_mode:
            ready, reason = False, f"The NameNode is in safe mode. {SAFE_MODE_TIP}"
        elif nn.state in (HAState.STANDBY, HAState.OBSERVER) and nn.tailer is not None and nn.tailer.gap:
            ready, reason = False, (f"the shared journal has a gap after txid {nn.tailer.last_applied_txid} "
                                    f"(re-run namenode -bootstrapStandby): {nn.tailer.last_error}")
        return {"state": nn.state.value, "ready_to_become_active": ready, "not_ready_reason": reason,
                "last_applied_txid": nn.last_applied_txid}

    async def rpc_monitor_health(self) -> None:
        """HAServiceProtocol monitorHealth.

        Raises:
            HealthCheckFailedError: stopping, failed journal, short of space, a dead tailer,
                or safe mode with ``dfs.ha.nn.not-become-active-in-safemode``.
        """
        nn = self.nn
        if nn.fatal_error is not None or nn.state == HAState.STOPPING:
            raise HealthCheckFailedError(f"{nn.label} is stopping"
                                         + (f" after a journal failure: {nn.fatal_error}"
                                            if nn.fatal_error else ""))
        self._check_available_resources()
        if (nn.tailer is not None and nn.state in (HAState.STANDBY, HAState.OBSERVER) and not nn.tailer.running
                and not self._transition_lock.locked()):  # invariant 2
            raise HealthCheckFailedError(f"{nn.label}: the edit log tailer is not running")
        if nn.safe_mode and self.not_active_in_safe_mode:
            raise HealthCheckFailedError(f"{nn.label} is in safe mode and configured to report UNHEALTHY to "
                                         f"ZKFC in safe mode (dfs.ha.nn.not-become-active-in-safemode)")
        return None

    async def rpc_transition_to_active(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToActive (see :meth:`transition_to_active`).

        Raises:
            ServiceFailedError.
        """
        await self.transition_to_active(request_source)

    async def rpc_transition_to_standby(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToStandby (see :meth:`transition_to_standby`).

        Raises:
            ServiceFailedError.
        """
        await self.transition_to_standby(request_source)

    async def rpc_transition_to_observer(self, request_source: str = "user") -> None:
        """HAServiceProtocol transitionToObserver (see :meth:`transition_to_observer`).

        Raises:
            ServiceFailedError.
        """
        await self.transition_to_observer(request_source)

    def _check_available_resources(self) -> None:
        """HDFS's ``NameNodeResourceChecker``: every name and edits dir has the reserved free space.

        Raises:
            HealthCheckFailedError: a dir is short of space or cannot be examined.
        """
        dirs = [self.name_dir] + local_edits_dirs(self.conf)
        for d in sorted(set(dirs)):
            try:
                free = shutil.disk_usage(d).free
            except OSError as e:
                raise HealthCheckFailedError(f"NameNode resource check failed: {d}: {e}", path=d) from None
            if self.health_free_bytes_override is not None:
                free = self.health_free_bytes_override
            if free < self.du_reserved_bytes:
                raise HealthCheckFailedError(
                    f"NameNode resource check failed: {d} has {free} bytes available, less than "
                    f"dfs.namenode.resource.du.reserved = {self.du_reserved_bytes}",
                    path=d, free=free, reserved=self.du_reserved_bytes)

    # ------------------------------------------------------------- transitions
    def _transition_is_noop(self, target: HAState, request_source: str) -> bool:
        """The checks every transition starts with (under ``_transition_lock``).

        Returns:
            True when the NameNode already is in ``target`` (nothing to do).

        Raises:
            ServiceFailedError: not allowed from this state, manual control refused
                under automatic failover, HA not enabled, or safe mode refuses it
                (``ha_state`` invariant 5).
        """
        if check_transition(self.nn.state, target, request_source, self.automatic_failover,
                            self.nn.safe_mode, self.not_active_in_safe_mode) == Transition.NOOP:
            return True
        if not self.ha_enabled:
            raise ServiceFailedError("HA is not enabled (no dfs.namenode.shared.edits.dir)")
        return False

    async def transition_to_active(self, request_source: str = "user") -> None:
        """Fence the previous writer, catch up, then serve writes (module docstring).

        Args:
            request_source: ``user``, ``zkfc`` or ``user_forced``.

        Raises:
            ServiceFailedError: not allowed from this state, manual control
                refused under automatic failover, or fencing / catch-up failed
                (the NameNode then stays standby, invariant 3).
        """
        nn = self.nn
        async with self._transition_lock:
            if self._transition_is_noop(HAState.ACTIVE, request_source):
                return
            await nn.stop_standby_services()
            t0 = nn.monotonic_ms()
            try:
                phases = await nn.start_active_services()
            except Exception as e:
                log.error("transition to active failed; staying standby: %s", e)
                nn.start_standby_services()
                if isinstance(e, QJournalError):
                    raise ServiceFailedError(f"{nn.label}: transition to active failed: {e}",
                                             cause=type(e).__name__) from None
                raise
            nn.state = HAState.ACTIVE  # invariant 1: no await since the services started
            self.became_active_at_ms = nn.clock_ms()   # a time of day, for the status page
            self.last_transition = dict(phases, took_ms=nn.monotonic_ms() - t0)
            log.info("transitioned to active", extra={"txid": nn.last_applied_txid, **self.last_transition})

    async def transition_to_standby(self, request_source: str = "user") -> None:
        """Refuse writes at once, finalize the segment, tail (module docstring).

        Args:
            request_source: ``user``, ``zkfc`` or ``user_forced``.

        Raises:
            ServiceFailedError: not allowed from this state, or manual control
                refused under automatic failover.
        """
        nn = self.nn
        async with self._transition_lock:
            if self._transition_is_noop(HAState.STANDBY, request_source):
                return
            prev = nn.state
            nn.state = HAState.STANDBY
            if prev == HAState.ACTIVE:
                await nn.stop_active_services()
            nn.start_standby_services()

    async def transition_to_observer(self, request_source: str = "user") -> None:
        """Serve consistent reads while tailing; from standby only (module docstring).

        Args:
            request_source: ``user``, ``zkfc`` or ``user_forced``.

        Raises:
            ServiceFailedError: not from standby (an active must become standby first), or HA not enabled.
        """
        nn = self.nn
        async with self._transition_lock:
            if self._transition_is_noop(HAState.OBSERVER, request_source):
                return
            nn.state = HAState.OBSERVER
            nn.start_standby_services()  # idempotent: the tailer keeps running
            log.info("transitioned to observer", extra={"txid": nn.last_applied_txid})


__all__ = ["HAService", "HAContext"]
