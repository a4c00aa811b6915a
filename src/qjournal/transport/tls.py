"""TLS contexts with mutual authentication for qjournal RPC.

Why this module exists: a JournalNode must only take edits from NameNodes of
its own cluster, and a NameNode must only accept HA transitions from its own
ZKFC and operators. Mutual TLS gives both directions of that check with the
standard library alone: every process holds a certificate signed by the
cluster CA, and both ends of every RPC connection require and verify the
other's certificate. Building the contexts in one place keeps the settings
(TLS >= 1.2, certificate required, hostname checked) the same everywhere.

The contexts plug into :meth:`RpcServer.start_tcp` and :meth:`RpcClient.connect_tcp`
through their ``ssl=`` argument. :func:`server_context_from_conf` and
:func:`client_context_from_conf` read the ``qjournal.rpc.tls.*`` keys.
"""

from __future__ import annotations

import logging
import os
import ssl
from typing import Any, Callable

from qjournal.errors import ConfigError

__all__ = ["client_context", "client_context_from_conf", "server_context", "server_context_from_conf",
           "REFUSED_CERTIFICATE_HINT"]

#: what a TLS client is told when the server closed the connection before answering anything: with TLS 1.3 the
#: server checks the client's certificate after the client's side of the handshake ended, and the alert it sends is
#: lost, so a refusal looks like a bare disconnect (RPC: transport/client.py; HTTP: transport/download.py)
REFUSED_CERTIFICATE_HINT = ("a TLS server does so when it refuses this client's certificate (none, expired, or not "
                            "signed by its CA: qjournal.rpc.tls.{cert,key,ca}.file); the server's log says why")

log = logging.getLogger("qjournal.transport.tls")


def _check_file(path: str, what: str, key: str | None) -> str:
    where = f" (config key {key})" if key else ""
    if not path:
        raise ConfigError(f"TLS {what} path is empty{where}", path=path)
    if not os.path.isfile(path):
        raise ConfigError(f"TLS {what} {path} does not exist or is not a file{where}", path=path)
    return path


def _new_context(protocol: int, cert_path: str | None, key_path: str | None, ca_path: str,
                 keys: tuple[str | None, str | None, str | None]) -> ssl.SSLContext:
    """A TLS >= 1.2 context of ``protocol`` with the CA and (if given) our certificate loaded."""
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _check_file(ca_path, "CA file", keys[2])
    try:
        ctx.load_verify_locations(cafile=ca_path)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(f"TLS CA file {ca_path} cannot be loaded: {exc}", path=ca_path) from exc
    if cert_path is None:
        return ctx
    _check_file(cert_path, "certificate", keys[0])
    if key_path is not None:
        _check_file(key_path, "private key", keys[1])
    try:
        ctx.load_cert_chain(certfile=cert_path, keyfile=key_path)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"TLS certificate {cert_path} / key {key_path} cannot be loaded: {exc}", path=cert_path
        ) from exc
    return ctx


def server_context(
    cert_path: str,
    key_path: str | None,
    ca_path: str,
    *,
    require_client_cert: bool = True,
    _keys: tuple[str | None, str | None, str | None] = (None, None, None),
) -> ssl.SSLContext:
    """Build the TLS context of an RPC server.

    Args:
        cert_path: PEM certificate (chain) of the server.
        key_path: PEM private key (None if it is inside ``cert_path``).
        ca_path: PEM CA bundle that client certificates must chain to.
        require_client_cert: refuse clients without a valid certificate
            (mutual authentication; keep True outside tests).

    Returns:
        An ``ssl.SSLContext`` for ``RpcServer.start_tcp(..., ssl=...)``.

    Raises:
        ConfigError: a file is missing or unreadable (names the path).
    """
    ctx = _new_context(ssl.PROTOCOL_TLS_SERVER, cert_path, key_path, ca_path, _keys)
    ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    ctx.sslobject_class = _AuditedSSLObject
    return ctx


def client_context(
    cert_path: str | None,
    key_path: str | None,
    ca_path: str,
    *,
    check_hostname: bool = True,
    _keys: tuple[str | None, str | None, str | None] = (None, None, None),
) -> ssl.SSLContext:
    """Build the TLS context of an RPC client.

    Args:
        cert_path: PEM certificate presented to the server (None: present
            none, which a mutual-auth server refuses).
        key_path: PEM private key (None if it is inside ``cert_path``).
        ca_path: PEM CA bundle that the server certificate must chain to.
        check_hostname: check the server certificate's names against the
            host connected to (``server_hostname``).

    Returns:
        An ``ssl.SSLContext`` for ``RpcClient.connect_tcp(..., ssl=...)``.

    Raises:
        ConfigError: a file is missing or unreadable (names the path).
    """
    ctx = _new_context(ssl.PROTOCOL_TLS_CLIENT, cert_path, key_path, ca_path, _keys)
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _AuditedSSLObject(ssl.SSLObject):
    """Logs refused handshakes: asyncio drops them silently on the server side."""

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            detail = getattr(exc, "verify_message", None)  # e.g. "certificate has expired"
            log.warning("TLS handshake refused (server side): %s%s", exc.reason or exc,
                        f": {detail}" if detail else "")
            raise


_CONF_KEYS = ("qjournal.rpc.tls.cert.file", "qjournal.rpc.tls.key.file", "qjournal.rpc.tls.ca.file")


def _from_conf(conf: Any, build: Callable[..., ssl.SSLContext]) -> ssl.SSLContext | None:
    """``build(cert, key, ca)`` from the ``qjournal.rpc.tls.*`` keys, or None when TLS is disabled."""
    if not conf.get_bool("qjournal.rpc.tls.enabled"):
        return None
    cert, key, ca = (conf.get(k) for k in _CONF_KEYS)
    for name, value in ((_CONF_KEYS[0], cert), (_CONF_KEYS[2], ca)):
        if not value:
            raise ConfigError(f"qjournal.rpc.tls.enabled is true but {name} is not set", key=name)
    return build(cert, key or None, ca, _keys=_CONF_KEYS)


def server_context_from_conf(conf: Any) -> ssl.SSLContext | None:
    """The server context from ``qjournal.rpc.tls.*`` keys, or None when TLS is disabled.

    Args:
        conf: a :class:`qjournal.config.conf.Configuration`.

    Returns:
        A mutual-auth server context or None.

    Raises:
        ConfigError: TLS is enabled but a path is unset, missing or unreadable.
    """
    return _from_conf(conf, server_context)


def client_context_from_conf(conf: Any) -> ssl.SSLContext | None:
    """The client context from ``qjournal.rpc.tls.*`` keys, or None when TLS is disabled.

    Args:
        conf: a :class:`qjournal.config.conf.Configuration`.

    Returns:
        A mutual-auth client context or None.

    Raises:
        ConfigError: TLS is enabled but a path is unset, missing or unreadable.
    """
    return _from_conf(conf, client_context)
