"""The NameNode's web UI: the overview page and Hadoop's "Browse the file system", served from the package.

Why: an operator of an HDFS cluster spends the day on its NameNode's web pages: the overview (HA state, the
journal and each JournalNode, safe mode, the other NameNodes) and the file browser over WebHDFS. These are
qjournal's, served by the NameNode's own HTTP server with nothing fetched from elsewhere (no CDN: the pages
and their style sheet and scripts are files of this package, ``namenode/static/``).

Theory of operation:

* Every page is rendered completely on the server, so it works without JavaScript: the overview is one
  HTML document; the browser (``/explorer.html?path=...``) lists one batch of a directory (``dfs.ls.limit``
  entries, Hadoop's LISTSTATUS_BATCH) as a table with Hadoop's columns, links into each directory, a path
  box (a GET form), sorting by any column (of the batch shown; links in the column heads) and pages
  (``startAfter``). With JavaScript, ``explorer.js`` does the same in the page, fetching
  ``/webhdfs/v1/<path>?op=LISTSTATUS_BATCH`` (the same call Hadoop's UI makes) without reloading, and
  ``overview.js`` refreshes the overview every few seconds.
* Who browses: exactly as WebHDFS decides (:meth:`~qjournal.namenode.webhdfs.WebHdfs.caller`): the client
  certificate's user over HTTPS, else ``user.name`` (kept in every link the page makes) or
  ``hadoop.http.staticuser.user``. Listings go through the ClientProtocol handler with that user, so the
  namespace's permission checks, the HA gate and the observer's rules apply as to any client.
* The overview asks the other NameNodes (``/jmx``) and each JournalNode (``/jmx``) for their state, all at
  once, each bounded by ``qjournal.namenode.web.probe.timeout.ms``; answers are kept for
  ``qjournal.namenode.web.probe.cache.ms`` so a page refreshed by many operators costs the peers one probe
  per period. A peer that does not answer is shown as such; the page never waits longer than the timeout.
  Nothing on the request path of the NameNode's RPC server waits for a page.

Invariants:

1. A page renders for a NameNode in any state (initializing, standby, observer, failed journals, peers
   down): absent parts are shown as absent; a malformed query gets a 400 page naming the parameter.
2. Every value from the namespace or a peer is HTML-escaped before it reaches a page.
"""

from __future__ import annotations

import asyncio
import html
import json
import logging
import os
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web

from qjournal.errors import (AuthenticationError, AuthorizationError, FileNotFoundError_, InvalidRequestError,
                             ObserverRetryOnActiveError, PermissionDeniedError, QJournalError, StandbyError)
from qjournal.namenode.addresses import http_address_of, namenode_addresses, nameservice_of
from qjournal.namenode.namespace import join_path, mode_string, split_path
from qjournal.namenode.webhdfs import WebHdfsAuthError
from qjournal.transport.http import http_client_context, https_enabled

__all__ = ["WebUI", "STATIC_DIR", "human_bytes"]

log = logging.getLogger(__name__)

STATIC_DIR = os.path.join(os.path.dirname(__file__), "static")
#: the files under ``/static/`` and their content types (nothing else is served from there)
STATIC_FILES = {"qjournal.css": "text/css", "explorer.js": "text/javascript", "overview.js": "text/javascript"}
#: the explorer's sortable columns: query value -> (heading, key of a FileStatus dict)
COLUMNS = (("permission", "Permission"), ("owner", "Owner"), ("group", "Group"), ("size", "Size"),
           ("mtime", "Last Modified"), ("replication", "Replication"), ("name", "Name"))
_SORT_KEYS = {"permission": lambda s: (s["type"] != "d", s["permission"]), "owner": lambda s: s["owner"],
              "group": lambda s: s["group"], "size": lambda s: s["length"], "mtime": lambda s: s["mtime"],
              "replication": lambda s: (s["type"] == "d", s["replication"]), "name": lambda s: s["name"]}


def human_bytes(n: int) -> str:
    """``1.5 KB``-style sizes as Hadoop's web UI prints them (binary multiples, one decimal)."""
    v = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if v < 1024 or unit == "PB":
            return f"{int(v)} B" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")


