"""Table tests of the pure security rules: auth_to_local, ACL syntax, certificate principals, the
group mapping file, and the protocol tables against the handlers they guard."""

from __future__ import annotations

import inspect
import socket
import ssl
import subprocess
import threading

import pytest

from qjournal.config import Configuration
from qjournal.errors import AuthenticationError, ConfigError
from qjournal.ha.zkfc import ZKFailoverController
from qjournal.journalnode.service import JournalNodeService
from qjournal.namenode.admin_protocol import AdminProtocolHandler
from qjournal.namenode.client_protocol import ClientProtocolHandler
from qjournal.namenode.ha_service import HAService
from qjournal.namenode.namenode_protocol import NamenodeProtocolHandler
from qjournal.security.acl import AccessControlList
from qjournal.security.auth_to_local import parse_principal, parse_rules, short_name
from qjournal.security.groups import GroupMapping, parse_mapping_file
from qjournal.security.identity import principal_of
from qjournal.protocol.protocols import JOURNALNODE_ACLS, NAMENODE_ACLS, REFRESH_POLICY, REFRESH_USER_MAPPINGS, ZKFC_ACLS
from qjournal.security.service_auth import ServiceAuthorization
from qjournal.transport import pki

RULES = """
    RULE:[2:$1@$0](nn@)s/.*/hdfs/
    RULE:[2:$1](zkfc)
    RULE:[1:$1@$0](.*@EXAMPLE\\.COM)s/@.*//L
    RULE:[2:$2](.*)s/^([a-z]+)-(\\d+)$/$1$2/g
    DEFAULT
"""

# (principal, rules text, expected short name or the start of the error message, which has a space)
SHORT_NAMES = [
    ("alice", "DEFAULT", "alice"),                      # one component, no realm: itself, no rule asked
    ("alice", "RULE:[1:$1](x)s/.*/bob/", "alice"),      # ... even when a rule would match
    ("nn/127.0.0.1", "DEFAULT", "nn"),                  # default realm: the first component
    ("nn/127.0.0.1@OTHER", "DEFAULT", "No rules applied to nn/127.0.0.1@OTHER"),
    ("nn/host1", RULES, "hdfs"),                        # $0 is the (empty) default realm
    ("zkfc/host1", RULES, "zkfc"),                      # format only: "zkfc"
    ("Alice@EXAMPLE.COM", RULES, "alice"),              # substitution then /L
    ("bob@OTHER.ORG", RULES, "No rules applied to bob@OTHER.ORG"),
    ("jn/web-12", "RULE:[2:$1](nn)\nRULE:[2:$2](.*)s/^([a-z]+)-(\\d+)$/$1$2/g", "web12"),  # first match wins
    ("jn/host1", RULES, "host1"),                       # rule 4: $2, its substitution does not match
    ("a/b", "RULE:[2:$1/$2]", "Non-simple name a/b"),   # a result with / is refused
    ("a/b", "RULE:[2:$3]", "auth_to_local rule RULE:[2:$3]: index 3"),
    ("a/b", "RULE:[1:$1]", "No rules applied to a/b"),  # wrong number of components
    ("x/y/z", "DEFAULT", "Malformed principal name"),
    ("", "DEFAULT", "Malformed principal name"),
    ("svc/h@R", "RULE:[2:$1-$0]s/-/_/g", "svc_R"),
    ("Svc/h", "DEFAULT/L", "svc"),
    ("a/b", "RULE:[2:$1](b)", "No rules applied"),      # match must cover the whole string
]


@pytest.mark.parametrize("principal, rules, want", SHORT_NAMES)
def test_short_name_table(principal, rules, want):
    parsed = parse_rules(rules)
    if " " in want:  # an error message
        with pytest.raises(AuthenticationError) as e:
            short_name(principal, parsed)
        assert e.value.message.startswith(want), e.value.message
    else:
        assert short_name(principal, parsed) == want


@pytest.mark.parametrize("text", ["RULE:[x:$1]", "RULE:[2:$1](unclosed", "NOPE", "RULE:[1:$1]s/(/x/",
                                  "DEFAULT junk"])
def test_bad_rules_are_config_errors_naming_the_key(text):
    with pytest.raises(ConfigError, match="hadoop.security.auth_to_local"):
        parse_rules(text)


def test_rules_parse_in_order_and_blank_is_default():
    assert [r.text for r in parse_rules(RULES)] == [line.strip() for line in RULES.strip().splitlines()]
    assert [r.is_default for r in parse_rules("")] == [True]
    assert parse_principal("nn/h@R").components == ("nn", "h") and str(parse_principal("nn/h@R")) == "nn/h@R"


# (ACL text, user, groups, allowed)
ACLS = [
    ("*", "anyone", [], True),
    ("* ", "anyone", [], True),
    (" *", "anyone", [], True),
    ("", "alice", ["g"], False),
    ("alice,bob", "bob", [], True),
    ("alice,bob", "carol", ["alice"], False),       # a group named like a user is not the user
    ("alice admins,ops", "carol", ["ops"], True),
    ("alice admins,ops", "carol", ["dev"], False),
    (" admins", "admins", [], False),               # leading space: groups only
    (" admins", "x", ["admins"], True),
    (" alice , bob ", "alice", [], False),          # the first space ends the user list
    ("nn ", "nn", [], True),
]


@pytest.mark.parametrize("text, user, groups, allowed", ACLS)
def test_acl_table(text, user, groups, allowed):
    acl = AccessControlList.parse(text)
    assert acl.is_user_allowed(user, groups) is allowed
    assert AccessControlList.parse(str(acl)) == acl  # invariant 2


