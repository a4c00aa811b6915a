"""Service-level authorization: who may call which protocol, checked before any handler runs.

Why: mutual TLS tells a daemon that a peer's certificate was signed by the
cluster CA, not that the peer may be the journal's writer, a ZKFC or an
administrator. Hadoop answers this with ``hadoop.security.authorization`` and
one ACL per protocol (``hadoop-policy.xml``, ``ServiceAuthorizationManager``);
qjournal reads the same keys and enforces them in one place per transport: the
RPC server's dispatch (:meth:`ServiceAuthorization.authorize_rpc`, given to
:class:`~qjournal.transport.server.RpcServer` as its ``authorize`` hook) and the
HTTP servers' middleware (:meth:`ServiceAuthorization.http_middleware`).

Theory of operation:

* Each daemon names its protocols: the RPC method -> ACL keys table comes from the protocol
  tables (:mod:`qjournal.protocol.protocols`: ``JOURNALNODE_ACLS``, ``NAMENODE_ACLS``,
  ``ZKFC_ACLS``; a method admitted by two ACLs, such as ``get_edit_log_manifest`` of
  QJournalProtocol and InterQJournalProtocol, is admitted by either), and a table from HTTP
  path to keys (``HTTP_*`` below). A method or path in no table is refused while
  authorization is on (fail closed).
* The caller is the certificate's user (:mod:`qjournal.security.identity`);
  its groups are looked up only when an ACL names groups and not the user.
* ``hadoop.security.authorization`` is read once, at start (as Hadoop); it needs
  ``qjournal.rpc.tls.enabled`` (and ``dfs.http.policy=HTTPS_ONLY`` on a daemon
  with HTTP endpoints): without a certificate there is no identity to check.
* HTTP: ``/getJournal`` admits the principals of the QJournalProtocol and
  InterQJournalProtocol ACLs (Hadoop's servlet admits the NameNodes' and
  JournalNodes' principals); ``/webhdfs`` the ClientProtocol ACL; ``/jmx``,
  ``/metrics`` and the status pages any authenticated peer, or with
  ``hadoop.security.instrumentation.requires.admin`` only
  ``dfs.cluster.administrators`` (Hadoop's ``HttpServer2``); ``/isActive`` any
  authenticated peer (load balancers).
* A refusal is :class:`~qjournal.errors.AuthorizationError` naming the user, its
  principal, the protocol and the call (Hadoop's ``AuthorizationException``
  over HTTP, status 403), logged, and counted in :attr:`ServiceAuthorization.metrics`
  (``/jmx`` ``RpcAuthorizationFailures``, ``/metrics``).
* :meth:`refresh` (``refresh_service_acl``, itself under
  ``security.refresh.policy.protocol.acl``) reads the configuration directory
  again (``core-site.xml``, ``hdfs-site.xml``, ``hadoop-policy.xml``:
  :meth:`~qjournal.config.conf.Configuration.reload`) and swaps every ACL at
  once; a policy that does not parse leaves the old one in force.
  ``refresh_user_to_groups_mappings`` reads the group mapping again.

Invariants:

1. While authorization is on, no RPC handler and no HTTP handler runs for a call
   whose caller the call's ACLs do not admit.
2. Every method a daemon serves is in its table (the RPC server serves only its protocol
   tables' methods, and the ACLs come from the same tables), and anything else is refused.
3. A refresh changes all ACLs at once or none.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable, Mapping, Sequence

from aiohttp import web

from qjournal.errors import AuthenticationError, AuthorizationError, ConfigError
from qjournal.protocol.protocols import (ACL_CLIENT, ACL_INTERQJOURNAL, ACL_PROTOCOL_NAMES, ACL_QJOURNAL,
                                         REFRESH_POLICY, REFRESH_USER_MAPPINGS)
from qjournal.security.acl import AccessControlList
from qjournal.security.identity import Authenticator, Caller, principal_of
from qjournal.transport.http import https_enabled, peer_cert, remote_exception

__all__ = ["ServiceAuthorization", "PROTOCOL_NAMES", "HTTP_JOURNALNODE", "HTTP_NAMENODE", "HTTP_ZKFC", "ADMIN",
           "AUTHENTICATED"]

log = logging.getLogger(__name__)

AUTHORIZATION_KEY = "hadoop.security.authorization"
#: the HTTP admin ACL (Hadoop's), used when instrumentation requires the admin
ADMINS = "dfs.cluster.administrators"
REQUIRES_ADMIN = "hadoop.security.instrumentation.requires.admin"

#: ACL key -> the protocol it guards (Hadoop's interface names), for messages
PROTOCOL_NAMES: dict[str, str] = {**ACL_PROTOCOL_NAMES, ADMINS: "the HTTP admin endpoints"}

#: an HTTP path for the admins when instrumentation requires them, else any authenticated peer
ADMIN = "instrumentation"
#: an HTTP path open to any peer that passed the TLS handshake
AUTHENTICATED = "authenticated"

#: HTTP path (exact, or a prefix ending in "/") -> ACL keys, or ADMIN / AUTHENTICATED
HTTP_JOURNALNODE: dict[str, Any] = {"/getJournal": (ACL_QJOURNAL, ACL_INTERQJOURNAL), "/jmx": ADMIN,
                                    "/metrics": ADMIN, "/": ADMIN}
HTTP_NAMENODE: dict[str, Any] = {"/webhdfs/": (ACL_CLIENT,), "/jmx": ADMIN, "/metrics": ADMIN, "/": ADMIN,
                                 "/index.html": ADMIN, "/dfshealth.html": ADMIN, "/overview.json": ADMIN,
                                 "/isActive": AUTHENTICATED, "/static/": AUTHENTICATED,
                                 # the namespace browser lists what the caller's ClientProtocol calls may
                                 "/explorer.html": (ACL_CLIENT,)}
HTTP_ZKFC: dict[str, Any] = {"/jmx": ADMIN, "/metrics": ADMIN, "/": ADMIN}


def _load_acls(conf: Any) -> dict[str, AccessControlList]:
    keys = sorted({*PROTOCOL_NAMES} - {ADMINS})
    acls = {k: AccessControlList.parse(conf.get(k)) for k in keys}
    acls[ADMINS] = AccessControlList.parse(conf.get(ADMINS))
    return acls


class ServiceAuthorization:
    """The service-level ACLs of one daemon and the checks against them (module docstring).

    Args:
        conf: the daemon's configuration (its :meth:`~qjournal.config.conf.Configuration.reload`
            is used by :meth:`refresh`).
        protocols: RPC method -> ACL keys (``protocols.JOURNALNODE_ACLS`` and its siblings).
        service: the daemon, for messages (``"JournalNode"``, ...).
        http: HTTP path -> ACL keys / :data:`ADMIN` / :data:`AUTHENTICATED` (``HTTP_*``), or None.
        authenticator: certificates to callers (default: from ``conf``).

    Attributes:
        enabled: ``hadoop.security.authorization`` at start.
        metrics: ``rpc_authorization_successes``, ``rpc_authorization_failures``,
            ``http_authorization_failures``, ``policy_refreshes``.

    Raises:
        ConfigError: authorization on without mutual TLS (RPC, and HTTPS with ``http``), or a
            malformed rule or group mapping.
    """

    def __init__(self, conf: Any, protocols: Mapping[str, Sequence[str]], *, service: str,
                 http: Mapping[str, Any] | None = None, authenticator: Authenticator | None = None) -> None:
        self.conf = conf
        self.protocols = {m: tuple(keys) for m, keys in protocols.items()}
        self.http = dict(http or {})
        self.service = service
        self.enabled = bool(conf.get_bool(AUTHORIZATION_KEY))
        if self.enabled and not conf.get_bool("qjournal.rpc.tls.enabled"):
            raise ConfigError(f"{service}: {AUTHORIZATION_KEY} is true but qjournal.rpc.tls.enabled is false: "
                              f"callers are known by their TLS certificates", key=AUTHORIZATION_KEY)
        if self.enabled and self.http and not https_enabled(conf):
            raise ConfigError(f"{service}: {AUTHORIZATION_KEY} is true but dfs.http.policy is not HTTPS_ONLY: "
                              f"HTTP callers are known by their TLS certificates", key=AUTHORIZATION_KEY)
        self.authenticator = authenticator or Authenticator(conf)
        self.requires_admin = bool(conf.get_bool(REQUIRES_ADMIN))
        self.acls = _load_acls(conf)
        self.metrics = {"rpc_authorization_successes": 0, "rpc_authorization_failures": 0,
                        "http_authorization_failures": 0, "policy_refreshes": 0}

    # --- the checks --------------------------------------------------------------------------

    async def _check(self, cert: dict | None, keys: Sequence[str], what: str) -> Caller:
        """The caller of ``cert`` if one of ``keys`` admits it (invariant 1); its groups are looked
        up only when an ACL names groups and not the user.

        Raises:
            AuthenticationError: no usable principal. AuthorizationError: no ACL admits the caller.
        """
        if cert is None:
            raise AuthenticationError(f"{self.service}: {what}: the caller presented no certificate")
        principal = principal_of(cert)
        user = self.authenticator.user_of_principal(principal)
        acls = [self.acls[k] for k in keys]
        if any(acl.is_user_allowed(user, ()) for acl in acls):
            return Caller(user, (), principal)
        if any(acl.needs_groups for acl in acls):
            groups = tuple(await self.authenticator.groups.groups_async(user))
            if any(acl.is_user_allowed(user, groups) for acl in acls):
                return Caller(user, groups, principal)
        protocol = " / ".join(PROTOCOL_NAMES.get(k, k) for k in keys)
        raise AuthorizationError(
            f"User {user} (principal {principal}) is not authorized for protocol {protocol} "
            f"on {self.service}: {what} ({', '.join(keys)})",
            user=user, principal=principal, protocol=protocol, method=what)

    async def authorize_rpc(self, peer: Any, method: str) -> None:
        """The ``RpcServer`` hook: admit or refuse ``method`` for ``peer`` (a ``PeerInfo``).

        Raises:
            AuthenticationError, AuthorizationError: refused (counted and logged).
        """
        if not self.enabled:
            return
        keys = self.protocols.get(method)
        try:
            if keys is None:  # invariant 2: fail closed
                raise AuthorizationError(f"{self.service}: call {method} belongs to no protocol with an ACL",
                                         method=method)
            await self._check(getattr(peer, "cert", None), keys, f"call {method}")
        except (AuthenticationError, AuthorizationError) as e:
            self.metrics["rpc_authorization_failures"] += 1
            log.warning("authorization refused: %s (from %s)", e.message, getattr(peer, "address", "?"))
            raise
        self.metrics["rpc_authorization_successes"] += 1

    def _http_rule(self, path: str) -> Any:
        rule = self.http.get(path)
        if rule is not None:
            return rule
        for prefix, r in self.http.items():
            if prefix.endswith("/") and prefix != "/" and path.startswith(prefix):
                return r
        return None

    def http_middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        """An aiohttp middleware enforcing the ``http`` table before any handler (invariant 1)."""

        @web.middleware
        async def authorize(request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
                            ) -> web.StreamResponse:
            if not self.enabled:
                return await handler(request)
            path = request.path
            rule = self._http_rule(path if path != "/webhdfs/v1" else "/webhdfs/")
            cert = peer_cert(request)
            try:
                if rule is None:
                    raise AuthorizationError(f"{self.service}: HTTP path {path[:200]} has no ACL", method=path)
                if rule == AUTHENTICATED or (rule == ADMIN and not self.requires_admin):
                    if cert is None:
                        raise AuthenticationError(f"{self.service}: {path}: the caller presented no certificate")
                else:
                    await self._check(cert, (ADMINS,) if rule == ADMIN else rule, f"HTTP {path[:200]}")
            except (AuthenticationError, AuthorizationError) as e:
                self.metrics["http_authorization_failures"] += 1
                log.warning("authorization refused: %s (from %s)", e.message, request.remote)
                return remote_exception("org.apache.hadoop.security.authorize.AuthorizationException", e.message)
            return await handler(request)

        return authorize

    # --- metrics ------------------------------------------------------------------------------

    def bean_attributes(self) -> dict[str, Any]:
        """The ``/jmx`` attributes of these counters (Hadoop's ``RpcActivity`` names, plus qjournal's
        HTTP refusals and refreshes)."""
        m = self.metrics
        return {"RpcAuthorizationFailures": m["rpc_authorization_failures"],
                "RpcAuthorizationSuccesses": m["rpc_authorization_successes"],
                "HttpAuthorizationFailures": m["http_authorization_failures"],
                "ServiceAuthorizationRefreshes": m["policy_refreshes"],
                "ServiceAuthorizationEnabled": self.enabled}

    def metric_families(self, prefix: str) -> list[Any]:
        """Prometheus counter families ``<prefix>{rpc,http}_authorization_*`` of these counters."""
        from prometheus_client.core import CounterMetricFamily  # noqa: PLC0415

        out = []
        for name, doc in (("rpc_authorization_failures", "RPC calls refused by service-level authorization"),
                          ("rpc_authorization_successes", "RPC calls admitted by service-level authorization"),
                          ("http_authorization_failures", "HTTP requests refused by service-level authorization"),
                          ("policy_refreshes", "service-level authorization policy refreshes")):
            fam = CounterMetricFamily(prefix + name, doc)
            fam.add_metric([], float(self.metrics[name]))
            out.append(fam)
        return out

    # --- refresh ------------------------------------------------------------------------------

    def refresh(self) -> dict[str, str]:
        """Read the policy from the configuration directory again (invariant 3).

        Returns:
            The ACLs now in force, key -> ACL text.

        Raises:
            AuthorizationError: authorization is off (Hadoop: "Service Level Authorization not enabled!").
            ConfigError: the configuration no longer parses (the old policy stays).
        """
        if not self.enabled:
            raise AuthorizationError(f"{self.service}: Service Level Authorization not enabled! "
                                     f"({AUTHORIZATION_KEY} is false)")
        conf = self.conf.reload()
        acls = _load_acls(conf)
        requires_admin = bool(conf.get_bool(REQUIRES_ADMIN))
        self.acls, self.requires_admin = acls, requires_admin
        self.metrics["policy_refreshes"] += 1
        log.info("%s: service-level authorization policy refreshed", self.service,
                 extra={"acls": {k: str(v) for k, v in sorted(acls.items())}})
        return {k: str(v) for k, v in sorted(acls.items())}

    async def rpc_refresh_service_acl(self) -> dict[str, str]:
        """``dfsadmin -refreshServiceAcl``: :meth:`refresh`.

        Returns:
            key -> ACL now in force.

        Raises:
            AuthorizationError: authorization is off. ConfigError: the new policy does not parse.
        """
        return self.refresh()

    async def rpc_refresh_user_to_groups_mappings(self) -> None:
        """``dfsadmin -refreshUserToGroupsMappings``: read the group overrides and mapping file again
        and forget cached groups.

        Raises:
            ConfigError: the configuration or the mapping file no longer parses (nothing changes).
        """
        self.authenticator.groups.refresh(self.conf.reload())

    #: the refresh calls every daemon serves (this object is one of its RPC handlers)
    rpc_protocols = (REFRESH_POLICY, REFRESH_USER_MAPPINGS)
