"""Every daemon's ``/metrics`` passes ``promtool check metrics`` and its ``/jmx`` keeps Hadoop's bean names.

Real processes: three JournalNodes, an active, a standby and an observer NameNode (ZKFC and ZooKeeper
serve no HTTP, so they are not started). A little traffic (writes on the active, a read on the observer,
one refused call) makes the counters and the labelled series non-empty; then each ``/metrics`` is piped
to Prometheus's own linter, and the test fails on any error and on any lint warning it prints (a counter
without ``_total``, a missing HELP, a non-base unit, ...). The same daemons' ``/jmx`` answers are checked
against Hadoop's bean names and attribute names (``JournalMetrics``, ``JournalNodeMXBean``,
``NameNodeStatusMXBean``, ``FSNamesystem``, ``NameNodeMXBean``), which dashboards built for HDFS read.

``promtool`` comes from the Debian package ``prometheus`` that ``scripts/setup.sh`` installs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.namenode.procs import Cluster
from qjournal.util.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

JID = "ns1"
SU = ["dfs", "++user", "hdfs", "++groups", "supergroup"]

#: Hadoop's attribute names per bean (a subset each daemon must keep; extra attributes are allowed)
JN_JOURNAL_ATTRS = {
    "tag.JournalId", "BatchesWritten", "BatchesWrittenWhileLagging", "TxnsWritten", "BytesWritten",
    "NumEditLogsSynced", "LastWriterEpoch", "LastPromisedEpoch", "LastWrittenTxId", "CurrentLagTxns",
    "LastJournalTimestamp", "TxnsServedViaRpc", "BytesServedViaRpc", "RpcEmptyResponses",
    "RpcRequestCacheMissAmountNumMisses", "RpcRequestCacheMissAmountAvgTxns",
    *(f"Syncs{w}s{q}" for w in (60, 300, 3600)
      for q in ("NumOps", *(f"{p}thPercentileLatencyMicros" for p in (50, 75, 90, 95, 99)))),
}
JN_INFO_ATTRS = {"JournalsStatus", "HostAndPort", "JNStartedTimeInMillis"}
NN_BEAN_ATTRS = {
    "NameNodeStatus": {"State", "NNRole", "HostAndPort", "SecurityEnabled", "LastHATransitionTime"},
    "FSNamesystem": {"tag.Context", "tag.HAState", "tag.Hostname", "FilesTotal", "LastWrittenTransactionId",
                     "TransactionsSinceLastCheckpoint", "TransactionsSinceLastLogRoll", "LastCheckpointTime"},
    "NameNodeInfo": {"ClusterId", "JournalTransactionInfo", "NameJournalStatus", "NameDirStatuses", "Version"},
    "NameNodeActivity": {"TransactionsNumOps", "SyncsNumOps"},
}


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback test URL
        assert r.status == 200, url
        return r.read().decode()


def applied_txid(nn_url: str) -> int:
    bean = json.loads(get(nn_url + "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystem"))["beans"][0]
    return bean["LastWrittenTransactionId"]


def promtool_problems(text: str) -> str:
    """What ``promtool check metrics`` says about ``text`` ('' when it has nothing to say)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed: run scripts/setup.sh (it installs the Debian package prometheus)")
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    said = (r.stdout + r.stderr).strip()
    if r.returncode != 0 and not said:
        said = f"promtool exited {r.returncode}"
    return said


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("metrics")
    t = str(tmp)
    c = Cluster(tmp)
    try:
        jns = [c.start(f"jn{i}", "journalnode", "--edits-dir", f"{t}/jn{i}", "--rpc-address", "127.0.0.1:0",
                       "--http-address", "127.0.0.1:0") for i in (1, 2, 3)]
        nn_ids = ["nn1", "nn2", "nn3"]
        c.common.update({
            "dfs.nameservices": "ns1", "dfs.ha.namenodes.ns1": ",".join(nn_ids),
            "dfs.namenode.shared.edits.dir": "qjournal://" + ";".join(j.ready["rpc"] for j in jns) + f"/{JID}",
            "dfs.ha.tail-edits.period": "50ms", "dfs.ha.log-roll.period": "0",
            "qjournal.namenode.superuser": "hdfs", "dfs.client.failover.sleep.base.millis": "10",
            **{f"dfs.namenode.rpc-address.ns1.{nn}": "127.0.0.1:1" for nn in nn_ids},
        })
        nns = {}
        for nn in nn_ids:
            extra = {"dfs.namenode.name.dir": f"file://{t}/{nn}"}
            if nn == "nn1":
                c.run("namenode", "-format", "-clusterid", "CID-metrics", extra=extra)
            else:
                c.run("namenode", "-bootstrapStandby", "--nn-id", nn, extra=extra)
            nns[nn] = c.start(nn, "namenode", "--nn-id", nn, "--rpc-address", "127.0.0.1:0", extra=extra)
            c.common[f"dfs.namenode.rpc-address.ns1.{nn}"] = nns[nn].ready["rpc"]
        c.run("haadmin", "-transitionToActive", "nn1")
        c.run("haadmin", "-transitionToObserver", "nn3")
        # traffic: writes on the active, a refused call, a read on the observer
        c.run(*SU, "-mkdir", "-p", "/m/a", "/m/b")
        c.run(*SU, "-touchz", "/m/a/f")
        assert c.run("dfs", "++user", "bob", "-mkdir", "/m/a/x", check=False).returncode == 1
        c.run(*SU, "-ls", "/m", extra={"dfs.client.failover.proxy.provider.ns1":
                                        "org.apache.hadoop.hdfs.server.namenode.ha.ObserverReadProxyProvider"})
        urls = SimpleNamespace(jn_urls={f"jn{i}": f"http://{j.ready['http']}" for i, j in enumerate(jns, 1)},
                               nn_urls={nn: d.ready["http_url"] for nn, d in nns.items()})
        last = applied_txid(urls.nn_urls["nn1"])
        for nn in ("nn2", "nn3"):
            wait_until(lambda nn=nn: applied_txid(urls.nn_urls[nn]) >= last, f"{nn} applied txid {last}")
        yield urls
    finally:
        c.close()


