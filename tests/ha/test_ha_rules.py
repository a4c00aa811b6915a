"""Table tests of the pure HA rules: health transitions, error classification, fencing and ACL parsing."""

import asyncio

import pytest

from qjournal.errors import (
    ConfigError, FencingError, HealthCheckFailedError, InvalidRequestError, RpcTimeoutError,
    TransportError,
)
from qjournal.ha.elector import digest_acl_id, parse_zk_acls, parse_zk_auths
from qjournal.ha.fencing import FenceMethod, HATarget, parse_fencing_methods
from qjournal.ha.health_monitor import (
    CheckOutcome, HealthState, classify_error, next_health_state,
)

H = HealthState
O = CheckOutcome

HEALTH_TABLE = [
    # (current, outcome, expected)
    (H.INITIALIZING, O.HEALTHY, H.SERVICE_HEALTHY),
    (H.INITIALIZING, O.UNHEALTHY, H.SERVICE_UNHEALTHY),
    (H.INITIALIZING, O.NOT_RESPONDING, H.SERVICE_NOT_RESPONDING),
    (H.INITIALIZING, O.MONITOR_ERROR, H.HEALTH_MONITOR_FAILED),
    (H.SERVICE_HEALTHY, O.HEALTHY, H.SERVICE_HEALTHY),
    (H.SERVICE_HEALTHY, O.UNHEALTHY, H.SERVICE_UNHEALTHY),
    (H.SERVICE_HEALTHY, O.NOT_RESPONDING, H.SERVICE_NOT_RESPONDING),
    (H.SERVICE_HEALTHY, O.MONITOR_ERROR, H.HEALTH_MONITOR_FAILED),
    (H.SERVICE_UNHEALTHY, O.HEALTHY, H.SERVICE_HEALTHY),
    (H.SERVICE_UNHEALTHY, O.NOT_RESPONDING, H.SERVICE_NOT_RESPONDING),
    (H.SERVICE_NOT_RESPONDING, O.HEALTHY, H.SERVICE_HEALTHY),
    (H.SERVICE_NOT_RESPONDING, O.UNHEALTHY, H.SERVICE_UNHEALTHY),
    (H.HEALTH_MONITOR_FAILED, O.HEALTHY, H.HEALTH_MONITOR_FAILED),       # invariant 1: terminal
    (H.HEALTH_MONITOR_FAILED, O.UNHEALTHY, H.HEALTH_MONITOR_FAILED),
    (H.HEALTH_MONITOR_FAILED, O.NOT_RESPONDING, H.HEALTH_MONITOR_FAILED),
]


@pytest.mark.parametrize("current,outcome,expected", HEALTH_TABLE)
def test_next_health_state(current, outcome, expected):
    assert next_health_state(current, outcome) is expected


def test_health_table_covers_every_pair_from_live_states():
    covered = {(c, o) for c, o, _ in HEALTH_TABLE}
    for c in (H.INITIALIZING, H.SERVICE_HEALTHY):
        for o in O:
            assert (c, o) in covered


@pytest.mark.parametrize("exc,expected", [
    (HealthCheckFailedError("disk full"), O.UNHEALTHY),
    (RpcTimeoutError("slow"), O.NOT_RESPONDING),
    (TransportError("closed"), O.NOT_RESPONDING),
    (ConnectionRefusedError(), O.NOT_RESPONDING),
    (asyncio.TimeoutError(), O.NOT_RESPONDING),
    (InvalidRequestError("unknown method"), O.NOT_RESPONDING),
    (KeyError("bug"), O.MONITOR_ERROR),
    (AssertionError("bug"), O.MONITOR_ERROR),
])
def test_classify_error(exc, expected):
    assert classify_error(exc) is expected


@pytest.mark.parametrize("text,expected", [
    ("", []),
    ("shell(/bin/true)", [FenceMethod("shell", "/bin/true")]),
    ("pidfence(/run/qj)\nshell(kill -9 $target_port)\n",
     [FenceMethod("pidfence", "/run/qj"), FenceMethod("shell", "kill -9 $target_port")]),
    ("sshfence", [FenceMethod("sshfence", "")]),
    ("sshfence(hdfs:2222)\n\n# comment\nshell(echo (nested))",
     [FenceMethod("sshfence", "hdfs:2222"), FenceMethod("shell", "echo (nested)")]),
])
def test_parse_fencing_methods(text, expected):
    assert parse_fencing_methods(text) == expected


@pytest.mark.parametrize("text,needle", [
    ("bogus(x)", "unknown fencing method 'bogus'"),
    ("shell()", "shell needs an argument"),
    ("pidfence", "pidfence needs an argument"),
    ("shell(unclosed", "line 1"),
])
def test_parse_fencing_methods_rejects(text, needle):
    with pytest.raises(ConfigError) as ei:
        parse_fencing_methods(text)
    assert needle in str(ei.value)
    assert "dfs.ha.fencing.methods" in str(ei.value)


