"""``qjournal haadmin -failover [--forcefence] [--forceactive] <from> <to>``.

Why it lives here: ``cli/haadmin.py`` belongs to the NameNode part and loads this
module as a plugin (``PLUGIN_MODULES``); a failover is the failover controller's
business.

Two paths, as in HDFS:

* Automatic failover enabled (``dfs.ha.automatic-failover.enabled``): the request
  goes to the *target's* ZKFC (``graceful_failover``), which asks the active's
  ZKFC to cede and then wins the election itself, so the ZKFCs never fight the
  manual action. ``<from>`` must be the current active.
* Manual HA: check that the target is healthy and ready; ask ``<from>`` to become
  standby; if it does not answer, fence it with ``dfs.ha.fencing.methods`` (only with
  ``--forcefence`` when it did answer but refused); then make ``<to>`` active.
"""

from __future__ import annotations

import sys

from qjournal.cli.haadmin import Handler, HAAdminContext, register_handler
from qjournal.errors import FencingError, QJournalError, ServiceFailedError
from qjournal.ha.health_monitor import tcp_proxy_factory

__all__ = ["failover"]


_SSL: list = []  # the client TLS context of this haadmin run (qjournal.rpc.tls.*), set by failover()


async def _call(host: str, port: int, method: str, timeout_ms: int, **kwargs):
    proxy = await tcp_proxy_factory(host, port, timeout_ms, _SSL[0] if _SSL else None)()
    try:
        return await proxy.call(method, timeout_ms=timeout_ms, **kwargs)
    finally:
        await proxy.close()


async def failover(ctx: HAAdminContext, flags: set[str], args: list[str]) -> int:
    """The ``-failover`` command. Returns the exit status.

    Raises:
        QJournalError: a step failed (haadmin prints it and exits 1).
    """
    from qjournal.ha.fencing import FencingSettings, HATarget, fence_old_active
    from qjournal.ha.zkfc import resolve_ha_addresses
    from qjournal.transport.tls import client_context_from_conf

    _SSL[:] = [client_context_from_conf(ctx.conf)]

    src, dst = args
    if src == dst:
        print(f"failover: source and target are the same NameNode {src}", file=sys.stderr)
        return 1
    for nn in (src, dst):
        ctx.address(nn)  # raises naming an unknown id
    if ctx.automatic_failover:
        _, _, _, (zh, zp) = resolve_ha_addresses(ctx.conf, dst, ctx.nameservice)
        st = await _call(*ctx.address(src), "get_service_status", ctx.timeout_ms)
        if st.get("state") != "active":
            print(f"failover: {src} is not the active NameNode (it is {st.get('state')})", file=sys.stderr)
            return 1
        timeout_ms = int(ctx.conf.get_duration_ms("ha.failover-controller.new-active.rpc-timeout.ms") or 60000)
        result = await _call(zh, zp, "graceful_failover", timeout_ms + ctx.timeout_ms)
        print(f"Failover to NameNode at {':'.join(map(str, ctx.address(dst)))} successful "
              f"({result.get('ms', 0):.0f} ms)")
        return 0

    # manual HA
    dst_addr, src_addr = ctx.address(dst), ctx.address(src)
    await _call(*dst_addr, "monitor_health", ctx.timeout_ms)
    st = await _call(*dst_addr, "get_service_status", ctx.timeout_ms)
    if not st.get("ready_to_become_active", True) and "--forceactive" not in flags:
        raise ServiceFailedError(f"failover: {dst} is not ready to become active: {st.get('not_ready_reason')}")
    need_fence = "--forcefence" in flags
    try:
        await _call(*src_addr, "transition_to_standby", ctx.timeout_ms, request_source="user")
    except QJournalError as e:
        print(f"failover: {src} did not go standby ({e}); fencing it", file=sys.stderr)
        need_fence = True
    if need_fence:
        target = HATarget(ctx.nameservice or "", src, src_addr[0], src_addr[1])
        try:
            how = await fence_old_active(
                target, FencingSettings.from_conf(ctx.conf),
                proxy_factory=tcp_proxy_factory(src_addr[0], src_addr[1], ctx.timeout_ms, _SSL[0]))
        except FencingError as e:
            raise ServiceFailedError(f"failover: unable to fence {src}: {e}; {dst} was not made active") from e
        print(f"fenced {src} ({how})")
    await _call(*dst_addr, "transition_to_active", ctx.timeout_ms, request_source="user")
    print(f"Failover to NameNode at {dst_addr[0]}:{dst_addr[1]} successful")
    return 0


register_handler("-failover", Handler(failover, "-failover [--forcefence] [--forceactive] <serviceId> <serviceId>",
                                      ("--forcefence", "--forceactive"), nargs=2))