def test_every_metrics_page_passes_promtool(cluster):
    problems = {}
    for name, url in {**cluster.jn_urls, **cluster.nn_urls}.items():
        text = get(url + "/metrics")
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert fams, f"{name}: empty /metrics"
        # labelled series are present (an empty family would lint clean but show nothing)
        for f in fams.values():
            if f.type in ("counter", "gauge"):
                assert f.samples, f"{name}: {f.name} has no sample"
        said = promtool_problems(text)
        if said:
            problems[name] = said
    assert not problems, "promtool check metrics:\n" + "\n".join(f"--- {n}\n{p}" for n, p in problems.items())


def test_metrics_count_the_traffic(cluster):
    for name, url in cluster.jn_urls.items():
        fams = {f.name: f for f in text_string_to_metric_families(get(url + "/metrics"))}
        written = {s.labels["jid"]: s.value for s in fams["qjournal_journalnode_txns_written"].samples
                   if s.name.endswith("_total")}
        assert written.get(JID, 0) > 0, f"{name}: {written}"
        p99 = [s.value for s in fams["qjournal_journalnode_sync_duration_seconds"].samples
               if s.labels == {"jid": JID, "window": "3600s", "percentile": "99"}]
        bean = json.loads(get(url + f"/jmx?qry=Hadoop:service=JournalNode,name=Journal-{JID}"))["beans"][0]
        micros = bean["Syncs3600s99thPercentileLatencyMicros"]   # (no writes after the fixture's traffic)
        assert p99 and p99[0] > 0 and p99[0] == pytest.approx(micros / 1e6), f"{name}: {p99} s, {micros} µs"
    fams = {f.name: f for f in text_string_to_metric_families(get(cluster.nn_urls["nn1"] + "/metrics"))}
    assert fams["qjournal_namenode_rpc_calls"].samples[0].value > 0
    assert fams["qjournal_namenode_rpc_call_errors"].samples[0].value >= 1
    for nn, state in (("nn1", "active"), ("nn2", "standby"), ("nn3", "observer")):
        fams = {f.name: f for f in text_string_to_metric_families(get(cluster.nn_urls[nn] + "/metrics"))}
        states = {s.labels["state"]: s.value for s in fams["qjournal_namenode_ha_state"].samples}
        assert states[state] == 1.0 and sum(states.values()) == 1.0, (nn, states)


def test_jmx_keeps_hadoop_bean_and_attribute_names(cluster):
    for name, url in cluster.jn_urls.items():
        beans = {b["name"]: b for b in json.loads(get(url + "/jmx"))["beans"]}
        info = beans["Hadoop:service=JournalNode,name=JournalNodeInfo"]
        assert JN_INFO_ATTRS <= set(info), (name, JN_INFO_ATTRS - set(info))
        assert json.loads(info["JournalsStatus"]) == {JID: {"Formatted": "true"}}
        journal = beans[f"Hadoop:service=JournalNode,name=Journal-{JID}"]
        assert JN_JOURNAL_ATTRS <= set(journal), (name, sorted(JN_JOURNAL_ATTRS - set(journal)))
        assert journal["tag.JournalId"] == JID and journal["TxnsWritten"] > 0 and journal["LastWriterEpoch"] >= 1
    for nn, state in (("nn1", "active"), ("nn2", "standby"), ("nn3", "observer")):
        beans = {b["name"]: b for b in json.loads(get(cluster.nn_urls[nn] + "/jmx"))["beans"]}
        for bean, attrs in NN_BEAN_ATTRS.items():
            got = beans[f"Hadoop:service=NameNode,name={bean}"]
            assert attrs <= set(got), (nn, bean, sorted(attrs - set(got)))
        assert beans["Hadoop:service=NameNode,name=NameNodeStatus"]["State"] == state
        assert beans["Hadoop:service=NameNode,name=FSNamesystem"]["tag.HAState"] == state
        assert beans["Hadoop:service=NameNode,name=NameNodeInfo"]["ClusterId"] == "CID-metrics"
