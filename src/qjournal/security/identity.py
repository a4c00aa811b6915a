"""Who is calling: the user and groups of a connection, from its verified TLS certificate.

Why: mutual TLS proves that a peer holds a key the cluster CA signed, but a
permission check or an ACL needs a *user*. This module turns the certificate
of a connection into one (the etcd way: the certificate's name is the
identity), so that no caller is believed on its word once TLS is on.

Theory of operation:

* The principal of a certificate (:func:`principal_of`) is its subject's
  common name; a certificate without one is known by its first ``email``
  subjectAltName, else its first ``URI`` one. A subject with several common
  names is refused: stacks disagree on which one names the peer (Python's
  ``getpeercert`` lists them in order, Go's ``crypto/x509``, and so etcd, keeps
  the last, others the first), so any choice could let a CA-signed certificate
  whose extra CN an applicant controlled pass as someone else. Host names and IP addresses in
  the subjectAltName say where a server may run, not who a caller is, and are
  never a principal.
* The principal becomes a short user name through ``hadoop.security.auth_to_local``
  (:mod:`qjournal.security.auth_to_local`), and the user's groups come from the
  server's :class:`~qjournal.security.groups.GroupMapping`.
* :meth:`Authenticator.caller` decides a call's identity: a peer with a verified
  certificate is that certificate's user, whatever the call says. A call that
  *claims* another user (the ``user`` argument of ClientProtocol calls, WebHDFS's
  ``user.name`` or ``doas``) is refused with Hadoop's impersonation message
  ("User: alice is not allowed to impersonate hdfs"): there are no proxy users.
  Claimed groups are ignored. Without a certificate (TLS off: TCP or the
  simulator's memory network, or an in-process call) the claim is the identity:
  simple authentication, as before TLS.

Invariants:

1. With a certificate, the user is a function of the certificate and the
   rules alone; the call's arguments never change it.
2. With a certificate, the groups are the server's mapping of that user.
3. A certificate maps to at most one principal: two common names are an error, never a choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from qjournal.errors import AuthenticationError, AuthorizationError
from qjournal.security.auth_to_local import RULES_KEY, Rule, parse_rules, short_name
from qjournal.security.groups import GroupMapping

__all__ = ["Authenticator", "Caller", "principal_of"]

#: principals -> short names kept per Authenticator (a connection's name is looked up on each call)
MAX_CACHED_PRINCIPALS = 4096


def principal_of(cert: dict | None) -> str:
    """The principal a verified peer certificate names (module docstring).

    Args:
        cert: ``SSLSocket.getpeercert()`` of a verified peer.

    Returns:
        The common name, else the first email, else the first URI subjectAltName.

    Raises:
        AuthenticationError: no certificate, or a certificate that names no principal.
    """
    if not cert:
        raise AuthenticationError("the peer presented no certificate")
    cns = [str(value) for rdn in cert.get("subject", ()) for key, value in rdn if key == "commonName" and value]
    if len(cns) > 1:  # which one is "the" name differs between TLS stacks: refuse to guess (invariant 3)
        raise AuthenticationError(f"the peer's certificate names {len(cns)} common names ({', '.join(cns)[:200]}): "
                                  f"an identity must be one name; issue a certificate with a single CN")
    if cns:
        return cns[0]
    sans = cert.get("subjectAltName", ())
    for kind in ("email", "URI"):
        for k, value in sans:
            if k == kind and value:
                return str(value)
    raise AuthenticationError("the peer's certificate names no principal (no subject CN, email or URI "
                              "subjectAltName)")


@dataclass(frozen=True, slots=True)
class Caller:
    """The identity a call runs under.

    Attributes:
        user: the short user name.
        groups: its groups.
        principal: the certificate's principal, or "" under simple authentication.
    """

    user: str
    groups: tuple[str, ...]
    principal: str = ""


class Authenticator:
    """Certificates to callers (module docstring).

    Args:
        conf: the configuration (``hadoop.security.auth_to_local``).
        groups: the server's group mapping (default: from ``conf``).

    Raises:
        ConfigError: malformed rules or group mapping.
    """

    def __init__(self, conf: Any, groups: GroupMapping | None = None) -> None:
        self.groups = groups or GroupMapping(conf)
        self.rules: list[Rule] = parse_rules(conf.get(RULES_KEY))
        self._names: dict[str, str] = {}

    def user_of_principal(self, principal: str) -> str:
        """The short name of ``principal`` (cached).

        Raises:
            AuthenticationError: no rule maps it.
        """
        user = self._names.get(principal)
        if user is None:
            user = short_name(principal, self.rules)
            if len(self._names) >= MAX_CACHED_PRINCIPALS:
                self._names.clear()
            self._names[principal] = user
        return user

    async def from_cert(self, cert: dict) -> Caller:
        """The caller a verified certificate names, with the server's groups of its user.

        Raises:
            AuthenticationError: no principal, or no rule maps it.
        """
        principal = principal_of(cert)
        user = self.user_of_principal(principal)
        return Caller(user, tuple(await self.groups.groups_async(user)), principal)

    async def caller(self, cert: dict | None, claimed_user: Any = "", claimed_groups: Sequence[Any] = ()) -> Caller:
        """The identity of a call (invariants 1 and 2).

        Args:
            cert: the peer's verified certificate, or None (simple authentication).
            claimed_user: the user the call names ("" or None: none).
            claimed_groups: the groups the call names (used only without a certificate).

        Returns:
            The caller.

        Raises:
            AuthenticationError: the certificate names no usable principal.
            AuthorizationError: the call claims another user than the certificate's.
        """
        if cert is None:  # simple authentication: the claim, unchecked here (the caller validates it)
            return Caller(claimed_user, claimed_groups)  # type: ignore[arg-type]
        caller = await self.from_cert(cert)
        if claimed_user and claimed_user != caller.user:
            raise AuthorizationError(
                f"User: {caller.user} (principal {caller.principal}) is not allowed to impersonate "
                f"{str(claimed_user)[:100]}", user=caller.user, principal=caller.principal,
                claimed_user=str(claimed_user)[:100])
        return caller
