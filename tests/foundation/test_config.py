"""Configuration: Hadoop XML files, -D overrides, typed getters, templates, errors naming key and file."""

from __future__ import annotations

import argparse
import os

import pytest

from qjournal.config import Configuration, expand
from qjournal.config import keys as K
from qjournal.errors import ConfigError


def site(dirpath, name, props: dict[str, str]) -> str:
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>\n" for k, v in props.items())
    path = os.path.join(dirpath, name)
    with open(path, "w") as f:
        f.write(f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n')
    return path


def test_defaults_have_hadoop_names_and_values():
    c = Configuration()
    assert c.get_address("dfs.journalnode.rpc-address") == ("0.0.0.0", 8485)
    assert c.get_address("dfs.journalnode.http-address") == ("0.0.0.0", 8480)
    assert c.get_duration_ms("dfs.qjournal.write-txns.timeout.ms") == 20000
    assert c.get_duration_ms("dfs.qjournal.prepare-recovery.timeout.ms") == 120000
    assert c.get_int("dfs.qjournal.queued-edits.limit.mb") == 10
    assert c.get_int("ipc.maximum.data.length") == 64 * 1024 * 1024
    assert c.get_bytes("dfs.namenode.max.op.size") == 50 * 1024 * 1024
    assert c.get("ha.zookeeper.parent-znode") == "/hadoop-ha"
    assert c.get_duration_ms("dfs.ha.tail-edits.period") == 60000  # Hadoop: bare number in seconds
    assert c.get("dfs.namenode.shared.edits.dir") is None
    assert c.get_list("dfs.nameservices") == []


def test_every_reference_client_key_is_defined():
    for name in ["dfs.qjournal.start-segment.timeout.ms", "dfs.qjournal.prepare-recovery.timeout.ms",
                 "dfs.qjournal.accept-recovery.timeout.ms", "dfs.qjournal.finalize-segment.timeout.ms",
                 "dfs.qjournal.select-input-streams.timeout.ms", "dfs.qjournal.get-journal-state.timeout.ms",
                 "dfs.qjournal.new-epoch.timeout.ms", "dfs.qjournal.write-txns.timeout.ms",
                 "dfs.qjournal.queued-edits.limit.mb", "dfs.namenode.edits.dir", "dfs.namenode.name.dir",
                 "dfs.journalnode.edits.dir", "ha.zookeeper.quorum", "ha.zookeeper.session-timeout.ms",
                 "dfs.ha.automatic-failover.enabled", "dfs.ha.fencing.methods"]:
        assert K.lookup(name) is not None, name


def test_files_then_overrides_precedence(tmp_path):
    site(tmp_path, "core-site.xml", {"ha.zookeeper.quorum": "a:2181,b:2181",
                                     "dfs.qjournal.write-txns.timeout.ms": "1000"})
    site(tmp_path, "hdfs-site.xml", {"dfs.qjournal.write-txns.timeout.ms": "5s"})
    c = Configuration.load(str(tmp_path), ["dfs.qjournal.new-epoch.timeout.ms=2m"])
    assert c.get_list("ha.zookeeper.quorum") == ["a:2181", "b:2181"]
    assert c.get_duration_ms("dfs.qjournal.write-txns.timeout.ms") == 5000
    assert c.source("dfs.qjournal.write-txns.timeout.ms").endswith("hdfs-site.xml")
    assert c.get_duration_ms("dfs.qjournal.new-epoch.timeout.ms") == 120000
    assert c.source("dfs.qjournal.new-epoch.timeout.ms") == "-D"
    c2 = Configuration.load(str(tmp_path), {"dfs.qjournal.write-txns.timeout.ms": 7})
    assert c2.get_duration_ms("dfs.qjournal.write-txns.timeout.ms") == 7


def test_conf_dir_from_environment(tmp_path, monkeypatch):
    site(tmp_path, "hdfs-site.xml", {"dfs.nameservices": "ns1"})
    monkeypatch.setenv("QJOURNAL_CONF_DIR", str(tmp_path))
    assert Configuration.load().get_list("dfs.nameservices") == ["ns1"]


def test_from_args_uses_conf_and_D(tmp_path):
    site(tmp_path, "hdfs-site.xml", {"dfs.nameservices": "ns1"})
    args = argparse.Namespace(conf=str(tmp_path), overrides=["dfs.ha.namenodes.ns1=nn1,nn2"])
    c = Configuration.from_args(args)
    assert c.get_list("dfs.nameservices") == ["ns1"]
    assert c.get_list("dfs.ha.namenodes.ns1") == ["nn1", "nn2"]


def test_unknown_key_in_file_names_key_and_file(tmp_path):
    path = site(tmp_path, "hdfs-site.xml", {"dfs.qjournal.write-txns.timout.ms": "1"})
    with pytest.raises(ConfigError) as ei:
        Configuration.load(str(tmp_path))
    assert "dfs.qjournal.write-txns.timout.ms" in str(ei.value)
    assert path in str(ei.value)


def test_unknown_key_in_override():
    with pytest.raises(ConfigError, match=r"-D: unknown configuration key 'no.such.key'"):
        Configuration.load(overrides=["no.such.key=1"])


def test_override_without_equals():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        Configuration.load(overrides=["dfs.nameservices"])


@pytest.mark.parametrize("key,value", [
    ("dfs.qjournal.write-txns.timeout.ms", "fast"),
    ("dfs.qjournal.write-txns.timeout.ms", "10 parsecs"),
    ("dfs.qjournal.queued-edits.limit.mb", "ten"),
    ("dfs.ha.automatic-failover.enabled", "yes"),
    ("dfs.journalnode.rpc-address", "localhost"),
    ("dfs.journalnode.rpc-address", "localhost:99999"),
    ("ipc.maximum.data.length", "64q"),
])
def test_malformed_value_names_key_and_file(tmp_path, key, value):
    path = site(tmp_path, "hdfs-site.xml", {key: value})
    with pytest.raises(ConfigError) as ei:
        Configuration.load(str(tmp_path))
    msg = str(ei.value)
    assert key in msg and path in msg and value in msg
    assert ei.value.fields["key"] == key


def test_malformed_xml_names_file(tmp_path):
    path = tmp_path / "core-site.xml"
    path.write_text("<configuration><property><name>x</name>")
    with pytest.raises(ConfigError, match="core-site.xml: not valid XML"):
        Configuration.load(str(tmp_path))


def test_wrong_root_element(tmp_path):
    (tmp_path / "hdfs-site.xml").write_text("<conf/>")
    with pytest.raises(ConfigError, match="expected <configuration>"):
        Configuration.load(str(tmp_path))


def test_missing_conf_dir():
    with pytest.raises(ConfigError, match="does not exist"):
        Configuration.load("/nonexistent/qjournal/conf")


def test_templates_match_by_prefix_and_expand():
    c = Configuration.load(overrides=[
        "dfs.nameservices=mycluster",
        "dfs.ha.namenodes.mycluster=nn1,nn2",
        "dfs.namenode.rpc-address.mycluster.nn1=10.0.0.1:8020",
        "dfs.namenode.http-address.mycluster.nn2=[::1]:9870",
    ])
    assert c.get_list(expand("dfs.ha.namenodes.<ns>", "mycluster")) == ["nn1", "nn2"]
    assert c.get_address(expand("dfs.namenode.rpc-address.<ns>.<nn>", "mycluster", "nn1")) == ("10.0.0.1", 8020)
    assert c.get_address("dfs.namenode.http-address.mycluster.nn2") == ("::1", 9870)
    assert c.get_address("dfs.namenode.rpc-address.mycluster.nn2") is None
    with pytest.raises(ConfigError):  # a template needs exactly its parts
        c.set("dfs.namenode.rpc-address.mycluster", "h:1")
    with pytest.raises(ValueError):
        expand("dfs.namenode.rpc-address.<ns>.<nn>", "a.b", "nn1")


def test_durations_and_sizes():
    c = Configuration()
    for raw, ms in [("250", 250), ("250ms", 250), ("2s", 2000), ("1.5s", 1500), ("3m", 180000),
                    ("1h", 3600000), ("500us", 0), ("1d", 86400000)]:
        c.set("dfs.qjournal.write-txns.timeout.ms", raw)
        assert c.get_duration_ms("dfs.qjournal.write-txns.timeout.ms") == ms, raw
    for raw, n in [("1024", 1024), ("64k", 65536), ("10m", 10 * 2 ** 20), ("1g", 2 ** 30), ("2MB", 2 * 2 ** 20)]:
        c.set("ipc.maximum.data.length", raw)
        assert c.get_bytes("ipc.maximum.data.length") == n, raw


def test_typed_getter_of_wrong_kind_and_unknown_key():
    c = Configuration()
    with pytest.raises(ConfigError, match="is a address"):
        c.get_int("dfs.journalnode.rpc-address")
    with pytest.raises(ConfigError, match="unknown configuration key"):
        c.get("dfs.no.such")


def test_substitution_and_loops():
    c = Configuration.load(overrides=["hadoop.tmp.dir=/data/tmp"])
    assert c.get_list("dfs.namenode.edits.dir") == ["file:///data/tmp/dfs/name"]
    c.set("dfs.nameservices", "${dfs.namenode.shared.edits.dir}")
    c.set("dfs.namenode.shared.edits.dir", "${dfs.nameservices}")
    with pytest.raises(ConfigError, match="substitution deeper"):
        c.get("dfs.nameservices")


def test_substituted_value_is_checked_on_read():
    c = Configuration.load(overrides=["dfs.ha.namenode.id=abc",
                                      "dfs.qjournal.write-txns.timeout.ms=${dfs.ha.namenode.id}"])
    with pytest.raises(ConfigError, match="dfs.qjournal.write-txns.timeout.ms"):
        c.get_duration_ms("dfs.qjournal.write-txns.timeout.ms")


def test_write_xml_round_trip(tmp_path):
    c = Configuration.load(overrides=["dfs.nameservices=ns1", "dfs.ha.namenodes.ns1=nn1,nn2",
                                      "dfs.namenode.shared.edits.dir=qjournal://a:1;b:2;c:3/ns1",
                                      "ha.zookeeper.acl=world:anyone:<rw>&"])
    c.write_xml(str(tmp_path / "hdfs-site.xml"))
    c2 = Configuration.load(str(tmp_path))
    assert c2.items() == c.items()
    assert c2.get("ha.zookeeper.acl") == "world:anyone:<rw>&"


def test_items_sorted_and_defaults_listed():
    c = Configuration.load(overrides=["dfs.nameservices=b", "dfs.ha.namenode.id=a"])
    names = [k for k, _ in c.items()]
    assert names == sorted(names) == ["dfs.ha.namenode.id", "dfs.nameservices"]
    all_names = [k for k, _ in c.items(include_defaults=True)]
    assert all_names == sorted(all_names) and "dfs.journalnode.rpc-address" in all_names


def test_define_refuses_duplicates_and_bad_kinds():
    with pytest.raises(ValueError, match="defined twice"):
        K.define("dfs.nameservices", "")
    with pytest.raises(ValueError, match="unknown kind"):
        K.define("qjournal.test.bad-kind", "", "complex")
    with pytest.raises(ValueError, match="needs unit"):
        K.define("qjournal.test.bad-duration", 1, "duration")


def test_set_none_unsets_and_source_tracks_origin():
    c = Configuration.load(overrides=["dfs.nameservices=ns1"])
    assert c.source("dfs.nameservices") == "-D" and c.is_set("dfs.nameservices")
    c.set("dfs.nameservices", None)
    assert not c.is_set("dfs.nameservices") and c.source("dfs.nameservices") == "default"
    c.set("dfs.journalnode.rpc-address", ("127.0.0.1", 0))
    assert c.get_address("dfs.journalnode.rpc-address") == ("127.0.0.1", 0)
    c.set("ha.zookeeper.quorum", ["a:1", "b:2"])
    assert c.get_list("ha.zookeeper.quorum") == ["a:1", "b:2"] and c.source("ha.zookeeper.quorum") == "set()"


def test_every_key_is_documented_and_its_default_parses():
    from qjournal.config.conf import _parse
    c = Configuration()
    for name, key in K.KEYS.items():
        assert key.doc.strip(), f"{name} has no doc"
        if key.default is not None and not key.is_template:
            raw = c.get_raw(name)  # after ${...} substitution
            _parse(key, name, raw, "default")
