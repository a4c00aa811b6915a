"""The NameNode's HTTP server (aiohttp): ``/jmx``, ``/metrics``, ``/isActive``, the web UI and WebHDFS.

Why: operators and monitoring built for HDFS look at a NameNode through its
web port (9870): ``/jmx`` with the beans of Hadoop's ``JMXJsonServlet``
(``NameNodeStatus``, ``FSNamesystem``, ``NameNodeInfo``, ``RpcActivityForPort<p>``, ...),
``/isActive`` for load balancers (Hadoop's ``IsActiveServlet``: 200 on the
active, 405 otherwise) and the web UI (``webui.py``: the overview and the file
browser). ``/metrics`` serves the same
numbers to Prometheus from a registry owned by this server. ``/webhdfs/v1``
is Hadoop's WebHDFS REST API (``webhdfs.py``), served through the NameNode's
ClientProtocol handler.

Theory of operation:

* The server only *reads* the NameNode's fields when a page is requested
  (state, namespace size, edit log and tailer txids, the RPC server's
  ``metrics`` counters, journal health). It adds no work to the RPC request
  path: the RPC counters it shows are the ones the transport already keeps.
* Everything runs on the NameNode's event loop, so a page sees one
  consistent state (no await between the reads of one page).
* ``LastCheckpointTime`` is the modification time of the newest image file
  (a checkpoint is the image write), so a restart reports it correctly.
* HTTPS: with ``dfs.http.policy = HTTPS_ONLY`` the server listens with mutual
  TLS (:mod:`qjournal.transport.http`), on ``dfs.namenode.https-address[.<ns>.<nn>]``.
* Address (:func:`~qjournal.namenode.addresses.http_address_of`): ``dfs.namenode.http(s)-address.<ns>.<nn>``
  in HA, else ``dfs.namenode.http(s)-address`` (default port 9870 / 9871);
  ``dfs.namenode.http-bind-host`` replaces the host when binding.

Invariants:

1. Rendering a page never raises into aiohttp for a NameNode in any state
   (initializing, standby, active, stopping, failed journals): absent parts
   are shown as absent.
2. ``/isActive`` answers 200 only while the HA state is ``active``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from qjournal.errors import QJournalError
from qjournal.namenode import image as img
from qjournal.namenode.addresses import http_address_of
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.storage import journal_node_statuses, journal_statuses, local_edits_dirs
from qjournal.namenode.webhdfs import WebHdfs
from qjournal.namenode.webui import WebUI
from qjournal.util.fs import disk_usage
from qjournal.transport.http import (http_server_context, https_enabled, jmx_response, prometheus_response,
                                start_site)

__all__ = ["NameNodeHttpServer", "http_address_of"]

log = logging.getLogger(__name__)


class NameNodeHttpServer:
    """aiohttp application of one :class:`~qjournal.namenode.daemon.NameNode`.

    Args:
        nn: the NameNode whose state the pages show.
        ssl_context: server TLS context (None: from ``dfs.http.policy`` at :meth:`start`).
    """

    def __init__(self, nn: NameNode, ssl_context: Any = None) -> None:
        self.nn = nn
        self.ssl_context = ssl_context
        # service-level authorization before any handler (security/service_auth.py)
        self.app = web.Application(middlewares=[nn.service_auth.http_middleware()])
        self.app.router.add_get("/jmx", self.jmx)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/isActive", self.is_active)
        self.webhdfs = WebHdfs(nn.client_protocol, nn.conf, nn.service_auth.authenticator)
        self.webhdfs.register(self.app)
        self.webui = WebUI(self)  # the overview at / and the file browser (webui.py)
        self.webui.register(self.app)
        self.registry = CollectorRegistry(auto_describe=False)  # this server's own, never the global one
        self.registry.register(_Collector(self))
        self._runner: web.AppRunner | None = None
        self.bound: tuple[str, int] | None = None
        self.url = ""
        self.started_at = 0.0

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 = any free port), HTTPS when the policy says so.

        Returns:
            The bound ``(host, port)``.

        Raises:
            OSError: the address cannot be bound.
            ConfigError: HTTPS_ONLY with a missing certificate, key or CA.
        """
        if self.ssl_context is None and https_enabled(self.nn.conf):
            self.ssl_context = http_server_context(self.nn.conf)
        self._runner, self.bound = await start_site(self.app, host, port, self.ssl_context)
        scheme = "https" if self.ssl_context is not None else "http"
        self.url = f"{scheme}://{self.bound[0]}:{self.bound[1]}"
        self.started_at = time.time()
        log.info("NameNode HTTP server on %s", self.url)
        return self.bound

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- values ------------------------------------------------------------------------------

    def values(self) -> dict:
        """One consistent read of the NameNode's state (no await inside)."""
        nn = self.nn
        state = nn.state.value
        last_txid = int(nn.last_applied_txid)
        ckpt_txid = int(nn.last_checkpoint_txid)
        ckpt_time_ms = 0
        try:
            images = img.list_images(nn.name_dir)
            if images:
                ckpt_time_ms = int(os.stat(images[-1][1]).st_mtime * 1000)
        except (OSError, ValueError):
            pass
        el = nn.editlog
        el_stats = el.stats() if el is not None else {}
        rpc = dict(getattr(nn.rpc_server, "metrics", None) or {})
        addr = nn.address
        return {
            "state": state, "nn_id": nn.nn_id or "", "nameservice": nn.nameservice or "",
            "host_and_port": f"{addr[0]}:{addr[1]}" if addr else "",
            "files_total": len(nn.namespace) if nn.namespace is not None else 0,
            "last_txid": last_txid, "checkpoint_txid": ckpt_txid,
            "txns_since_checkpoint": max(0, last_txid - ckpt_txid),
            "checkpoint_time_ms": ckpt_time_ms,
            "segment_txid": el_stats.get("segment_txid"),
            "txns_since_roll": (last_txid - el_stats["segment_txid"] + 1) if el_stats.get("segment_txid") else 0,
            "num_syncs": int(el_stats.get("num_syncs", 0)),
            "num_txns_synced": int(el_stats.get("num_txns_synced", 0)),
            "rpc": rpc, "rpc_port": addr[1] if addr else 0,
            "retry_cache_entries": len(nn.retry_cache), "retry_cache_hits": int(nn.retry_cache.hits),
            "journals": journal_statuses(nn.journal_set, nn.shared_reader, nn.conf),
            "journal_nodes": journal_node_statuses(nn.journal_set, nn.shared_reader),
            "became_active_ms": nn.ha_service.became_active_at_ms or 0,
            "tailer_error": (nn.tailer.last_error if nn.tailer is not None else "") or "",
            "ns_info": nn.ns_info,
            "safe_mode": bool(nn.safe_mode),
            "disks": self._disks(),
            # Hadoop's isSecurityEnabled: callers are authenticated (here by TLS certificates)
            "security_enabled": bool(nn.conf.get_bool("qjournal.rpc.tls.enabled")),
        }

    def _disks(self) -> dict[str, tuple[int, int] | None]:
        """``{dir: (size, available)}`` of the name directory and the local edits directories."""
        dirs = [self.nn.name_dir]
        try:
            dirs += local_edits_dirs(self.nn.conf)
        except QJournalError:  # a status shows what it can
            pass
        return {d: disk_usage(d) for d in dict.fromkeys(dirs) if d}

    def beans(self) -> list[dict]:
        """Every ``/jmx`` bean, Hadoop names where they apply, in a fixed order."""
        v = self.values()
        ns = v["ns_info"]
        beans = [
            {"name": "Hadoop:service=NameNode,name=NameNodeStatus",
             "modelerType": "org.apache.hadoop.hdfs.server.namenode.NameNode",
             "State": v["state"], "NNRole": "NameNode", "HostAndPort": v["host_and_port"],
             "SecurityEnabled": v["security_enabled"], "LastHATransitionTime": v["became_active_ms"]},
            {"name": "Hadoop:service=NameNode,name=FSNamesystem", "modelerType": "FSNamesystem",
             "tag.Context": "dfs", "tag.HAState": v["state"], "tag.Hostname": v["host_and_port"].rsplit(":", 1)[0],
             "HAState": v["state"], "FilesTotal": v["files_total"],
             "LastWrittenTransactionId": v["last_txid"],
             "TransactionsSinceLastCheckpoint": v["txns_since_checkpoint"],
             "TransactionsSinceLastLogRoll": v["txns_since_roll"],
             "LastCheckpointTime": v["checkpoint_time_ms"]},
            {"name": "Hadoop:service=NameNode,name=NameNodeInfo",
             "modelerType": "org.apache.hadoop.hdfs.server.namenode.FSNamesystem",
             "ClusterId": ns.cluster_id if ns is not None else "",
             "NamespaceId": ns.namespace_id if ns is not None else 0,
             "JournalTransactionInfo": json.dumps({"LastAppliedOrWrittenTxId": str(v["last_txid"]),
                                                   "MostRecentCheckpointTxId": str(v["checkpoint_txid"])}),
             "NameJournalStatus": json.dumps(v["journals"]),
             "NameDirStatuses": json.dumps({"active": {self.nn.name_dir: "IMAGE_AND_EDITS"}, "failed": {}}),
             # Hadoop's NameNodeInfo.Safemode: empty when off, else the safe-mode tip
             "Safemode": ("Safe mode is ON. It was turned on manually. Use \"qjournal dfsadmin -safemode leave\" "
                          "to turn safe mode off.") if v["safe_mode"] else "",
             "Version": "qjournal"},
            {"name": "Hadoop:service=NameNode,name=NameNodeActivity", "modelerType": "NameNodeActivity",
             "tag.ProcessName": "NameNode", "TransactionsNumOps": v["num_txns_synced"],
             "SyncsNumOps": v["num_syncs"]},
            {"name": f"Hadoop:service=NameNode,name=RpcActivityForPort{v['rpc_port']}",
             "modelerType": f"RpcActivityForPort{v['rpc_port']}", "tag.port": str(v["rpc_port"]),
             "RpcQueueTimeNumOps": int(v["rpc"].get("calls", 0)),
             "NumOpenConnections": int(v["rpc"].get("connections_open", 0)),
             # qjournal transport counters (no Hadoop equivalent):
             "CallsFailed": int(v["rpc"].get("errors", 0)), "BadFrames": int(v["rpc"].get("bad_frames", 0)),
             "ConnectionsOpened": int(v["rpc"].get("connections_opened", 0)),
             **self.nn.service_auth.bean_attributes()},
            {"name": "Hadoop:service=NameNode,name=RetryCache.NameNodeRetryCache",
             "modelerType": "RetryCache.NameNodeRetryCache", "CacheHit": v["retry_cache_hits"],
             "CacheEntries": v["retry_cache_entries"]},
        ]
        return beans

    # --- handlers ------------------------------------------------------------------------------

    async def jmx(self, request: web.Request) -> web.Response:
        """``/jmx[?qry=PATTERN | ?get=BEAN::ATTR]``."""
        return jmx_response(request, self.beans())

    async def metrics(self, request: web.Request) -> web.Response:
        """``/metrics`` in the Prometheus text format (this server's registry)."""
        return prometheus_response(self.registry)

    async def is_active(self, request: web.Request) -> web.Response:
        """``/isActive``: 200 "I am Active!" on the active NameNode, else 405 (invariant 2)."""
        if self.nn.state.value == "active":
            return web.Response(status=200, text="I am Active!")
        return web.Response(status=405, text="I am not Active!")


