"""The cluster description, the per-host rendering and the shipped units (pure: no hosts, no root)."""

from __future__ import annotations

import pathlib
import re

import pytest

from qjournal.config.conf import Configuration
from qjournal.deploy import layout
from qjournal.deploy.description import parse_description
from qjournal.deploy.render import DERIVED_KEYS, journal_uri, render_host
from qjournal.deploy.units import ROLE_UNITS, parse_unit, unit_names, unit_text, units_for_roles
from qjournal.errors import ConfigError
from qjournal.hosts.runbook import fenced_block

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "deploy.md"

BASE = """
nameservice = "ns1"
[hosts.jn1]
roles = ["journalnode", "zookeeper"]
zookeeper-id = 1
[hosts.jn2]
roles = ["journalnode", "zookeeper"]
zookeeper-id = 2
[hosts.jn3]
roles = ["journalnode", "zookeeper"]
zookeeper-id = 3
[hosts.nn1]
roles = ["namenode", "zkfc"]
namenode-id = "nn1"
[hosts.nn2]
roles = ["zkfc", "namenode"]
namenode-id = "nn2"
[hosts.c1]
roles = ["client"]
"""


def test_the_example_of_docs_deploy_md_is_a_valid_description():
    desc = parse_description(fenced_block(DOC.read_text(), "toml", "cluster-description", "deploy.md"), "deploy.md")
    for h in desc.hosts:
        render_host(desc, h)
    assert journal_uri(desc) == "qjournal://jn1:8485;jn2:8485;jn3:8485/ns1"