def test_ha_target_roundtrip_and_env():
    t = HATarget("ns1", "nn2", "127.0.0.1", 4000, "127.0.0.1", 4001)
    assert HATarget.from_bytes(t.to_bytes()) == t
    assert t.to_bytes() == HATarget.from_bytes(t.to_bytes()).to_bytes()
    env = t.env()
    assert env["target_host"] == "127.0.0.1" and env["target_port"] == "4000"
    assert env["target_address"] == "127.0.0.1:4000"
    assert env["target_nameserviceid"] == "ns1" and env["target_namenodeid"] == "nn2"
    with pytest.raises(FencingError):
        HATarget.from_bytes(b"not json")


def test_parse_zk_acls():
    ident = digest_acl_id("zkfc", "secret")
    acls = parse_zk_acls(f"digest:{ident}:cdrwa,world:anyone:r")
    assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("digest", ident, 31),
                                                                 ("world", "anyone", 1)]
    assert parse_zk_acls("")[0].perms == 31
    for bad in ("world:anyone", "world:anyone:x", "digest::rw"):
        with pytest.raises(ConfigError) as ei:
            parse_zk_acls(bad)
        assert "ha.zookeeper.acl" in str(ei.value)


def test_parse_zk_auths():
    assert parse_zk_auths("digest:zkfc:secret") == [("digest", "zkfc:secret")]
    assert parse_zk_auths("") == []
    with pytest.raises(ConfigError):
        parse_zk_auths("digest")


BASE = {"dfs.nameservices": "ns1", "dfs.ha.namenodes.ns1": "nn1,nn2",
        "dfs.namenode.rpc-address.ns1.nn1": "10.0.0.1:8020", "dfs.namenode.rpc-address.ns1.nn2": "10.0.0.2:8020"}


@pytest.mark.parametrize("drop,extra,nn,needle", [
    ("dfs.nameservices", {}, "nn1", "dfs.nameservices is empty"),
    (None, {}, None, "dfs.ha.namenode.id"),
    (None, {}, "nn3", "dfs.ha.namenodes.ns1"),
    ("dfs.namenode.rpc-address.ns1.nn2", {}, "nn2", "dfs.namenode.rpc-address.ns1.nn2 is not set"),
])
def test_resolve_ha_addresses_errors_name_the_key(drop, extra, nn, needle):
    from qjournal.ha.zkfc import resolve_ha_addresses
    values = {k: v for k, v in BASE.items() if k != drop}
    values.update(extra)
    from qjournal.config.conf import Configuration
    conf = Configuration()
    for k, v in values.items():
        conf.set(k, v)
    with pytest.raises(ConfigError) as ei:
        resolve_ha_addresses(conf, nn)
    assert needle in str(ei.value)


def test_resolve_ha_addresses_zkfc_address_default_and_override():
    from qjournal.config.conf import Configuration
    from qjournal.ha.zkfc import resolve_ha_addresses
    conf = Configuration()
    for k, v in BASE.items():
        conf.set(k, v)
    assert resolve_ha_addresses(conf, "nn2") == ("ns1", "nn2", ("10.0.0.2", 8020), ("10.0.0.2", 8019))
    conf.set("dfs.ha.zkfc.rpc-address.ns1.nn2", "127.0.0.1:9999")
    assert resolve_ha_addresses(conf, "nn2")[3] == ("127.0.0.1", 9999)


def test_zkfc_settings_need_a_zookeeper_quorum():
    from qjournal.config.conf import Configuration
    from qjournal.ha.zkfc import ZKFCSettings
    conf = Configuration()
    for k, v in BASE.items():
        conf.set(k, v)
    with pytest.raises(ConfigError) as ei:
        ZKFCSettings.from_conf(conf, "nn1")
    assert "ha.zookeeper.quorum" in str(ei.value)
    conf.set("ha.zookeeper.quorum", "127.0.0.1:2181")
    conf.set("dfs.ha.fencing.methods", "shell(/bin/true)\npidfence(/run)")
    s = ZKFCSettings.from_conf(conf, "nn1")
    assert s.elector.lock_path == "/hadoop-ha/ns1/ActiveStandbyElectorLock"
    assert s.elector.breadcrumb_path == "/hadoop-ha/ns1/ActiveBreadCrumb"
    assert [str(m) for m in s.fencing.methods] == ["shell(/bin/true)", "pidfence(/run)"]
    assert s.health.check_interval_ms == 1000 and s.health.rpc_timeout_ms == 45000
