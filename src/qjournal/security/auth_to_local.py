"""Principal names to short user names: Hadoop's ``hadoop.security.auth_to_local`` rules, pure.

Why: with mutual TLS a caller is known by its certificate, whose name is a
principal such as ``nn/host1.example.com`` or ``alice@EXAMPLE.COM``; permission
checks and ACLs speak of short user names (``hdfs``, ``alice``). Hadoop maps
Kerberos principals to short names with the rule language of
``hadoop.security.auth_to_local`` (``KerberosName``); operators already write
those rules, so qjournal reads the same language for certificate principals.

Theory of operation (Hadoop's ``KerberosName``, mechanism ``hadoop``):

* A principal is ``first[/second][@REALM]`` (:func:`parse_principal`); it has
  one or two components. A principal without a realm is in the *default realm*,
  which is empty here (there is no ``krb5.conf``): certificate names rarely
  carry one.
* A one-component principal without a realm (``alice``) is its own short name:
  no rule is consulted (as Hadoop's ``getShortName``).
* Otherwise the rules are tried in order; the first that gives a name wins. No
  rule giving one is :class:`~qjournal.errors.AuthenticationError` ("No rules
  applied to ...").
* ``DEFAULT``: a principal in the default realm maps to its first component
  (``nn/host1`` -> ``nn``); any other realm gives nothing.
* ``RULE:[n:format](match)s/pattern/replacement/g/L``: applies only to
  principals of ``n`` components. ``format`` builds a string from ``$0`` (the
  realm), ``$1`` and ``$2`` (the components); ``(match)``, when present, must
  match that whole string; ``s/pattern/replacement/`` (Java ``replaceFirst``,
  ``g``: ``replaceAll``; ``$1`` in the replacement is a group) rewrites it;
  ``L`` lower-cases the result.
* A result that still holds ``/`` or ``@`` is refused ("Non-simple name"): the
  ``hadoop`` mechanism's rule, so a rule can never hand out a principal as a
  user name by mistake.

Invariants:

1. :func:`short_name` is a pure function of the principal and the rules.
2. A short name never contains ``/`` or ``@`` and is never empty.
3. Rules are tried in the order written; the first non-empty answer is the answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from qjournal.errors import AuthenticationError, ConfigError

__all__ = ["Rule", "Principal", "parse_rules", "parse_principal", "short_name", "RULES_KEY"]

RULES_KEY = "hadoop.security.auth_to_local"

#: the default realm: certificates name no Kerberos realm, so a realm-less principal is "in" it
DEFAULT_REALM = ""

# Hadoop's KerberosName.ruleParser, written out: DEFAULT, or RULE:[n:format](match)s/from/to/g, then /L
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:\[(\d+):([^\]]*)\](?:\(([^)]*)\))?(?:s/([^/]*)/([^/]*)/(g)?)?)/?(L)?")
_PRINCIPAL = re.compile(r"([^/@]+)(?:/([^/@]+))?(?:@([^/@]+))?")
_PARAM = re.compile(r"\$(\d+)")
_NON_SIMPLE = re.compile(r"[/@]")


@dataclass(frozen=True, slots=True)
class Principal:
    """A parsed principal: ``first[/second][@realm]``.

    Attributes:
        components: one or two names.
        realm: the realm, or None when the name has none.
    """

    components: tuple[str, ...]
    realm: str | None

    def __str__(self) -> str:
        return "/".join(self.components) + (f"@{self.realm}" if self.realm is not None else "")


def parse_principal(name: str) -> Principal:
    """Split ``first[/second][@REALM]``.

    Raises:
        AuthenticationError: the name is not of that form (names it).
    """
    m = _PRINCIPAL.fullmatch(name or "")
    if m is None:
        raise AuthenticationError(f"Malformed principal name {name[:200]!r}: expected first[/second][@REALM]",
                                  principal=name[:200])
    comps = (m.group(1),) if m.group(2) is None else (m.group(1), m.group(2))
    return Principal(comps, m.group(3))


def _java_replacement(to: str) -> str:
    """Java's ``Matcher.replaceFirst`` replacement syntax (``$n`` groups, ``\\x`` literal) as a
    Python ``re`` template."""
    out = []
    i = 0
    while i < len(to):
        c = to[i]
        if c == "\\" and i + 1 < len(to):
            out.append(to[i + 1].replace("\\", "\\\\"))
            i += 2
        elif c == "$" and i + 1 < len(to) and to[i + 1].isdigit():
            j = i + 1
            while j < len(to) and to[j].isdigit():
                j += 1
            out.append(f"\\g<{to[i + 1:j]}>")
            i = j
        else:
            out.append("\\\\" if c == "\\" else c)
            i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule of ``hadoop.security.auth_to_local`` (module docstring); ``text`` is as written."""

    text: str
    is_default: bool = False
    num_components: int = 0
    fmt: str = ""
    match: re.Pattern[str] | None = None
    pattern: re.Pattern[str] | None = None
    replacement: str = ""
    repeat: bool = False
    lower: bool = False

    def apply(self, p: Principal) -> str | None:
        """The short name this rule gives ``p``, or None when it does not apply.

        Raises:
            AuthenticationError: ``$n`` outside the principal's parameters, or a non-simple result.
        """
        realm = p.realm if p.realm is not None else DEFAULT_REALM
        if self.is_default:
            result = p.components[0] if realm == DEFAULT_REALM else None
        elif len(p.components) != self.num_components:
            return None
        else:
            params = (realm, *p.components)

            def param(m: re.Match[str]) -> str:
                n = int(m.group(1))
                if n >= len(params):
                    raise AuthenticationError(
                        f"auth_to_local rule {self.text}: index {n} from {self.fmt!r} is outside of the valid "
                        f"range 0 to {len(params) - 1}", principal=str(p))
                return params[n]

            base = _PARAM.sub(param, self.fmt)
            if self.match is not None and self.match.fullmatch(base) is None:
                return None
            result = base
            if self.pattern is not None:
                result = self.pattern.sub(self.replacement, base, count=0 if self.repeat else 1)
        if result is None:
            return None
        if _NON_SIMPLE.search(result):
            raise AuthenticationError(f"Non-simple name {result} after auth_to_local rule {self.text}",
                                      principal=str(p))
        return result.lower() if self.lower else result


