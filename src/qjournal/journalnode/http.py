"""The JournalNode's HTTP server (aiohttp): segment downloads, /jmx, /metrics and a status page.

Served as HTTPS with mutual TLS when ``dfs.http.policy`` is ``HTTPS_ONLY``
(contexts and listening in :mod:`qjournal.transport.http`, shared with the NameNode).

Why HTTP beside RPC: segments can be large, and recovering peers and
readers stream them (reference §1.3, ``GetJournalEditServlet``). The body of
``/getJournal`` is the segment file exactly as stored (for an in-progress
segment, only its acknowledged valid prefix), with ``Content-Length``,
``X-Qjournal-Segment`` and ``X-Qjournal-Crc32c`` (hex CRC32C of the body), which
the downloader verifies before trusting a byte.

Checks of ``GET /getJournal?jid=&segmentTxId=&storageInfo=&inProgressOk=``, in
order: jid valid (else 400), segmentTxId an integer (else 400), the journal
exists and is formatted (else 404), storageInfo (``NSID:CLUSTERID`` or Hadoop's
``LV:NSID:CTIME:CLUSTERID``) matches (else 403), the segment exists (else 404).
``inProgressOk`` defaults to true; only the literal ``false`` turns it off.

``/jmx`` keeps Hadoop's bean and attribute names (``Journal-<jid>``, ``JournalNodeInfo``);
``/metrics`` shows the same ``Journal-<jid>`` numbers as Prometheus series labelled ``jid``, in
base units and under names that ``promtool check metrics`` accepts (tests/cluster/test_metrics_exposition.py).

The body of ``/getJournal`` is :meth:`JournalNodeService.serve_segment
<qjournal.journalnode.service.JournalNodeService.serve_segment>` (the checks, the CRC for the
header, then the bytes, in two passes over one open file: the work every ``/getJournal`` shares,
the simulator's included); this module maps its errors to status codes and throttles the stream.
"""

from __future__ import annotations

import asyncio
import errno
import html
import json
import logging
from typing import Any, Protocol

from aiohttp import web

from qjournal.errors import (InvalidRequestError, JournalNotFormattedError, NamespaceMismatchError,
                             QJournalError, SegmentNotFoundError)
from qjournal.journalnode.metrics import SYNC_PERCENTILES, SYNC_WINDOWS_S, sync_percentile_attr
from qjournal.protocol.jn_rules import validate_jid
from qjournal.transport.http import Throttle, jmx_response, prometheus_response, start_site
from qjournal.util.fs import disk_usage

__all__ = ["JournalNodeHttpServer", "ServedNode"]

log = logging.getLogger(__name__)


class ServedNode(Protocol):
    """What the HTTP server reads from its JournalNode (``node.JournalNode`` passes itself;
    this module never imports the daemon, which imports it).

    ``rpc_bound`` and ``http_bound`` are read per request: they are known only once
    the node's servers listen.
    """

    name: str
    edits_dir: str
    rpc_bound: str | None
    http_bound: str | None
    started_at: float
    #: the request handling (``service.JournalNodeService``): ``serve_segment`` and its ``settings``
    service: Any
    #: the service-level ACLs (``security/service_auth.py``): the middleware and its counters
    service_auth: Any
    #: the RPC server (its ``metrics`` counters), None before it listens
    rpc_server: Any

    async def snapshot(self) -> dict[str, dict]:
        """Per journal: ``{"status": ..., "metrics": ...}``, sorted by jid."""