class _Collector:
    """Prometheus collector reading the NameNode at scrape time."""

    def __init__(self, server: NameNodeHttpServer) -> None:
        self.server = server

    def collect(self):  # noqa: ANN201 - prometheus collector protocol
        v = self.server.values()
        p = "qjournal_namenode_"
        fam = GaugeMetricFamily(f"{p}ha_state", "1 for the current HA state", labels=["state"])
        for st in ("active", "initializing", "observer", "standby", "stopping"):
            fam.add_metric([st], 1.0 if v["state"] == st else 0.0)
        yield fam
        sm = GaugeMetricFamily(f"{p}safe_mode", "1 while the NameNode is in safe mode (writes refused)")
        sm.add_metric([], 1.0 if v["safe_mode"] else 0.0)
        yield sm
        for name, doc, value in (
                ("files", "files and directories (FSNamesystem FilesTotal)", v["files_total"]),
                ("last_written_txid", "last written or applied transaction id", v["last_txid"]),
                ("txns_since_last_checkpoint", "transactions since the last checkpoint",
                 v["txns_since_checkpoint"]),
                ("last_checkpoint_txid", "txid of the newest image", v["checkpoint_txid"]),
                ("last_checkpoint_time_seconds", "modification time of the newest image",
                 v["checkpoint_time_ms"] / 1000.0),
                ("rpc_open_connections", "open RPC connections", v["rpc"].get("connections_open", 0)),
                ("retry_cache_entries", "retry cache entries", v["retry_cache_entries"])):
            g = GaugeMetricFamily(f"{p}{name}", doc)
            g.add_metric([], float(value))
            yield g
        for name, doc, value in (
                ("rpc_calls", "RPC calls received", v["rpc"].get("calls", 0)),
                ("rpc_call_errors", "RPC calls answered with an error", v["rpc"].get("errors", 0)),
                ("rpc_bad_frames", "malformed RPC frames", v["rpc"].get("bad_frames", 0)),
                ("editlog_syncs", "edit log syncs of this term as active", v["num_syncs"]),
                ("editlog_txns_synced", "transactions synced in this term as active", v["num_txns_synced"]),
                ("retry_cache_hits", "retried calls answered from the retry cache", v["retry_cache_hits"])):
            c = CounterMetricFamily(f"{p}{name}", doc)
            c.add_metric([], float(value))
            yield c
        yield from self.server.nn.service_auth.metric_families(p)
        jf = GaugeMetricFamily(f"{p}journal_healthy", "1 when the journal is in use and not failed",
                               labels=["journal", "required"])
        for j in v["journals"]:
            jf.add_metric([j["manager"], j["required"]], 0.0 if j["disabled"] == "true" else 1.0)
        yield jf
        writers = [j for j in v["journal_nodes"] if j["writer"]]  # the active's loggers; absent elsewhere
        for name, doc, key in () if not writers else (
                ("journal_node_written_txid", "highest txid this writer saw the JournalNode acknowledge",
                 "written_txid"),
                ("journal_node_lag_txns", "how far the JournalNode's acknowledged txid trails the committed txid",
                 "lag_txns"),
                ("journal_node_queued_bytes", "edits queued for the JournalNode, not yet acknowledged",
                 "queued_bytes"),
                ("journal_node_out_of_sync", "1 while the writer skips the JournalNode until the next segment",
                 "out_of_sync")):
            g = GaugeMetricFamily(f"{p}{name}", doc + " (the active NameNode's view)",
                                  labels=["journal", "journal_node"])
            for j in writers:
                g.add_metric([j["journal"], j["name"]], float(j[key]))
            yield g
        disks = [(path, usage) for path, usage in sorted(v["disks"].items()) if usage is not None]
        for name, doc, i in () if not disks else (("disk_size_bytes", "size of the file system of a name or edits directory", 0),
                             ("disk_free_bytes", "bytes of a name or edits directory's file system available "
                              "to the NameNode", 1)):
            g = GaugeMetricFamily(f"{p}{name}", doc, labels=["dir"])
            for path, usage in disks:
                g.add_metric([path], float(usage[i]))
            yield g
