"""A failover requested by an operator (``qjournal haadmin -failover``), on either HA path.

Why it lives in ``ha``: a failover is the failover controller's business; the
``haadmin`` command (``cli/haadmin.py``) only parses arguments and prints.

Two paths, as in HDFS:

* Automatic failover enabled (``dfs.ha.automatic-failover.enabled``): the request
  goes to the *target's* ZKFC (``graceful_failover``), which asks the active's
  ZKFC to cede and then wins the election itself, so the ZKFCs never fight the
  manual action. ``<from>`` must be the current active.
* Manual HA: check that the target is healthy and ready; ask ``<from>`` to become
  standby; if it does not answer, fence it with ``dfs.ha.fencing.methods`` (only with
  ``force_fence`` when it did answer but refused); then make ``<to>`` active.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any, Callable

from qjournal.errors import FencingError, QJournalError, ServiceFailedError
from qjournal.ha.fencing import FencingSettings, HATarget, fence_old_active
from qjournal.ha.health_monitor import tcp_proxy_factory
from qjournal.ha.zkfc import resolve_ha_addresses
from qjournal.protocol.protocols import HA_SERVICE, ZKFC

__all__ = ["FailoverRequest", "failover"]


@dataclass(frozen=True)
class FailoverRequest:
    """One ``-failover`` from ``src`` to ``dst``.

    Attributes:
        conf: the configuration (ZKFC addresses, fencing methods, timeouts).
        nameservice: the nameservice of both NameNodes.
        automatic: automatic failover is enabled (go through the ZKFCs).
        src, dst: NameNode ids; src_addr, dst_addr: their RPC addresses.
        timeout_ms: deadline of each check call (``ha.failover-controller.cli-check.rpc-timeout.ms``).
        force_fence: fence ``src`` even if it went standby (``--forcefence``).
        force_active: make ``dst`` active even if it says it is not ready (``--forceactive``).
        ssl_context: client TLS for the calls (``qjournal.rpc.tls.*``), or None.
    """

    conf: Any
    nameservice: str
    automatic: bool
    src: str
    dst: str
    src_addr: tuple[str, int]
    dst_addr: tuple[str, int]
    timeout_ms: int
    force_fence: bool = False
    force_active: bool = False
    ssl_context: ssl.SSLContext | None = None


async def _call(req: FailoverRequest, addr: tuple[str, int], method: str, timeout_ms: int, **kwargs: Any) -> Any:
    proxy = await tcp_proxy_factory(addr[0], addr[1], timeout_ms, req.ssl_context)()
    try:
        return await proxy.call(method, timeout_ms=timeout_ms, **kwargs)
    finally:
        await proxy.close()


async def failover(req: FailoverRequest, note: Callable[[str], None]) -> str:
    """Fail over from ``req.src`` to ``req.dst``.

    Args:
        req: the request.
        note: told of a step the operator should see (e.g. that ``src`` is being fenced).

    Returns:
        The line announcing success.

    Raises:
        ServiceFailedError: ``src`` is not active (automatic path), ``dst`` is not ready,
            or ``src`` could not be fenced; QJournalError: a call failed.
    """
    if req.src == req.dst:
        raise ServiceFailedError(f"source and target are the same NameNode {req.src}")
    if req.automatic:
        _, _, _, zkfc_addr = resolve_ha_addresses(req.conf, req.dst, req.nameservice)
        st = await _call(req, req.src_addr, HA_SERVICE.get_service_status, req.timeout_ms)
        if st.get("state") != "active":
            raise ServiceFailedError(f"{req.src} is not the active NameNode (it is {st.get('state')})")
        timeout_ms = int(req.conf.get_duration_ms("ha.failover-controller.new-active.rpc-timeout.ms") or 60000)
        result = await _call(req, zkfc_addr, ZKFC.graceful_failover, timeout_ms + req.timeout_ms)
        return (f"Failover to NameNode at {':'.join(map(str, req.dst_addr))} successful "
                f"({result.get('ms', 0):.0f} ms)")

    # manual HA
    await _call(req, req.dst_addr, HA_SERVICE.monitor_health, req.timeout_ms)
    st = await _call(req, req.dst_addr, HA_SERVICE.get_service_status, req.timeout_ms)
    if not st.get("ready_to_become_active", True) and not req.force_active:
        raise ServiceFailedError(f"{req.dst} is not ready to become active: {st.get('not_ready_reason')}")
    need_fence = req.force_fence
    try:
        await _call(req, req.src_addr, HA_SERVICE.transition_to_standby, req.timeout_ms, request_source="user")
    except QJournalError as e:
        note(f"failover: {req.src} did not go standby ({e}); fencing it")
        need_fence = True
    if need_fence:
        target = HATarget(req.nameservice or "", req.src, req.src_addr[0], req.src_addr[1])
        try:
            how = await fence_old_active(
                target, FencingSettings.from_conf(req.conf),
                proxy_factory=tcp_proxy_factory(req.src_addr[0], req.src_addr[1], req.timeout_ms,
                                                req.ssl_context))
        except FencingError as e:
            raise ServiceFailedError(f"unable to fence {req.src}: {e}; {req.dst} was not made active") from e
        note(f"fenced {req.src} ({how})")
    await _call(req, req.dst_addr, HA_SERVICE.transition_to_active, req.timeout_ms, request_source="user")
    return f"Failover to NameNode at {req.dst_addr[0]}:{req.dst_addr[1]} successful"