class JournalNodeHttpServer:
    """aiohttp application of one JournalNode."""

    def __init__(self, node: ServedNode) -> None:
        self.node = node
        # service-level authorization before any handler (security/service_auth.py)
        self.app = web.Application(middlewares=[node.service_auth.http_middleware()])
        self.app.router.add_get("/getJournal", self.get_journal)
        self.app.router.add_get("/jmx", self.jmx)
        self.app.router.add_get("/metrics", self.metrics)
        self.app.router.add_get("/", self.index)
        self._runner: web.AppRunner | None = None
        #: bytes of /getJournal bodies sent by sendfile (the rest went through the process in chunks)
        self.sendfile_bytes = 0

    async def start(self, host: str, port: int, ssl_context: Any = None) -> tuple[str, int]:
        """Listen (port 0 picks a free port), with mutual TLS when ``ssl_context`` is given.

        Returns:
            The bound (host, port).

        Raises:
            OSError: the address cannot be bound.
        """
        self._runner, bound = await start_site(self.app, host, port, ssl_context)
        return bound

    async def stop(self) -> None:
        """Stop listening. Idempotent."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- /getJournal ---------------------------------------------------------------------

    async def get_journal(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        jid = q.get("jid", "")
        service = self.node.service
        throttle = Throttle(service.settings.transfer_bytes_per_s, service.settings.transfer_chunk_bytes)
        try:
            validate_jid(jid)
            try:
                segment_txid = int(q.get("segmentTxId", ""))
            except ValueError:
                raise InvalidRequestError(f"journal {jid}: bad segmentTxId {q.get('segmentTxId')!r}")
            name, download = await service.serve_segment(jid, segment_txid, q.get("inProgressOk", "true") != "false",
                                                         q.get("storageInfo"), throttle.chunk_bytes)
        except InvalidRequestError as e:
            return web.Response(status=400, text=f"{e.message}\n")
        except NamespaceMismatchError as e:
            return web.Response(status=403, text=f"{e.message}\n")
        except (SegmentNotFoundError, JournalNotFormattedError) as e:
            return web.Response(status=404, text=f"{e.message}\n")
        except QJournalError as e:
            if e.fields.get("errno") is not None:
                # this node's disk failed reading the copy (logged by the service): the copy is unavailable
                # here, not the request wrong; the reader takes another replica
                return web.Response(status=503, text=f"getedit failed: this JournalNode cannot read the segment: "
                                                     f"{e.message}; read another replica\n")
            log.warning("getJournal %s failed: %s", request.query_string, e)
            return web.Response(status=500, text=f"getedit failed. {e.message}\n")
        async with download:
            resp = web.StreamResponse(status=200, headers={
                "Content-Type": "application/octet-stream",
                "X-Qjournal-Crc32c": f"{download.crc:08x}",
                "X-Qjournal-Segment": name,
            })
            resp.content_length = download.length
            writer = await resp.prepare(request)
            transport = request.transport
            try:
                sent = False
                if (download.local_file is not None and throttle.unlimited and transport is not None
                        and transport.get_extra_info("sslcontext") is None):
                    # plain HTTP, no throttle: the kernel copies the file to the socket (the bytes never enter
                    # this process); TLS and throttled transfers read the chunks below
                    await writer.drain()
                    try:
                        await asyncio.get_running_loop().sendfile(transport, download.local_file, 0,
                                                                  download.length)
                        sent = True
                        self.sendfile_bytes += download.length
                    except NotImplementedError:
                        # an event loop without sendfile (uvloop, qjournal.event-loop=auto): nothing was sent yet
                        pass
                if not sent:
                    while (chunk := await download.next_chunk()) is not None:
                        await resp.write(chunk)
                        await throttle.account(len(chunk))
            except OSError as e:
                if isinstance(e, ConnectionError):  # the reader went away: nothing of this node's to report
                    raise
                # the headers are out: the reader sees a short body (its length and CRC32C checks fail) and
                # takes another replica; the failure is this node's disk, named here
                log.error("getJournal %s: reading %s failed on this node's storage after the headers were sent: "
                          "%s (errno %s)", request.query_string, name, e, errno.errorcode.get(e.errno or 0, "?"))
                if transport is not None:
                    transport.close()
                return resp
            await resp.write_eof()
            return resp

    # --- /jmx ------------------------------------------------------------------------------

    async def jmx(self, request: web.Request) -> web.Response:
        snap = await self.node.snapshot()
        beans: list[dict] = []
        status = {jid: {"Formatted": "true" if v["status"].get("formatted") else "false"}
                  for jid, v in sorted(snap.items())}
        beans.append({
            "name": "Hadoop:service=JournalNode,name=JournalNodeInfo",
            "modelerType": "JournalNodeInfo",
            "JournalsStatus": json.dumps(status, sort_keys=True),
            "HostAndPort": self.node.rpc_bound,
            "HttpAddress": self.node.http_bound,
            "EditsDir": self.node.edits_dir,
            "JNStartedTimeInMillis": int(self.node.started_at * 1000),
        })
        rpc = dict(getattr(self.node.rpc_server, "metrics", None) or {})
        port = (self.node.rpc_bound or "").rpartition(":")[2]
        beans.append({"name": f"Hadoop:service=JournalNode,name=RpcActivityForPort{port}",
                      "modelerType": f"RpcActivityForPort{port}", "tag.port": port,
                      "RpcQueueTimeNumOps": int(rpc.get("calls", 0)),
                      "NumOpenConnections": int(rpc.get("connections_open", 0)),
                      **self.node.service_auth.bean_attributes()})
        for jid, v in sorted(snap.items()):
            bean = {"name": f"Hadoop:service=JournalNode,name=Journal-{jid}", "modelerType": f"Journal-{jid}",
                    "tag.JournalId": jid}
            bean.update(v["metrics"])
            beans.append(bean)
        return jmx_response(request, beans)  # ?qry= / ?get= as Hadoop's JMXJsonServlet

    # --- /metrics (prometheus) -------------------------------------------------------------

    async def metrics(self, request: web.Request) -> web.Response:
        """``/metrics`` in the Prometheus text format (a registry of this request's snapshot)."""
        from prometheus_client import CollectorRegistry  # noqa: PLC0415

        registry = CollectorRegistry()
        registry.register(_JournalCollector(await self.node.snapshot(), self.node.service_auth,
                                            disk_usage(self.node.edits_dir)))
        return prometheus_response(registry)

    # --- / -------------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        snap = await self.node.snapshot()
        e = html.escape
        rows = []
        problems = []
        for jid, v in sorted(snap.items()):
            st = v["status"]
            sync = st.get("sync")
            if sync is None:
                sync_cell = "off"
            else:
                under = sync["under_replicated_segments"]
                sync_cell = (f"{sync['rounds']} rounds ({sync['rounds_failed']} failed), {sync['segments_synced']} "
                             f"copied; under-replicated: {', '.join(map(str, under[-8:])) or 'none'}; "
                             f"conflicts: {len(sync['conflict_segments'])}")
                problems += [f"{jid}: {c}" for c in sync["conflicts"]]
                if sync.get("last_error"):
                    problems.append(f"{jid}: last sync round failed: {sync['last_error']}")
            if st.get("rejoin_txid") is not None:
                problems.append(f"{jid}: formatted from its peers; votes again once it holds every finalized "
                                f"txid through {st['rejoin_txid']}")
            segs = ", ".join(f"{s}-{'…' if ip else t}" if ip else f"{s}-{t}"
                             for s, t, ip in st.get("segments", [])[-8:])
            rows.append(
                f"<tr><td>{e(jid)}</td><td>{e(str(st.get('formatted')))}</td>"
                f"<td>{e(str(st.get('namespace_id')))}/{e(str(st.get('cluster_id')))}</td>"
                f"<td>{st.get('last_promised_epoch')}</td><td>{st.get('last_writer_epoch')}</td>"
                f"<td>{st.get('highest_written_txid')}</td><td>{st.get('committed_txid')}</td>"
                f"<td>{e(str(st.get('open_segment')))}</td><td>{e(segs)}</td><td>{e(sync_cell)}</td></tr>")
        body = (
            "<!doctype html><html><head><meta charset='utf-8'><title>JournalNode</title></head><body>"
            f"<h1>JournalNode {e(self.node.name)}</h1>"
            f"<p>RPC {e(str(self.node.rpc_bound))} &middot; HTTP {e(str(self.node.http_bound))} &middot; "
            f"edits dir {e(self.node.edits_dir)}</p>"
            "<table border='1' cellpadding='4'><tr><th>journal</th><th>formatted</th><th>namespace</th>"
            "<th>promised epoch</th><th>writer epoch</th><th>highest txid</th><th>committed txid</th>"
            "<th>open segment</th><th>segments (last 8)</th><th>syncer</th></tr>"
            + "".join(rows) + "</table>"
            + ("<h2>Problems</h2><ul>" + "".join(f"<li>{e(p)}</li>" for p in problems) + "</ul>"
               if problems else "")
            + "<p><a href='/jmx'>/jmx</a> &middot; <a href='/metrics'>/metrics</a></p></body></html>")
        return web.Response(text=body, content_type="text/html")


#: counters of each journal on /metrics: (``Journal-<jid>`` attribute, name without ``_total``, HELP)
_COUNTERS = (
    ("BatchesWritten", "batches_written", "journal batches written"),
    ("BatchesWrittenWhileLagging", "batches_written_while_lagging",
     "batches already known committed (written without fsync)"),
    ("TxnsWritten", "txns_written", "transactions written"),
    ("BytesWritten", "bytes_written", "bytes of records written"),
    ("TxnsServedViaRpc", "txns_served_via_rpc", "transactions served from the edit cache (get_journaled_edits)"),
    ("BytesServedViaRpc", "bytes_served_via_rpc", "bytes of records served from the edit cache"),
    ("RpcEmptyResponses", "rpc_empty_responses", "get_journaled_edits answers without a transaction"),
    ("RpcRequestCacheMissAmountNumMisses", "rpc_request_cache_misses",
     "get_journaled_edits requests the edit cache could not serve"),
    ("SyncerRounds", "syncer_rounds", "JournalNodeSyncer rounds run"),
    ("SyncerRoundsFailed", "syncer_rounds_failed", "JournalNodeSyncer rounds that failed"),
    ("SyncerSegmentsSynced", "syncer_segments_synced",
     "finalized segments copied from peers (Hadoop NumEditLogsSynced)"),
    ("SyncerBytesSynced", "syncer_bytes_synced", "bytes of segments copied from peers"),
    ("SyncerDownloadFailures", "syncer_download_failures", "segment copies that failed"),
)
#: gauges of each journal on /metrics: (attribute, name, HELP, factor to the base unit)
_GAUGES = (
    ("LastWriterEpoch", "last_writer_epoch", "epoch of the last writer", 1),
    ("LastPromisedEpoch", "last_promised_epoch", "promised epoch", 1),
    ("LastWrittenTxId", "last_written_txid", "highest txid written", 1),
    ("CurrentLagTxns", "current_lag_txns", "committed txid minus highest written txid", 1),
    ("LastJournalTimestamp", "last_journal_timestamp_seconds",
     "time of the last batch written (seconds since the epoch, 0 = none)", 1e-3),
    ("UnderReplicatedSegments", "under_replicated_segments",
     "finalized segments held by fewer than all JournalNodes of the journal", 1),
    ("SyncConflicts", "sync_conflicts", "segments whose finalized copies differ between this node and a peer", 1),
    ("EditCacheBytes", "edit_cache_bytes", "bytes of edits in the edit cache", 1),
)


class _JournalCollector:
    """Prometheus collector of one ``/metrics`` answer: the ``Journal-<jid>`` beans of a node snapshot
    as series labelled ``jid``, in base units (the beans keep Hadoop's names and units)."""

    def __init__(self, snap: dict[str, dict], service_auth: Any, disk: tuple[int, int] | None) -> None:
        self.beans = {jid: v["metrics"] for jid, v in sorted(snap.items())}
        self.rejoining = {jid: v["status"].get("rejoin_txid") is not None for jid, v in sorted(snap.items())}
        self.service_auth = service_auth
        self.disk = disk

    def collect(self):  # noqa: ANN201 - prometheus collector protocol
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        p = "qjournal_journalnode_"
        yield from self.service_auth.metric_families(p)
        for key, name, doc in _COUNTERS:
            fam = CounterMetricFamily(p + name, doc, labels=["jid"])
            for jid, bean in self.beans.items():
                fam.add_metric([jid], float(bean.get(key, 0)))
            yield fam
        for key, name, doc, factor in _GAUGES:
            fam = GaugeMetricFamily(p + name, doc, labels=["jid"])
            for jid, bean in self.beans.items():
                fam.add_metric([jid], float(bean.get(key, 0)) * factor)
            yield fam
        fam = GaugeMetricFamily(p + "rejoining", "1 while the journal, formatted from its peers, does not vote "
                                "yet (it holds every finalized txid only after the syncer's copies)", labels=["jid"])
        for jid, rejoining in self.rejoining.items():
            fam.add_metric([jid], 1.0 if rejoining else 0.0)
        yield fam
        if self.disk is not None:
            for name, doc, value in (("disk_size_bytes", "size of the file system of the edits directory",
                                      self.disk[0]),
                                     ("disk_free_bytes", "bytes of the edits directory's file system available "
                                      "to the JournalNode", self.disk[1])):
                g = GaugeMetricFamily(p + name, doc)
                g.add_metric([], float(value))
                yield g
        fam = GaugeMetricFamily(p + "sync_duration_seconds",
                                "percentile of the batch fsync times over a sliding window (Hadoop Syncs<w>s)",
                                labels=["jid", "window", "percentile"])
        for jid, bean in self.beans.items():
            for w in SYNC_WINDOWS_S:
                for pct in SYNC_PERCENTILES:
                    micros = bean.get(sync_percentile_attr(w, pct), 0)
                    fam.add_metric([jid, f"{w}s", str(pct)], float(micros) / 1e6)
        yield fam