@pytest.mark.parametrize("edit, error", [
    (lambda t: t.replace('roles = ["client"]', 'roles = ["client", "datanode"]'), "unknown roles"),
    (lambda t: t.replace('roles = ["client"]', 'roles = ["zkfc"]'), "beside its NameNode"),
    (lambda t: t.replace('namenode-id = "nn2"', 'namenode-id = "nn1"'), "used by more than one host"),
    (lambda t: t.replace('namenode-id = "nn2"\n', ''), "namenode-id is required"),
    (lambda t: t.replace('[hosts.jn3]\nroles = ["journalnode", "zookeeper"]', '[hosts.jn3]\nroles = ["zookeeper"]'),
     "2 JournalNodes"),
    (lambda t: t.replace('zookeeper-id = 3', 'zookeeper-id = 2'), "zookeeper-id [2] used"),
    (lambda t: t.replace('zookeeper-id = 3\n', ''), "zookeeper-id missing"),
    (lambda t: t.replace('zookeeper-id = 3', 'zookeeper-id = 300'), "1-255"),
    (lambda t: t.replace('[hosts.nn2]\nroles = ["zkfc", "namenode"]\nnamenode-id = "nn2"', ''), "HA needs at least two"),
    (lambda t: t + '[hosts."bad_name"]\nroles = ["client"]\n', "not a host name"),
    (lambda t: t + '[ports]\nnamenode-rpc = 70000\n', "a port number"),
    (lambda t: t + '[ports]\nnfs = 2049\n', "unknown; ports are"),
    (lambda t: 'extra = 1\n' + t, "unknown top-level keys"),
    (lambda t: t.replace("nameservice", "name-service"), "unknown top-level keys"),
    (lambda t: t.replace('zookeeper-id = 1', 'zookeeper-id = 1\nrack = "r1"'), "unknown keys ['rack']"),
    (lambda t: t + "[hosts", "not valid TOML"),
])
def test_a_bad_description_is_refused_with_the_reason(edit, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_description(edit(BASE), "cluster.toml")


def _xml(files: dict, tmp_path: pathlib.Path) -> dict[str, str]:
    """The explicit keys of rendered files, read back by the configuration loader the daemons use."""
    d = tmp_path / f"conf{len(list(tmp_path.iterdir()))}"
    d.mkdir()
    for f, data in files.items():
        (d / f).write_bytes(data)
    return dict(Configuration.load(str(d)).items())


def test_each_host_gets_the_cluster_keys_by_name_and_its_own_keys(tmp_path):
    desc = parse_description(BASE + '[hdfs-site]\n"dfs.ha.tail-edits.period" = "10ms"\n', "c.toml")
    jn = _xml(render_host(desc, "jn2"), tmp_path)
    nn = _xml(render_host(desc, "nn2"), tmp_path)
    client = _xml(render_host(desc, "c1"), tmp_path)
    for conf in (jn, nn, client):
        assert conf["dfs.namenode.shared.edits.dir"] == "qjournal://jn1:8485;jn2:8485;jn3:8485/ns1"
        assert conf["ha.zookeeper.quorum"] == "jn1:2181,jn2:2181,jn3:2181"
        assert conf["dfs.namenode.rpc-address.ns1.nn1"] == "nn1:8020"
        assert conf["dfs.ha.zkfc.rpc-address.ns1.nn2"] == "nn2:8019"
        assert conf["dfs.ha.tail-edits.period"] == "10ms"
        assert "127.0.0.1" not in "".join(conf.values())
    assert jn["dfs.journalnode.rpc-address"] == "jn2:8485" and jn["dfs.journalnode.edits.dir"] == layout.JOURNAL_DIR
    assert "dfs.ha.namenode.id" not in jn
    assert nn["dfs.ha.namenode.id"] == "nn2" and nn["dfs.namenode.name.dir"] == f"file://{layout.NAME_DIR}"
    assert "dfs.journalnode.rpc-address" not in nn and "dfs.ha.namenode.id" not in client


def test_zookeeper_hosts_get_zoo_cfg_and_their_id():
    desc = parse_description(BASE + "[zoo-cfg]\ntickTime = 500\nmaxSessionTimeout = 9000\n", "c.toml")
    files = render_host(desc, "jn3")
    cfg = files["zoo.cfg"].decode()
    assert files["zookeeper-myid"] == b"3\n"
    for line in ("tickTime=500", f"dataDir={layout.ZOOKEEPER_DIR}", "clientPort=2181", "maxSessionTimeout=9000",
                 "server.1=jn1:2888:3888", "server.3=jn3:2888:3888"):
        assert line in cfg.splitlines(), cfg
    assert "zoo.cfg" not in render_host(desc, "nn1")


@pytest.mark.parametrize("table, key", [("hdfs-site", "dfs.namenode.rpc-address.ns1.nn1"),
                                        ("hdfs-site", "dfs.namenode.shared.edits.dir"),
                                        ("core-site", "ha.zookeeper.quorum"),
                                        ("hdfs-site", "dfs.journalnode.edits.dir")])
def test_keys_the_hosts_decide_cannot_be_set_by_hand(table, key):
    desc = parse_description(BASE + f'[{table}]\n"{key}" = "x:1"\n', "c.toml")
    with pytest.raises(ConfigError, match="which the hosts decide"):
        render_host(desc, "c1")


def test_an_unknown_hadoop_key_names_the_description():
    desc = parse_description(BASE + '[hdfs-site]\n"dfs.no.such.key" = "1"\n', "c.toml")
    with pytest.raises(ConfigError, match=r"c.toml .*dfs.no.such.key"):
        render_host(desc, "c1")


def test_an_observer_makes_clients_read_from_it(tmp_path):
    desc = parse_description(BASE + '[hosts.nn3]\nroles = ["observer"]\nnamenode-id = "nn3"\n', "c.toml")
    conf = _xml(render_host(desc, "c1"), tmp_path)
    assert conf["dfs.ha.namenodes.ns1"] == "nn1,nn2,nn3"
    assert conf["dfs.client.failover.proxy.provider.ns1"].endswith("ObserverReadProxyProvider")
    assert units_for_roles(desc.host("nn3").roles) == ["qjournal-observer.service"]


def test_every_role_has_a_shipped_unit_that_uses_the_layout():
    assert sorted(ROLE_UNITS.values()) == unit_names()
    for name in unit_names():
        u = parse_unit(unit_text(name), name)
        assert u.exec_start[:3] == (layout.PROGRAM, "--conf", layout.CONF_DIR), u.exec_start
        assert (u.user, u.group) == (layout.USER, layout.GROUP)
        assert u.restart == "always" and u.limit_nofile == 65536
        assert u.log_file() is not None and u.log_file().startswith(layout.LOG_DIR + "/")
        assert u.environment["QJOURNAL_CONF_DIR"] == layout.CONF_DIR
        assert u.type == ("simple" if "zookeeper" in name else "notify")
        settings = "\n".join(ln for ln in unit_text(name).splitlines() if not ln.startswith("#"))
        paths = set(re.findall(r"(/[a-z][\w/.-]*)", settings))
        allowed = (layout.PREFIX, layout.CONF_DIR, layout.LOG_DIR)
        assert all(p.startswith(allowed) for p in paths), paths
    assert "qjournal-namenode.service" in parse_unit(unit_text("qjournal-zkfc.service"), "z").after


@pytest.mark.parametrize("text, error", [
    ("[Unit]\nDescription=x\n", "no [Service]"),
    ("[Service]\nType=simple\n", "no ExecStart"),
    ("[Service]\nExecStart=/bin/a\nExecStart=/bin/b\n", "2 times"),
    ("[Service]\nExecStart=-/bin/a\n", "prefixes"),
    ("[Service]\nExecStart=/bin/a %i\n", "specifiers"),
    ("[Service]\nExecStart=/bin/a\nLimitNOFILE=infinity\n", "expected a number"),
    ("ExecStart=/bin/a\n", "expected [Section]"),
])
def test_a_unit_the_parser_does_not_model_is_refused(text, error):
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_unit(text, "x.service")


def test_unit_parsing_reads_continuations_and_repeated_environment():
    u = parse_unit("[Unit]\nAfter=a.service b.service\n[Service]\nEnvironment=A=1 \"B=two words\"\n"
                   "Environment=C=3\nExecStart=/bin/prog \\\n  --flag value\nStandardOutput=append:/var/log/x.log\n",
                   "x.service")
    assert u.exec_start == ("/bin/prog", "--flag", "value")
    assert u.environment == {"A": "1", "B": "two words", "C": "3"}
    assert u.after == ("a.service", "b.service") and u.log_file() == "/var/log/x.log"