def test_principal_of_certificates():
    cn = {"subject": ((("countryName", "XX"),), (("commonName", "nn/127.0.0.1"),)),
          "subjectAltName": (("DNS", "localhost"), ("email", "x@y"))}
    assert principal_of(cn) == "nn/127.0.0.1"
    assert principal_of({"subject": (), "subjectAltName": (("DNS", "h"), ("email", "a@B.C"))}) == "a@B.C"
    assert principal_of({"subject": (), "subjectAltName": (("URI", "spiffe://c/nn"),)}) == "spiffe://c/nn"
    for bad in (None, {}, {"subject": (), "subjectAltName": (("DNS", "h"), ("IP Address", "1.2.3.4"))}):
        with pytest.raises(AuthenticationError):
            principal_of(bad)
    # two common names: refused, naming both (docs/security.md: neither the first nor the last is guessed)
    two = {"subject": ((("commonName", "alice"),), (("organizationName", "x"),), (("commonName", "hdfs"),))}
    with pytest.raises(AuthenticationError, match=r"2 common names \(alice, hdfs\)"):
        principal_of(two)
    two_in_one_rdn = {"subject": ((("commonName", "alice"), ("commonName", "hdfs")),)}
    with pytest.raises(AuthenticationError, match="common names"):
        principal_of(two_in_one_rdn)


def test_two_common_names_refused_over_a_real_handshake(tmp_path):
    """What ``getpeercert`` gives for a subject ``/CN=alice/CN=hdfs`` signed by the cluster CA: refused."""
    ca = pki.make_ca(str(tmp_path), "ca")
    srv = pki.make_cert(str(tmp_path), ca, "srv")
    key, csr, crt = (str(tmp_path / f"two.{x}") for x in ("key", "csr", "crt"))
    subprocess.run(["openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", key, "-out", csr, "-subj", "/CN=alice/CN=hdfs"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-CAcreateserial",
                    "-out", crt, "-days", "1"], check=True, capture_output=True, cwd=tmp_path)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca.cert)
    server_ctx.load_cert_chain(srv.cert, srv.key)
    server_ctx.verify_mode = ssl.CERT_REQUIRED
    client_ctx = ssl.create_default_context(cafile=ca.cert)
    client_ctx.check_hostname = False
    client_ctx.load_cert_chain(crt, key)
    a, b = socket.socketpair()
    seen = {}

    def serve():
        with server_ctx.wrap_socket(a, server_side=True) as s:
            seen["cert"] = s.getpeercert()
            s.recv(1)
    t = threading.Thread(target=serve)
    t.start()
    with client_ctx.wrap_socket(b) as c:
        c.sendall(b"x")
    t.join(10)
    with pytest.raises(AuthenticationError, match=r"2 common names \(alice, hdfs\)"):
        principal_of(seen["cert"])


def test_group_mapping_file_then_refresh(tmp_path):
    path = tmp_path / "groups"
    path.write_text("# who is who\nalice = analysts, analysts ,ops\n\nhdfs=supergroup\nroot=\n")
    conf = Configuration({"qjournal.security.group.mapping.file": str(path),
                          "hadoop.user.group.static.mapping.overrides": "alice=override;"})
    m = GroupMapping(conf, lookup=lambda u: ["os-" + u])
    assert m.groups("alice") == ["override"]          # the static overrides come first
    assert m.groups("hdfs") == ["supergroup"] and m.groups("root") == []
    assert m.groups("bob") == ["os-bob"]              # not listed: the OS
    path.write_text("hdfs=supergroup,admins\n")
    assert m.groups("hdfs") == ["supergroup"]         # not read again until a refresh
    m.refresh(conf)
    assert m.groups("hdfs") == ["supergroup", "admins"] and m.groups("root") == ["os-root"]
    path.write_text("broken line\n")
    with pytest.raises(ConfigError, match=f"{path}:1"):
        m.refresh(conf)
    assert m.groups("hdfs") == ["supergroup", "admins"]  # a failed refresh changes nothing
    with pytest.raises(ConfigError, match="=g1"):
        parse_mapping_file("=g1\n", "f")


def _rpc_methods(*classes) -> set[str]:
    return {n[4:] for c in classes for n, f in inspect.getmembers(c, inspect.iscoroutinefunction)
            if n.startswith("rpc_")}


@pytest.mark.parametrize("table, handlers", [
    (JOURNALNODE_ACLS, (JournalNodeService,)),
    (NAMENODE_ACLS, (ClientProtocolHandler, AdminProtocolHandler, HAService, NamenodeProtocolHandler)),
    (ZKFC_ACLS, (ZKFailoverController,)),
])
def test_every_rpc_method_belongs_to_a_protocol(table, handlers):
    """Service auth invariant 2: each daemon's ACL table is exactly the methods it serves."""
    assert set(table) == _rpc_methods(*handlers, ServiceAuthorization)
    assert {m.name for m in (*REFRESH_POLICY, *REFRESH_USER_MAPPINGS)} <= set(table)


def test_authorization_needs_mutual_tls():
    conf = Configuration({"hadoop.security.authorization": "true"})
    with pytest.raises(ConfigError, match="qjournal.rpc.tls.enabled"):
        ServiceAuthorization(conf, ZKFC_ACLS, service="ZKFC nn1")
    conf.set("qjournal.rpc.tls.enabled", "true")
    ServiceAuthorization(conf, ZKFC_ACLS, service="ZKFC nn1")  # no HTTP endpoints: RPC TLS is enough
    with pytest.raises(ConfigError, match="HTTPS_ONLY"):
        ServiceAuthorization(conf, ZKFC_ACLS, service="JournalNode", http={"/jmx": "instrumentation"})
