"""The ZKFC's HTTP server (aiohttp): ``/metrics``, ``/jmx`` and a status page.

Why: an operator must be told when a failover controller is out of the election while its NameNode is
healthy (nothing would take over if the active failed), when its health monitor failed, or when it sits
in neutral mode because ZooKeeper is unreachable. Hadoop's ZKFC shows this only in its log; qjournal
serves it where Prometheus scrapes the other daemons, so the shipped alert rules
(``qjournal/monitoring/alerts.yml``) can fire on it.

Theory of operation:

* Pages read the controller's fields at request time (health state, elector state, whether the
  controller wants to be in the election, its ZooKeeper connection, its event counters); nothing here
  changes the controller, and nothing is computed between requests.
* Address (:func:`zkfc_http_address_of`): ``qjournal.zkfc.http-address.<ns>.<nn>``, else the ZKFC's RPC
  host with ``qjournal.zkfc.http.port``. Under ``dfs.http.policy = HTTPS_ONLY`` the same address serves
  HTTPS with mutual TLS, and the service-level middleware (``HTTP_ZKFC``) admits callers as on the other
  daemons' instrumentation pages.

Invariants:

1. Rendering never raises into aiohttp for a controller in any state (starting, failed, stopping).
2. ``qjournal_zkfc_in_election`` is 1 exactly while the elector is asked to take part
   (``join_election`` since the last ``quit_election``).
"""

from __future__ import annotations

import html
import logging
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from qjournal.ha.elector import ElectorState
from qjournal.ha.health_monitor import HealthState
from qjournal.ha.zk_client import Conn
from qjournal.transport.http import http_server_context, jmx_response, prometheus_response, start_site

__all__ = ["ZKFCHttpServer", "zkfc_http_address_of", "ZKFC_EVENT_COUNTERS"]

log = logging.getLogger(__name__)

#: controller events counted on /metrics: (event name in ZKFailoverController.events, metric, HELP)
ZKFC_EVENT_COUNTERS = (
    ("transition_to_active_done", "transitions_to_active", "times this controller made its NameNode active"),
    ("transition_to_active_failed", "transitions_to_active_failed", "transitions to active that failed"),
    ("transition_to_standby_done", "transitions_to_standby", "times this controller made its NameNode standby"),
    ("fence_old_active_done", "old_actives_fenced", "old actives fenced by this controller"),
    ("fence_old_active_failed", "fencing_failures", "fencing attempts of an old active that failed"),
)


def zkfc_http_address_of(conf: Any, nameservice: str, nn_id: str, rpc_host: str) -> tuple[str, int]:
    """Where the ZKFC of NameNode ``nn_id`` serves HTTP (module docstring).

    Raises:
        ConfigError: a malformed address or port.
    """
    addr = conf.get_address(f"qjournal.zkfc.http-address.{nameservice}.{nn_id}")
    if addr is not None:
        return addr
    return rpc_host, int(conf.get_int("qjournal.zkfc.http.port"))


