"""Pieces shared by the daemons' HTTP servers: TLS policy, listening, /jmx beans, /metrics.

Why this module exists: the JournalNode and the NameNode (and optionally the
ZKFC) each run a small aiohttp server with the same operational endpoints as
Hadoop's daemons (``/jmx`` from ``JMXJsonServlet``, plus Prometheus
``/metrics``). The HTTP policy (``dfs.http.policy``), the TLS contexts, the
``?qry=`` / ``?get=`` filtering of ``/jmx`` and the Prometheus response must
behave the same on every daemon, so they live here once.

Theory of operation:

* ``dfs.http.policy`` is Hadoop's key: ``HTTP_ONLY`` (default) serves plain
  HTTP; ``HTTPS_ONLY`` serves HTTPS with **mutual** authentication, reusing
  the certificate, key and CA of RPC TLS (``qjournal.rpc.tls.cert.file``,
  ``.key.file``, ``.ca.file``) through :mod:`qjournal.transport.tls`. A client
  without a certificate signed by the cluster CA fails the TLS handshake.
  ``HTTP_AND_HTTPS`` is refused (a daemon has one HTTP listener).
* ``/jmx`` beans are plain dicts with a ``name`` (a JMX ObjectName string,
  ``domain:key=value,key=value``). :func:`filter_beans` implements the
  ObjectName pattern rules Hadoop's servlet gets from ``MBeanServer.queryNames``:
  the domain and each value may hold ``*`` and ``?``; the key order does not
  matter; a trailing ``,*`` (or a bare ``*``) makes the key list a *subset*
  pattern, otherwise the key sets must be equal. ``?get=BEAN::ATTR`` returns
  the one attribute of the one bean, as Hadoop does.
* ``/metrics`` is rendered from a :class:`prometheus_client.CollectorRegistry`
  owned by each server (never the global registry, so several daemons in one
  process do not mix their series).

Invariants:

1. With ``HTTPS_ONLY`` no listener is ever started without TLS, and the
   server context always requires a client certificate.
2. :func:`filter_beans` keeps the input order of the beans it returns.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import ssl
from typing import Any, Iterable

from aiohttp import web

from qjournal.errors import ConfigError
from qjournal.transport.tls import client_context, server_context

__all__ = ["HTTP_POLICIES", "http_policy", "https_enabled", "http_server_context", "http_client_context",
           "start_site", "parse_object_name", "filter_beans", "jmx_response", "prometheus_response",
           "scheme", "Throttle", "peer_cert", "remote_exception"]

#: values of ``dfs.http.policy`` that qjournal serves
HTTP_POLICIES = ("HTTP_ONLY", "HTTPS_ONLY")
_POLICY_KEY = "dfs.http.policy"


def http_policy(conf: Any) -> str:
    """The validated ``dfs.http.policy`` (upper case).

    Args:
        conf: a :class:`qjournal.config.Configuration`.

    Returns:
        ``"HTTP_ONLY"`` or ``"HTTPS_ONLY"``.

    Raises:
        ConfigError: any other value (names the key and the accepted values).
    """
    value = (conf.get(_POLICY_KEY) or "HTTP_ONLY").strip().upper()
    if value not in HTTP_POLICIES:
        raise ConfigError(f"{_POLICY_KEY} = {value!r} is not supported; use one of "
                          f"{', '.join(HTTP_POLICIES)}", key=_POLICY_KEY)
    return value


def https_enabled(conf: Any) -> bool:
    """Whether ``dfs.http.policy`` is ``HTTPS_ONLY``.

    Raises:
        ConfigError: a bad policy value.
    """
    return http_policy(conf) == "HTTPS_ONLY"


def scheme(conf: Any) -> str:
    """``"https"`` or ``"http"`` according to ``dfs.http.policy``.

    Raises:
        ConfigError: a bad policy value.
    """
    return "https" if https_enabled(conf) else "http"


def _tls_paths(conf: Any) -> tuple[str, str | None, str]:
    keys = ("qjournal.rpc.tls.cert.file", "qjournal.rpc.tls.key.file", "qjournal.rpc.tls.ca.file")
    cert, key, ca = (conf.get(k) for k in keys)
    for name, value in ((keys[0], cert), (keys[2], ca)):
        if not value:
            raise ConfigError(f"{_POLICY_KEY} is HTTPS_ONLY but {name} is not set", key=name)
    return cert, key or None, ca


def http_server_context(conf: Any) -> ssl.SSLContext | None:
    """The HTTPS server context (mutual authentication), or None under ``HTTP_ONLY``.

    Args:
        conf: the configuration (``dfs.http.policy``, ``qjournal.rpc.tls.*``).

    Returns:
        An ``ssl.SSLContext`` that requires a client certificate, or None.

    Raises:
        ConfigError: bad policy, or a certificate / key / CA path unset or unreadable.
    """
    if not https_enabled(conf):
        return None

    cert, key, ca = _tls_paths(conf)
    return server_context(cert, key, ca, require_client_cert=True,
                          _keys=("qjournal.rpc.tls.cert.file", "qjournal.rpc.tls.key.file",
                                 "qjournal.rpc.tls.ca.file"))


def http_client_context(conf: Any) -> ssl.SSLContext | None:
    """The HTTPS client context (presents this process's certificate), or None under ``HTTP_ONLY``.

    Args:
        conf: the configuration (``dfs.http.policy``, ``qjournal.rpc.tls.*``).

    Returns:
        An ``ssl.SSLContext`` for aiohttp (``TCPConnector(ssl=...)``), or None.

    Raises:
        ConfigError: bad policy, or a certificate / key / CA path unset or unreadable.
    """
    if conf is None or not hasattr(conf, "get") or not https_enabled(conf):
        return None

    cert, key, ca = _tls_paths(conf)
    return client_context(cert, key, ca, _keys=("qjournal.rpc.tls.cert.file", "qjournal.rpc.tls.key.file",
                                                "qjournal.rpc.tls.ca.file"))


async def start_site(app: web.Application, host: str, port: int,
                     ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, tuple[str, int]]:
    """Serve ``app`` on ``host:port`` (port 0 picks a free port), with TLS when a context is given.

    Args:
        app: the aiohttp application.
        host: address to bind.
        port: port to bind (0 = any free port).
        ssl_context: server TLS context (None: plain HTTP).

    Returns:
        ``(runner, (bound host, bound port))``; ``await runner.cleanup()`` stops it.

    Raises:
        OSError: the address cannot be bound.
    """
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True, ssl_context=ssl_context)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    bound = sock.getsockname()
    return runner, (bound[0], bound[1])


def peer_cert(request: web.Request) -> dict | None:
    """The verified client certificate of an HTTPS request (``getpeercert()``), or None (plain HTTP)."""
    transport = request.transport
    return transport.get_extra_info("peercert") if transport is not None else None


#: Hadoop's WebHDFS ``ExceptionHandler``: these statuses, 403 for every other (IOException) class
_STATUS = {"java.io.FileNotFoundException": 404, "java.lang.IllegalArgumentException": 400,
           "java.lang.UnsupportedOperationException": 400, "java.lang.SecurityException": 401}


def remote_exception(java_class: str, message: str) -> web.Response:
    """Hadoop's ``RemoteException`` JSON with the status Hadoop's ``ExceptionHandler`` gives the class
    (WebHDFS errors, and refusals of any daemon's HTTP endpoints)."""
    body = {"RemoteException": {"exception": java_class.rsplit(".", 1)[-1], "javaClassName": java_class,
                                "message": message}}
    status = _STATUS.get(java_class, 403)
    headers = {"WWW-Authenticate": "PseudoAuth"} if status == 401 else None
    return web.Response(status=status, text=json.dumps(body), content_type="application/json",
                        headers=headers)


# --- /jmx -------------------------------------------------------------------------------------

def parse_object_name(name: str) -> tuple[str, dict[str, str], bool]:
    """Split a JMX ObjectName (or pattern) ``domain:k=v,k=v[,*]``.

    Args:
        name: the ObjectName text.

    Returns:
        ``(domain, {key: value}, is_property_list_pattern)``.

    Raises:
        ValueError: not of the form ``domain:key=value,...`` (message names the text).
    """
    domain, sep, rest = name.partition(":")
    if not sep:
        raise ValueError(f"bad ObjectName {name[:200]!r}: no ':' after the domain")
    props: dict[str, str] = {}
    wildcard = False
    for part in rest.split(","):
        if part == "*":
            wildcard = True
            continue
        key, eq, value = part.partition("=")
        if not eq or not key or not value:
            raise ValueError(f"bad ObjectName {name[:200]!r}: {part[:80]!r} is not key=value")
        if key in props:
            raise ValueError(f"bad ObjectName {name[:200]!r}: key {key!r} given twice")
        props[key] = value
    if not props and not wildcard:
        raise ValueError(f"bad ObjectName {name[:200]!r}: no key=value properties")
    return domain, props, wildcard


def _matches(pattern: tuple[str, dict[str, str], bool], name: str) -> bool:
    pdomain, pprops, wildcard = pattern
    try:
        domain, props, _ = parse_object_name(name)
    except ValueError:
        return False
    if not fnmatch.fnmatchcase(domain, pdomain or "*"):
        return False
    if not wildcard and sorted(props) != sorted(pprops):
        return False
    for key, pvalue in sorted(pprops.items()):
        if key not in props or not fnmatch.fnmatchcase(props[key], pvalue):
            return False
    return True


def filter_beans(beans: Iterable[dict], qry: str | None) -> list[dict]:
    """The beans whose ``name`` matches the ObjectName pattern ``qry`` (None or ``*:*``: all).

    Args:
        beans: bean dicts, each with a ``name``.
        qry: an ObjectName pattern as Hadoop's ``/jmx?qry=``.

    Returns:
        The matching beans in input order (invariant 2).

    Raises:
        ValueError: ``qry`` is not an ObjectName pattern.
    """
    beans = list(beans)
    if not qry or qry == "*:*":
        return beans
    pattern = parse_object_name(qry)
    return [b for b in beans if _matches(pattern, str(b.get("name", "")))]


def _dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False, default=str)


def jmx_response(request: web.Request, beans: list[dict]) -> web.Response:
    """Answer ``/jmx`` as Hadoop's ``JMXJsonServlet``: ``?qry=`` pattern, ``?get=BEAN::ATTR``.

    Args:
        request: the aiohttp request (query parameters ``qry`` and ``get``).
        beans: every bean of the daemon, in a fixed order.

    Returns:
        200 with ``{"beans": [...]}``; 400 with ``{"result": "ERROR", "message": ...}`` for a
        malformed query; 404 when ``get`` names an absent bean or attribute.
    """
    get = request.query.get("get")
    try:
        if get is not None:
            bean_name, sep, attr = get.partition("::")
            if not sep or not attr:
                raise ValueError(f"query parameter get={get[:200]!r} is not of the form BEAN::ATTRIBUTE")
            chosen = filter_beans(beans, bean_name)
            if not chosen or attr not in chosen[0]:
                return web.Response(status=404, content_type="application/json", text=_dumps(
                    {"result": "ERROR", "message": f"no attribute {attr!r} of bean {bean_name!r}"}))
            b = chosen[0]
            out = [{"name": b["name"], "modelerType": b.get("modelerType", ""), attr: b[attr]}]
        else:
            out = filter_beans(beans, request.query.get("qry"))
    except ValueError as e:
        return web.Response(status=400, content_type="application/json",
                            text=_dumps({"result": "ERROR", "message": str(e)}))
    return web.Response(status=200, content_type="application/json", text=_dumps({"beans": out}))


def prometheus_response(registry: Any) -> web.Response:
    """Render a prometheus-client registry in the text exposition format.

    Args:
        registry: a :class:`prometheus_client.CollectorRegistry` (the server's own).

    Returns:
        A 200 response with ``text/plain; version=0.0.4``.
    """
    from prometheus_client import generate_latest  # noqa: PLC0415

    return web.Response(body=generate_latest(registry),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


class Throttle:
    """A transfer never faster than ``bytes_per_s`` (``dfs.edit.log.transfer.bandwidthPerSec``; 0 = no
    limit), for both sides of a segment transfer: the JournalNode serving ``/getJournal`` and the
    syncer downloading from a peer. Chunks are a tenth of a second's worth (4 KiB to ``max_chunk``)."""

    def __init__(self, bytes_per_s: int, max_chunk: int = 1 << 20) -> None:
        self.bytes_per_s = bytes_per_s
        self.chunk_bytes = min(max_chunk, max(4096, bytes_per_s // 10)) if bytes_per_s else max_chunk
        self._done = 0
        self._t0: float | None = None

    @property
    def unlimited(self) -> bool:
        """No rate limit (``bytes_per_s`` 0): a transfer may go as one piece."""
        return not self.bytes_per_s

    async def account(self, n: int) -> None:
        """Count ``n`` more bytes moved; sleep while ahead of the rate (a rate limit, not a wait for
        anything)."""
        if not self.bytes_per_s:
            return
        loop = asyncio.get_running_loop()
        if self._t0 is None:
            self._t0 = loop.time()
        self._done += n
        ahead = self._done / self.bytes_per_s - (loop.time() - self._t0)
        if ahead > 0:
            await asyncio.sleep(ahead)