def parse_rules(text: str | None) -> list[Rule]:
    """Parse a ``hadoop.security.auth_to_local`` value (rules separated by white space or newlines).

    Args:
        text: the value; None or blank means ``DEFAULT``.

    Returns:
        The rules in order.

    Raises:
        ConfigError: a rule that does not parse, or a regular expression that does not compile
            (names the rule and the key).
    """
    remaining = (text or "").strip() or "DEFAULT"
    rules: list[Rule] = []
    while remaining:
        m = _RULE.match(remaining)
        if m is None or m.end() == 0:
            raise ConfigError(f"{RULES_KEY}: invalid rule: {remaining[:200]!r}", key=RULES_KEY)
        written = remaining[:m.end()].strip()
        remaining = remaining[m.end():].strip()
        if m.group(1):
            rules.append(Rule(written, is_default=True, lower=bool(m.group(8))))
            continue
        try:
            match = re.compile(m.group(4)) if m.group(4) is not None else None
            pattern = re.compile(m.group(5)) if m.group(5) is not None else None
        except re.error as e:
            raise ConfigError(f"{RULES_KEY}: rule {written!r}: bad regular expression: {e}", key=RULES_KEY) from None
        rules.append(Rule(written, num_components=int(m.group(2)), fmt=m.group(3), match=match,
                          pattern=pattern, replacement=_java_replacement(m.group(6) or ""),
                          repeat=bool(m.group(7)), lower=bool(m.group(8))))
    return rules


def short_name(principal: str, rules: list[Rule]) -> str:
    """The short user name of ``principal`` under ``rules`` (invariants 1-3).

    Raises:
        AuthenticationError: a malformed principal, no rule applies, or a rule gave a non-simple name.
    """
    p = parse_principal(principal)
    if len(p.components) == 1 and p.realm is None:
        return p.components[0]
    for rule in rules:
        result = rule.apply(p)
        if result:
            return result
    raise AuthenticationError(f"No rules applied to {p} ({RULES_KEY})", principal=str(p))