class ZKFCHttpServer:
    """aiohttp application of one :class:`~qjournal.ha.zkfc.ZKFailoverController`.

    Args:
        zkfc: the controller whose state the pages show.
        conf: for the TLS policy (``dfs.http.policy``).
    """

    def __init__(self, zkfc: Any, conf: Any) -> None:
        self.zkfc = zkfc
        self.conf = conf
        sa = zkfc.settings.service_auth
        self.app = web.Application(middlewares=[sa.http_middleware()] if sa is not None else [])
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/jmx", self.jmx)
        self.app.router.add_get("/", self.index)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen (port 0 picks a free one). Returns the bound address.

        Raises:
            OSError: the address cannot be bound.
        """
        ssl_context = http_server_context(self.conf)
        self._runner, bound = await start_site(self.app, host, port, ssl_context)
        self.url = f"{'https' if ssl_context is not None else 'http'}://{bound[0]}:{bound[1]}"
        return bound

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def values(self) -> dict:
        """One consistent read of the controller (no await inside)."""
        z = self.zkfc
        el = z.elector
        counts = {event: z.event_counts.get(event, 0) for event, _, _ in ZKFC_EVENT_COUNTERS}
        status = z.health.last_status or {}
        return {
            "nameservice": z.settings.nameservice, "nn_id": z.settings.nn_id,
            "nn_address": f"{z.settings.nn_host}:{z.settings.nn_port}",
            "health": z.health.state.value, "service_state": status.get("state") or "",
            "elector_state": el.state.value if el is not None else ElectorState.INIT.value,
            "in_election": bool(el is not None and el.wants_election),
            "zk_connected": bool(el is not None and el.conn_state is Conn.CONNECTED),
            "failed": z.failure, "counts": counts,
        }

    async def metrics(self, request: web.Request) -> web.Response:
        registry = CollectorRegistry()
        registry.register(_Collector(self))
        return prometheus_response(registry)

    async def jmx(self, request: web.Request) -> web.Response:
        v = self.values()
        bean = {"name": "Hadoop:service=ZKFC,name=ZKFCStatus", "modelerType": "ZKFCStatus",
                "Nameservice": v["nameservice"], "NameNodeId": v["nn_id"], "NameNodeAddress": v["nn_address"],
                "HealthState": v["health"], "ServiceState": v["service_state"],
                "ElectorState": v["elector_state"], "InElection": v["in_election"],
                "ZooKeeperConnected": v["zk_connected"], "Failure": v["failed"]}
        beans = [bean]
        sa = self.zkfc.settings.service_auth
        if sa is not None:
            beans.append({"name": "Hadoop:service=ZKFC,name=RpcActivity", "modelerType": "RpcActivity",
                          **sa.bean_attributes()})
        return jmx_response(request, beans)

    async def index(self, request: web.Request) -> web.Response:
        v = self.values()
        e = html.escape
        rows = "".join(f"<tr><th>{e(k)}</th><td>{e(str(val))}</td></tr>" for k, val in (
            ("NameNode", f"{v['nn_id']} at {v['nn_address']} ({v['service_state'] or 'unknown'})"),
            ("health", v["health"]), ("elector", v["elector_state"]),
            ("in the election", "yes" if v["in_election"] else "no"),
            ("ZooKeeper", "connected" if v["zk_connected"] else "not connected"),
            ("failure", v["failed"] or "none")))
        body = ("<!doctype html><html><head><meta charset='utf-8'><title>ZKFC</title>"
                "</head><body>"
                f"<h1>ZKFC of {e(v['nn_id'])} ({e(v['nameservice'])})</h1><table>{rows}</table>"
                "<p><a href='/jmx'>/jmx</a> &middot; <a href='/metrics'>/metrics</a></p></body></html>")
        return web.Response(text=body, content_type="text/html")


class _Collector:
    """Prometheus collector reading the controller at scrape time."""

    def __init__(self, server: ZKFCHttpServer) -> None:
        self.server = server

    def collect(self):  # noqa: ANN201 - prometheus collector protocol
        v = self.server.values()
        p = "qjournal_zkfc_"
        fam = GaugeMetricFamily(f"{p}health_state", "1 for the health monitor's current state", labels=["state"])
        for st in HealthState:
            fam.add_metric([st.value], 1.0 if v["health"] == st.value else 0.0)
        yield fam
        fam = GaugeMetricFamily(f"{p}elector_state", "1 for the elector's current state", labels=["state"])
        for st in ElectorState:
            fam.add_metric([st.value], 1.0 if v["elector_state"] == st.value else 0.0)
        yield fam
        for name, doc, value in (
                ("in_election", "1 while the controller takes part in the election", v["in_election"]),
                ("zookeeper_connected", "1 while the ZooKeeper session is connected", v["zk_connected"]),
                ("failed", "1 once the controller failed (the daemon exits)", bool(v["failed"])),
                ("local_observer", "1 while the local NameNode is an observer (out of the election by design)",
                 v["service_state"] == "observer")):
            g = GaugeMetricFamily(f"{p}{name}", doc)
            g.add_metric([], 1.0 if value else 0.0)
            yield g
        for event, name, doc in ZKFC_EVENT_COUNTERS:
            c = CounterMetricFamily(f"{p}{name}", doc)
            c.add_metric([], float(v["counts"][event]))
            yield c
        sa = self.server.zkfc.settings.service_auth
        if sa is not None:
            yield from sa.metric_families(p)