def _local_minute(ms: int) -> str:
    """A modification time as ``qjournal dfs -ls`` prints it: local time to the minute."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000.0))


class WebUI:
    """The pages of one NameNode's HTTP server (module docstring).

    Args:
        server: the NameNode's :class:`~qjournal.namenode.http.NameNodeHttpServer` (its ``values()``, its
            ``webhdfs`` and the NameNode).
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        self.nn = server.nn
        self.webhdfs = server.webhdfs
        conf = self.nn.conf
        self.probe_timeout_s = conf.get_duration_ms("qjournal.namenode.web.probe.timeout.ms") / 1000.0
        self.probe_cache_s = conf.get_duration_ms("qjournal.namenode.web.probe.cache.ms") / 1000.0
        self._probed_at = -1e18
        self._probed: dict[str, Any] = {"peers": {}, "journal_nodes": {}}
        self._probe_lock = asyncio.Lock()

    def register(self, app: web.Application) -> None:
        """Serve ``/``, ``/index.html``, ``/dfshealth.html`` (the overview), ``/explorer.html`` and ``/static/``."""
        for path in ("/", "/index.html", "/dfshealth.html"):
            app.router.add_get(path, self.overview)
        app.router.add_get("/explorer.html", self.explorer)
        app.router.add_get("/static/{name}", self.static)

    # --- shared page parts ---------------------------------------------------------------------------------

    def _page(self, title: str, body: str, script: str, status: int = 200, user_query: str = "") -> web.Response:
        v = self.server.values()
        e = html.escape
        state = v["state"]
        nav = (f"<a href='/dfshealth.html{user_query}'>Overview</a>"
               f"<a href='/explorer.html{user_query}'>Browse the file system</a>"
               "<a href='/jmx'>/jmx</a><a href='/metrics'>/metrics</a>")
        doc = (
            "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{e(title)} · {e(v['nn_id'] or 'NameNode')} ({e(state)})</title>"
            "<link rel='stylesheet' href='/static/qjournal.css'></head><body>"
            "<header><span class='brand'>qjournal</span>"
            f"<span class='nn'>NameNode {e(v['nn_id'] or '')}"
            f"{(' · ' + e(v['nameservice'])) if v['nameservice'] else ''}</span>"
            f"<span class='badge state-{e(state)}' id='ha-state'>{e(state)}</span>"
            f"<nav>{nav}</nav></header><main id='main'>{body}</main>"
            f"<footer>{e(v['host_and_port'])} · served {e(time.strftime('%Y-%m-%d %H:%M:%S'))}</footer>"
            f"<script src='/static/{script}' defer></script></body></html>")
        return web.Response(text=doc, status=status, content_type="text/html", charset="utf-8")

    async def static(self, request: web.Request) -> web.StreamResponse:
        """One of :data:`STATIC_FILES` (a name outside it is a 404, so no path reaches the disk)."""
        name = request.match_info["name"]
        kind = STATIC_FILES.get(name)
        if kind is None:
            return web.Response(status=404, text=f"no static file {name[:100]!r}\n")
        return web.FileResponse(os.path.join(STATIC_DIR, name), headers={
            "Content-Type": f"{kind}; charset=utf-8", "Cache-Control": "max-age=300"})

    # --- the overview ------------------------------------------------------------------------------------------

    async def overview(self, request: web.Request) -> web.Response:
        """The overview page (HA, namespace, journals, JournalNodes, the other NameNodes)."""
        probed = await self._probe()
        v = self.server.values()
        e = html.escape
        ns = v["ns_info"]
        ck = (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v["checkpoint_time_ms"] / 1000))
              if v["checkpoint_time_ms"] else "never")
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.server.started_at))
        cards = [
            ("HA state", v["state"], f"since {_since(v['became_active_ms'])}" if v["state"] == "active" else ""),
            ("Safe mode", "ON" if v["safe_mode"] else "off",
             "writes refused: qjournal dfsadmin -safemode leave" if v["safe_mode"] else ""),
            ("Files and directories", f"{v['files_total']:,}", ""),
            ("Last transaction", f"{v['last_txid']:,}",
             f"open segment from {v['segment_txid']:,}" if v["segment_txid"] else "no open segment"),
            ("Last checkpoint", f"txid {v['checkpoint_txid']:,}",
             f"{ck} · {v['txns_since_checkpoint']:,} transactions since"),
            ("RPC", f"{int(v['rpc'].get('calls', 0)):,} calls",
             f"{int(v['rpc'].get('errors', 0)):,} failed · {int(v['rpc'].get('connections_open', 0))} connections"),
        ]
        card_html = "".join(
            f"<div class='card{' alert' if (label == 'Safe mode' and v['safe_mode']) else ''}'>"
            f"<div class='label'>{e(label)}</div><div class='value'>{e(value)}</div>"
            f"<div class='sub'>{e(sub)}</div></div>" for label, value, sub in cards)
        problems = []
        if v["tailer_error"]:
            problems.append(f"tailer: {v['tailer_error']}")
        problems += [f"journal {j['manager']} failed: {j['stream']}" for j in v["journals"] if j["disabled"] == "true"]
        problems += [f"JournalNode {j['name']} is out of sync (skipped until the next segment)"
                     for j in v["journal_nodes"] if j["writer"] and j["out_of_sync"]]
        for name, jn in sorted(probed["journal_nodes"].items()):
            bean = jn.get("bean") or {}
            if bean.get("SyncConflicts"):
                problems.append(f"JournalNode {name}: {bean['SyncConflicts']} segment(s) whose finalized copies "
                                f"differ from a peer's")
        body = [f"<section><h1>Overview</h1><p class='meta'>cluster {e(ns.cluster_id if ns else '-')} · namespace "
                f"{e(str(ns.namespace_id) if ns else '-')} · RPC {e(v['host_and_port'])} · started {e(started)}</p>"
                f"<div class='cards'>{card_html}</div>"
                + (("<div class='problems'><h2>Needs attention</h2><ul>"
                    + "".join(f"<li>{e(p)}</li>" for p in problems) + "</ul></div>") if problems else "")
                + "</section>"]
        body.append(self._namenodes_section(v, probed))
        body.append(self._journals_section(v))
        body.append(self._journal_nodes_section(v, probed))
        return self._page("Overview", "".join(body), "overview.js")

    def _namenodes_section(self, v: dict, probed: dict) -> str:
        e = html.escape
        rows = []
        active_txid = v["last_txid"] if v["state"] == "active" else None
        for nn_id, peer in probed["peers"].items():
            if peer.get("state") == "active" and active_txid is None:
                active_txid = peer.get("txid")
        for nn_id, peer in probed["peers"].items():
            self_row = nn_id == v["nn_id"]
            state = v["state"] if self_row else peer.get("state") or "unreachable"
            txid = v["last_txid"] if self_row else peer.get("txid")
            lag = ("" if txid is None or active_txid is None or state == "active"
                   else f"{max(0, active_txid - txid):,}")
            link = peer.get("url") or ""
            name = f"<a href='{e(link)}/dfshealth.html'>{e(nn_id)}</a>" if link and not self_row else e(nn_id)
            rows.append(f"<tr><td>{name}{' (this one)' if self_row else ''}</td><td>{e(peer.get('address', ''))}</td>"
                        f"<td><span class='badge state-{e(state)}'>{e(state)}</span></td>"
                        f"<td class='num'>{'' if txid is None else f'{txid:,}'}</td><td class='num'>{lag}</td>"
                        f"<td>{e(peer.get('error', ''))}</td></tr>")
        if not rows:
            return ""
        return ("<section><h2>NameNodes</h2><table class='grid'><thead><tr><th>NameNode</th><th>RPC address</th>"
                "<th>state</th><th class='num'>last txid</th><th class='num'>behind the active</th><th></th></tr>"
                f"</thead><tbody>{''.join(rows)}</tbody></table></section>")

    def _journals_section(self, v: dict) -> str:
        e = html.escape
        rows = "".join(
            f"<tr><td>{e(j['manager'])}</td><td>{'required' if j['required'] == 'true' else 'optional'}</td>"
            f"<td><span class='badge {'bad' if j['disabled'] == 'true' else 'good'}'>"
            f"{'failed' if j['disabled'] == 'true' else 'ok'}</span></td><td>{e(j['stream'])}</td></tr>"
            for j in v["journals"])
        return ("<section><h2>Journal status</h2><table class='grid'><thead><tr><th>journal manager</th><th></th>"
                f"<th>status</th><th>stream</th></tr></thead><tbody>{rows}</tbody></table></section>")

    def _journal_nodes_section(self, v: dict, probed: dict) -> str:
        e = html.escape
        rows = []
        for j in v["journal_nodes"]:
            jn = probed["journal_nodes"].get(j["name"], {})
            bean = jn.get("bean") or {}
            if j["writer"]:
                sync = "out of sync" if j["out_of_sync"] else "in sync"
                writer = (f"<td><span class='badge {'bad' if j['out_of_sync'] else 'good'}'>{sync}</span></td>"
                          f"<td class='num'>{j['written_txid']:,}</td><td class='num'>{j['lag_txns']:,}</td>"
                          f"<td class='num'>{e(human_bytes(j['queued_bytes']))}</td>")
            else:
                writer = "<td>reading</td><td></td><td></td><td></td>"
            if jn.get("error"):
                node = f"<td colspan='5'><span class='badge bad'>unreachable</span> {e(jn['error'])}</td>"
            elif bean:
                syncer = (f"{bean.get('SyncerRounds', 0)} rounds, {bean.get('SyncerRoundsFailed', 0)} failed; "
                          f"{bean.get('UnderReplicatedSegments', 0)} under-replicated, "
                          f"{bean.get('SyncConflicts', 0)} conflicts")
                cache = (f"{human_bytes(int(bean.get('EditCacheBytes', 0)))}, "
                         f"{int(bean.get('TxnsServedViaRpc', 0)):,} txns served")
                node = (f"<td class='num'>{bean.get('LastPromisedEpoch', '')} / {bean.get('LastWriterEpoch', '')}</td>"
                        f"<td class='num'>{int(bean.get('LastWrittenTxId', 0)):,}</td>"
                        f"<td class='num'>{int(bean.get('CurrentLagTxns', 0)):,}</td>"
                        f"<td>{e(cache)}</td><td>{e(syncer)}</td>")
            else:
                node = "<td colspan='5'>no HTTP address known yet</td>"
            rows.append(f"<tr><td>{e(j['name'])}</td>{writer}{node}</tr>")
        if not rows:
            return ""
        return ("<section><h2>JournalNodes</h2><table class='grid'><thead><tr><th>JournalNode</th>"
                "<th>writer's view</th><th class='num'>acked txid</th><th class='num'>lag</th>"
                "<th class='num'>queued</th><th class='num'>epoch promised / writer</th>"
                "<th class='num'>last written</th><th class='num'>lag (its own)</th><th>edit cache</th>"
                f"<th>syncer</th></tr></thead><tbody>{''.join(rows)}</tbody></table></section>")

    async def _probe(self) -> dict:
        """The other NameNodes' and the JournalNodes' state, at most one probe per cache period."""
        loop = asyncio.get_running_loop()
        async with self._probe_lock:
            if loop.time() - self._probed_at < self.probe_cache_s:
                return self._probed
            v = self.server.values()
            peers = self._peer_targets(v)
            jns = {j["name"]: j for j in v["journal_nodes"]}
            ssl_ctx = http_client_context(self.nn.conf) if https_enabled(self.nn.conf) else None
            timeout = aiohttp.ClientTimeout(total=self.probe_timeout_s)
            async with aiohttp.ClientSession(timeout=timeout) as session:
                async def peer(nn_id: str, t: dict) -> tuple[str, dict]:
                    if t.get("self") or not t.get("url"):
                        return nn_id, t
                    beans = await _jmx(session, t["url"], "Hadoop:service=NameNode,name=*", ssl_ctx)
                    if "error" in beans:
                        return nn_id, {**t, **beans}
                    st = beans.get("Hadoop:service=NameNode,name=NameNodeStatus", {})
                    fs = beans.get("Hadoop:service=NameNode,name=FSNamesystem", {})
                    return nn_id, {**t, "state": st.get("State"), "txid": fs.get("LastWrittenTransactionId")}

                async def journal_node(name: str, j: dict) -> tuple[str, dict]:
                    url = j.get("http_url") or ""
                    if not url.startswith(("http://", "https://")):
                        return name, {}
                    jid = urlsplit(j["journal"]).path.strip("/")
                    beans = await _jmx(session, url, f"Hadoop:service=JournalNode,name=Journal-{jid}", ssl_ctx)
                    if "error" in beans:
                        return name, beans
                    return name, {"bean": beans.get(f"Hadoop:service=JournalNode,name=Journal-{jid}", {})}

                got = await asyncio.gather(*(peer(n, t) for n, t in peers.items()),
                                           *(journal_node(n, j) for n, j in jns.items()))
            self._probed = {"peers": dict(got[:len(peers)]), "journal_nodes": dict(got[len(peers):])}
            self._probed_at = loop.time()
            return self._probed

    def _peer_targets(self, v: dict) -> dict[str, dict]:
        """Every NameNode of the nameservice: its RPC address and the URL of its web server."""
        conf = self.nn.conf
        scheme = "https" if https_enabled(conf) else "http"
        out: dict[str, dict] = {}
        if not nameservice_of(conf):
            return out
        try:
            addresses = namenode_addresses(conf)
        except QJournalError as err:
            log.debug("web UI: no NameNode addresses: %s", err)
            return out
        for nn_id, host, port in addresses:
            try:
                (http_host, http_port), _, _ = http_address_of(conf, nn_id)
            except QJournalError:
                continue
            if http_host in ("0.0.0.0", "::", ""):
                http_host = host
            out[nn_id] = {"address": f"{host}:{port}", "url": f"{scheme}://{http_host}:{http_port}",
                          "self": nn_id == v["nn_id"]}
        return out

    # --- the file browser --------------------------------------------------------------------------------------

    async def explorer(self, request: web.Request) -> web.Response:
        """``/explorer.html?path=P[&startAfter=N][&sort=COL&order=asc|desc][&user.name=U]``."""
        params = {k.lower(): v for k, v in request.query.items()}
        e = html.escape
        user_name = params.get("user.name", "")
        keep = {"user.name": user_name} if user_name else {}
        user_query = ("?" + urlencode(keep)) if keep else ""
        raw = params.get("path") or "/"
        sort = params.get("sort") or "name"
        order = params.get("order") or "asc"
        start_after = params.get("startafter") or ""
        try:
            if sort not in _SORT_KEYS:
                raise InvalidRequestError(f"sort={sort[:40]!r}: not a column ({', '.join(_SORT_KEYS)})")
            if order not in ("asc", "desc"):
                raise InvalidRequestError(f"order={order[:40]!r}: asc or desc")
            try:
                path = join_path(split_path(raw))
            except InvalidRequestError as err:
                raise InvalidRequestError(f"path={raw[:200]!r}: {err.message}") from None
            user, groups = await self.webhdfs.caller(request, params)
            client = self.webhdfs.client
            st = await client.rpc_get_file_info(path, user=user, groups=groups)
            if st is None:
                raise FileNotFoundError_(f"File does not exist: {path}", path=path)
            if st["type"] == "d":
                batch = await client.rpc_get_listing(path, start_after, self.webhdfs.ls_limit, user=user,
                                                     groups=groups)
                entries, remaining = batch["entries"], int(batch["remaining"])
            else:
                entries, remaining = [st], 0
        except QJournalError as err:
            status = (404 if isinstance(err, FileNotFoundError_) else
                      400 if isinstance(err, InvalidRequestError) else
                      403 if isinstance(err, (PermissionDeniedError, AuthorizationError, AuthenticationError)) else
                      401 if isinstance(err, WebHdfsAuthError) else 503 if isinstance(
                          err, (StandbyError, ObserverRetryOnActiveError)) else 500)
            hint = ""
            if isinstance(err, (StandbyError, ObserverRetryOnActiveError)):
                hint = " Browse on the active NameNode (the overview lists it)."
            body = (self._path_box(raw, keep)
                    + f"<div class='problems'><h2>Cannot list {e(raw[:300])}</h2>"
                    f"<p>{e(type(err).__name__)}: {e(err.message or str(err))}{e(hint)}</p></div>")
            return self._page("Browse the file system", f"<section>{body}</section>", "explorer.js", status,
                              user_query)
        key = _SORT_KEYS[sort]
        entries = sorted(entries, key=key, reverse=order == "desc")
        for s in entries:
            s.setdefault("name", s["path"].rsplit("/", 1)[-1])
        body = [self._path_box(path, keep), self._breadcrumbs(path, keep)]
        heads = []
        for col, heading in COLUMNS:
            nxt = "desc" if col == sort and order == "asc" else "asc"
            q = {"path": path, "sort": col, "order": nxt, **({"startAfter": start_after} if start_after else {}),
                 **keep}
            arrow = (" ▲" if order == "asc" else " ▼") if col == sort else ""
            heads.append(f"<th data-col='{col}' class='{'num' if col in ('size', 'replication') else ''}'>"
                         f"<a href='/explorer.html?{e(urlencode(q))}'>{e(heading)}{arrow}</a></th>")
        rows = []
        for s in entries:
            is_dir = s["type"] == "d"
            name = s["name"] if s["path"] != path or is_dir else s["path"].rsplit("/", 1)[-1]
            if is_dir:
                link = "/explorer.html?" + urlencode({"path": s["path"], **keep})
                name_cell = f"<a class='dir' href='{e(link)}'>{e(name)}</a>"
            else:
                name_cell = f"<span class='file'>{e(name)}</span>"
            rows.append(
                f"<tr data-name='{e(name)}'><td class='mono'>{e(mode_string(is_dir, s['permission']))}</td>"
                f"<td>{e(s['owner'])}</td><td>{e(s['group'])}</td>"
                f"<td class='num' title='{s['length']} bytes'>{e(human_bytes(s['length']))}</td>"
                f"<td data-ms='{s['mtime']}'>{e(_local_minute(s['mtime']))}</td>"
                f"<td class='num'>{'-' if is_dir else s['replication']}</td><td>{name_cell}</td></tr>")
        if not rows:
            rows.append(f"<tr class='empty'><td colspan='{len(COLUMNS)}'>No entries.</td></tr>")
        pager = []
        if start_after:
            pager.append(f"<a href='/explorer.html?{e(urlencode({'path': path, **keep}))}'>« First page</a>")
        if remaining > 0 and entries:
            last = max(s["name"] for s in entries)
            pager.append(f"<a id='next-page' href='/explorer.html?"
                         f"{e(urlencode({'path': path, 'startAfter': last, **keep}))}'>Next page »</a> "
                         f"<span class='muted'>({remaining:,} more entries)</span>")
        body.append(
            f"<table class='grid listing' id='listing' data-path='{e(path)}' data-user='{e(user_name)}' "
            f"data-limit='{self.webhdfs.ls_limit}' data-remaining='{remaining}' data-sort='{e(sort)}' "
            f"data-order='{e(order)}' data-start-after='{e(start_after)}'><thead><tr>{''.join(heads)}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table><p class='pager' id='pager'>{' · '.join(pager)}</p>"
            f"<p class='muted'>Browsing as {e(user)}. Sorting orders the page shown; pages hold "
            f"{self.webhdfs.ls_limit:,} entries (dfs.ls.limit).</p>")
        return self._page("Browse the file system", "<section><h1>Browse the file system</h1>" + "".join(body)
                          + "</section>", "explorer.js", 200, user_query)

    @staticmethod
    def _path_box(path: str, keep: dict) -> str:
        e = html.escape
        hidden = "".join(f"<input type='hidden' name='{e(k)}' value='{e(v)}'>" for k, v in keep.items())
        return ("<form class='pathbox' id='pathbox' method='get' action='/explorer.html'>"
                f"<input type='text' name='path' id='path' value='{e(path)}' aria-label='path' "
                f"spellcheck='false'>{hidden}<button type='submit'>Go!</button></form>")

    @staticmethod
    def _breadcrumbs(path: str, keep: dict) -> str:
        e = html.escape
        parts = split_path(path)
        crumbs = [f"<a href='/explorer.html?{e(urlencode({'path': '/', **keep}))}'>/</a>"]
        for i, part in enumerate(parts):
            target = join_path(parts[:i + 1])
            crumbs.append(f"<a href='/explorer.html?{e(urlencode({'path': target, **keep}))}'>{e(part)}</a>")
        return f"<nav class='crumbs' id='crumbs'>{crumbs[0]} {' / '.join(crumbs[1:])}</nav>"


async def _jmx(session: aiohttp.ClientSession, base: str, qry: str, ssl_ctx: Any) -> dict:
    """``{bean name: bean}`` of ``base/jmx?qry=...``, or ``{"error": why}``."""
    try:
        async with session.get(f"{base}/jmx?qry={quote(qry, safe=':=,*')}", ssl=ssl_ctx) as r:
            if r.status != 200:
                return {"error": f"HTTP {r.status}"}
            doc = json.loads(await r.text())
        return {b.get("name", ""): b for b in doc.get("beans", [])}
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError) as err:
        return {"error": f"{type(err).__name__}: {err}"[:200] if str(err) else type(err).__name__}


def _since(ms: int) -> str:
    if not ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000.0))
