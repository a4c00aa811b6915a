"""Generates the shipped monitoring files: the Grafana dashboard and the unit tests of the alert rules.

Why generated: the dashboard is built with Grafana's own foundation SDK (``grafana-foundation-sdk`` from PyPI,
a development dependency), so its JSON is what Grafana's schema says it is; and a ``promtool`` unit test must
repeat each alert's rendered annotations, which are generated here from ``alerts.yml`` instead of being
copied by hand. ``python -m qjournal.monitoring.build`` rewrites ``grafana-dashboard.json`` and
``alerts_test.yml`` beside this module; ``tests/monitoring`` fails when the shipped files differ from what
this module generates, so neither can drift from its source.

The alert cases (:data:`ALERT_CASES`) follow one timeline per alert: healthy for two minutes, then the fault
for the alert's ``for`` plus ten minutes, then healthy again. Each case checks that the alert is silent before
the fault, still silent (pending) half a minute before the fault has lasted its ``for``, firing once it has,
and silent again after the fault healed.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from qjournal.monitoring import ARTIFACTS, artifact_path

__all__ = ["build_dashboard", "dashboard_json", "alerts_test_yaml", "ALERT_CASES", "PANEL_QUERIES", "main"]

#: scrape interval of the alert tests (and of the example scrape configuration)
INTERVAL_S = 15
HEALTHY_SAMPLES = 9          # 0 s .. 2 m
SETTLE_S = 5 * 60            # how long after the fault's start + ``for`` the firing check runs


@dataclass(frozen=True)
class AlertCase:
    """One alert's promtool test: series as (labels, healthy value, faulty value or a counter step)."""

    alert: str
    #: ``(series selector, healthy value, faulty value)``; a value of the form ``"+N"`` is a counter
    #: increasing by N per sample while the fault lasts
    series: tuple[tuple[str, str, str], ...]
    #: labels of the firing alert besides ``alertname`` and ``severity``
    labels: dict[str, str] = field(default_factory=dict)
    #: ``$value`` as the firing alert renders it
    value: str = ""
    #: extra time after the fault healed before the alert must be silent (a range vector still sees it)
    clear_after_s: int = 60


def _jn(i: int) -> str:
    return f'instance="jn{i}:8480",job="qjournal-journalnode"'


def _nn(i: int) -> str:
    return f'instance="nn{i}:9870",job="qjournal-namenode"'


def _zk(i: int) -> str:
    return f'instance="nn{i}:8021",job="qjournal-zkfc"'


NN1 = {"instance": "nn1:9870", "job": "qjournal-namenode"}
JN1 = {"instance": "jn1:8480", "job": "qjournal-journalnode"}
ZK1 = {"instance": "nn1:8021", "job": "qjournal-zkfc"}
QJM = "qjournal://jn1:8485;jn2:8485;jn3:8485/ns1"

#: one case per alert of alerts.yml (tests/monitoring checks that every alert has one)
ALERT_CASES: tuple[AlertCase, ...] = (
    AlertCase("QJournalNoActiveNameNode", (
        (f'qjournal_namenode_ha_state{{{_nn(1)},state="active"}}', "1", "0"),
        (f'qjournal_namenode_ha_state{{{_nn(2)},state="active"}}', "0", "0"))),
    AlertCase("QJournalSeveralActiveNameNodes", (
        (f'qjournal_namenode_ha_state{{{_nn(1)},state="active"}}', "1", "1"),
        (f'qjournal_namenode_ha_state{{{_nn(2)},state="active"}}', "0", "1")), value="2"),
    AlertCase("QJournalNameNodeDown", ((f"up{{{_nn(1)}}}", "1", "0"), (f"up{{{_nn(2)}}}", "1", "1")),
              labels=NN1),
    AlertCase("QJournalFailoverControllerOutOfElection", (
        (f"qjournal_zkfc_in_election{{{_zk(1)}}}", "1", "0"),
        (f'qjournal_zkfc_health_state{{{_zk(1)},state="SERVICE_HEALTHY"}}', "1", "1"),
        (f"qjournal_zkfc_local_observer{{{_zk(1)}}}", "0", "0"),
        # an observer's controller is out of the election by design: never an alert
        (f"qjournal_zkfc_in_election{{{_zk(3)}}}", "0", "0"),
        (f'qjournal_zkfc_health_state{{{_zk(3)},state="SERVICE_HEALTHY"}}', "1", "1"),
        (f"qjournal_zkfc_local_observer{{{_zk(3)}}}", "1", "1")), labels=ZK1),
    AlertCase("QJournalNameNodeUnhealthy", (
        (f'qjournal_zkfc_health_state{{{_zk(1)},state="SERVICE_NOT_RESPONDING"}}', "0", "1"),),
              labels={**ZK1, "state": "SERVICE_NOT_RESPONDING"}),
    AlertCase("QJournalFailoverControllerDown", (
        (f"qjournal_zkfc_failed{{{_zk(1)}}}", "0", "1"), (f"up{{{_zk(1)}}}", "1", "1")), labels=ZK1),
    AlertCase("QJournalFailoverControllerZooKeeperLost", (
        (f"qjournal_zkfc_zookeeper_connected{{{_zk(1)}}}", "1", "0"),), labels=ZK1),
    AlertCase("QJournalJournalNodeDown", tuple((f"up{{{_jn(i)}}}", "1", "0" if i == 1 else "1") for i in (1, 2, 3)),
              labels=JN1),
    AlertCase("QJournalJournalQuorumLost",
              tuple((f"up{{{_jn(i)}}}", "1", "1" if i == 3 else "0") for i in (1, 2, 3))),
    AlertCase("QJournalJournalNodeOutOfSync", (
        (f'qjournal_namenode_journal_node_out_of_sync{{{_nn(1)},journal="{QJM}",journal_node="jn2:8485"}}', "0",
         "1"),), labels={**NN1, "journal": QJM, "journal_node": "jn2:8485"}),
    AlertCase("QJournalJournalNodeLagging", (
        (f'qjournal_namenode_journal_node_lag_txns{{{_nn(1)},journal="{QJM}",journal_node="jn2:8485"}}', "0",
         "25000"),), labels={**NN1, "journal": QJM, "journal_node": "jn2:8485"}, value="25000"),
    AlertCase("QJournalJournalNodeRejoining", (
        (f'qjournal_journalnode_rejoining{{{_jn(1)},jid="ns1"}}', "0", "1"),), labels={**JN1, "jid": "ns1"}),
    AlertCase("QJournalUnderReplicatedSegments", (
        (f'qjournal_journalnode_under_replicated_segments{{{_jn(1)},jid="ns1"}}', "0", "4"),),
              labels={**JN1, "jid": "ns1"}, value="4"),
    AlertCase("QJournalSyncConflict", (
        (f'qjournal_journalnode_sync_conflicts{{{_jn(1)},jid="ns1"}}', "0", "1"),), labels={**JN1, "jid": "ns1"}),
    AlertCase("QJournalSyncerFailing", (
        (f'qjournal_journalnode_syncer_rounds_failed_total{{{_jn(1)},jid="ns1"}}', "0", "+1"),),
              labels={**JN1, "jid": "ns1"}, clear_after_s=20 * 60),
    AlertCase("QJournalStandbyLagging", (
        (f'qjournal_namenode_last_written_txid{{{_nn(1)}}}', "1000", "500000"),
        (f'qjournal_namenode_ha_state{{{_nn(1)},state="active"}}', "1", "1"),
        (f'qjournal_namenode_last_written_txid{{{_nn(2)}}}', "1000", "1000"),
        (f'qjournal_namenode_ha_state{{{_nn(2)},state="standby"}}', "1", "1"),
        (f'qjournal_namenode_ha_state{{{_nn(2)},state="active"}}', "0", "0")),
              labels={"instance": "nn2:9870", "job": "qjournal-namenode"}, value="499000"),
    AlertCase("QJournalNameNodeInSafeMode", (
        (f"qjournal_namenode_safe_mode{{{_nn(1)}}}", "0", "1"),
        (f'qjournal_namenode_ha_state{{{_nn(1)},state="active"}}', "1", "1"),
        # a standby in safe mode refuses nothing: never an alert
        (f"qjournal_namenode_safe_mode{{{_nn(2)}}}", "1", "1"),
        (f'qjournal_namenode_ha_state{{{_nn(2)},state="active"}}', "0", "0")), labels=NN1),
    AlertCase("QJournalLocalEditsDirFailed", (
        (f'qjournal_namenode_journal_healthy{{{_nn(1)},journal="file:///data/edits",required="false"}}', "1", "0"),
        (f'qjournal_namenode_journal_healthy{{{_nn(1)},journal="{QJM}",required="true"}}', "1", "1")),
              labels={**NN1, "journal": "file:///data/edits", "required": "false"}),
    AlertCase("QJournalDiskNearlyFull", (
        (f"qjournal_journalnode_disk_free_bytes{{{_jn(1)}}}", "50000000000", "4000000000"),
        (f"qjournal_journalnode_disk_size_bytes{{{_jn(1)}}}", "100000000000", "100000000000")), labels=JN1),
)


def _load_rules() -> dict[str, dict]:
    import yaml  # noqa: PLC0415 - a development dependency, as the SDK

    with open(artifact_path("alerts"), encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return {r["alert"]: r for g in doc["groups"] for r in g["rules"] if "alert" in r}


def _duration_s(text: str) -> int:
    m = re.fullmatch(r"(\d+)([smh])", str(text))
    if m is None:
        raise ValueError(f"alerts.yml: unsupported duration {text!r} (use <n>s, <n>m or <n>h)")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)]


def _render(template: str, labels: dict[str, str], value: str) -> str:
    """The two template forms the rules use: ``{{ $labels.<name> }}`` and ``{{ $value }}``."""
    out = re.sub(r"\{\{\s*\$labels\.(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)
    out = re.sub(r"\{\{\s*\$value\s*\}\}", value, out)
    if "{{" in out:
        raise ValueError(f"alerts.yml: a template form the test generator does not render: {template!r}")
    return out


def _values(healthy: str, faulty: str, fault_samples: int, after_samples: int) -> str:
    if faulty.startswith("+"):
        step = int(faulty[1:])
        top = int(healthy) + step * fault_samples
        return (f"{healthy}x{HEALTHY_SAMPLES - 1} {int(healthy) + step}+{step}x{fault_samples - 1} "
                f"{top}x{after_samples}")
    return f"{healthy}x{HEALTHY_SAMPLES - 1} {faulty}x{fault_samples - 1} {healthy}x{after_samples}"


def _minutes(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def alerts_test_yaml() -> str:
    """The text of ``alerts_test.yml``: one promtool test group per :data:`ALERT_CASES` entry."""
    rules = _load_rules()
    tests = []
    for case in ALERT_CASES:
        rule = rules[case.alert]
        hold_s = _duration_s(rule.get("for", "0s"))
        fault_start_s = HEALTHY_SAMPLES * INTERVAL_S
        fault_s = hold_s + 10 * 60
        fault_samples = fault_s // INTERVAL_S
        fire_at = fault_start_s + hold_s + SETTLE_S
        clear_at = fault_start_s + fault_s + case.clear_after_s
        after_samples = (clear_at - fault_start_s - fault_s) // INTERVAL_S + 8
        labels = {**case.labels, "severity": rule["labels"]["severity"]}
        annotations = {k: _render(v, labels, case.value) for k, v in sorted(rule["annotations"].items())}
        tests.append({
            "interval": f"{INTERVAL_S}s",
            "input_series": [{"series": s, "values": _values(h, f, fault_samples, after_samples)}
                             for s, h, f in case.series],
            "alert_rule_test": [
                {"eval_time": "1m", "alertname": case.alert, "exp_alerts": []},
                # the fault has not lasted the rule's ``for`` yet: pending, not firing
                *([{"eval_time": _minutes(fault_start_s + hold_s - 30), "alertname": case.alert, "exp_alerts": []}]
                  if hold_s >= 60 else []),
                {"eval_time": _minutes(fire_at), "alertname": case.alert,
                 "exp_alerts": [{"exp_labels": dict(sorted(labels.items())), "exp_annotations": annotations}]},
                {"eval_time": _minutes(clear_at), "alertname": case.alert, "exp_alerts": []},
            ],
        })
    head = ("# Unit tests of alerts.yml: `promtool test rules alerts_test.yml` (beside alerts.yml).\n"
            "# Generated by `python -m qjournal.monitoring.build` from its ALERT_CASES; do not edit by hand.\n")
    body = {"rule_files": [ARTIFACTS["alerts"]], "evaluation_interval": f"{INTERVAL_S}s", "tests": tests}
    import yaml  # noqa: PLC0415 - a development dependency, as the SDK

    return head + yaml.safe_dump(body, sort_keys=False, width=120, default_flow_style=False)


# --- the dashboard ------------------------------------------------------------------------------------

#: (row, panel title, kind, unit, [(PromQL, legend)], description); every metric a query names must be
#: exported by a daemon (tests/monitoring scrapes them)
PANEL_QUERIES: tuple[tuple[str, str, str, str, tuple[tuple[str, str], ...], str], ...] = (
    ("High availability", "Active NameNodes", "stat", "none",
     (('sum(qjournal_namenode_ha_state{state="active"})', "active"),),
     "NameNodes reporting the active state: exactly 1 is healthy (QJournalNoActiveNameNode)."),
    ("High availability", "HA state of each NameNode", "timeseries", "none",
     (("max by (instance, state) (qjournal_namenode_ha_state) > 0", "{{instance}} {{state}}"),),
     "1 for the state each NameNode reports (active, standby, observer, initializing, stopping)."),
    ("High availability", "Controllers in the election", "stat", "none",
     (("sum(qjournal_zkfc_in_election)", "in election"),),
     "Failover controllers competing for the active role (QJournalFailoverControllerOutOfElection)."),
    ("High availability", "Health seen by each controller", "timeseries", "none",
     (("max by (instance, state) (qjournal_zkfc_health_state) > 0", "{{instance}} {{state}}"),
      ("qjournal_zkfc_zookeeper_connected", "{{instance}} ZooKeeper connected")),
     "The HealthMonitor's state of each NameNode, and each controller's ZooKeeper session."),
    ("High availability", "Failovers", "timeseries", "none",
     (("increase(qjournal_zkfc_transitions_to_active_total[$__rate_interval])", "{{instance}} became active"),
      ("increase(qjournal_zkfc_old_actives_fenced_total[$__rate_interval])", "{{instance}} fenced an old active")),
     "Transitions to active made by each controller, and the old actives it fenced."),
    ("Namespace", "Files and directories", "timeseries", "short",
     (("qjournal_namenode_files", "{{instance}}"),), "FSNamesystem FilesTotal of each NameNode."),
    ("Namespace", "Transactions per second", "timeseries", "ops",
     (("rate(qjournal_namenode_editlog_txns_synced_total[$__rate_interval])", "{{instance}} txns"),
      ("rate(qjournal_namenode_editlog_syncs_total[$__rate_interval])", "{{instance}} syncs")),
     "Edits made durable on the journal by the active, and the syncs (group commits) that carried them."),
    ("Namespace", "RPC calls", "timeseries", "reqps",
     (("rate(qjournal_namenode_rpc_calls_total[$__rate_interval])", "{{instance}} calls"),
      ("rate(qjournal_namenode_rpc_call_errors_total[$__rate_interval])", "{{instance}} errors")),
     "Client protocol calls received, and those answered with an error (refusals included)."),
    ("Namespace", "Standby and observer lag", "timeseries", "short",
     (('scalar(max(qjournal_namenode_last_written_txid and on(instance, job) '
       'qjournal_namenode_ha_state{state="active"} == 1)) - (qjournal_namenode_last_written_txid and on(instance, '
       'job) qjournal_namenode_ha_state{state=~"standby|observer"} == 1)', "{{instance}}"),),
     "Transactions each standby and observer trails the active by (QJournalStandbyLagging)."),
    ("Namespace", "Transactions since the last checkpoint", "timeseries", "short",
     (("qjournal_namenode_txns_since_last_checkpoint", "{{instance}}"),),
     "What a restart of each NameNode would replay (dfs.namenode.checkpoint.txns bounds it)."),
    ("Namespace", "Retry cache", "timeseries", "short",
     (("qjournal_namenode_retry_cache_entries", "{{instance}} entries"),
      ("rate(qjournal_namenode_retry_cache_hits_total[$__rate_interval])", "{{instance}} hits/s")),
     "Entries held, and retried calls answered from the cache."),
    ("Namespace", "Safe mode", "timeseries", "none",
     (("qjournal_namenode_safe_mode", "{{instance}}"),), "1 while a NameNode refuses writes (QJournalNameNodeInSafeMode)."),
    ("Journal", "JournalNode lag (active's view)", "timeseries", "short",
     (("qjournal_namenode_journal_node_lag_txns", "{{journal_node}}"),),
     "How far each JournalNode's acknowledged txid trails the committed txid (QJournalJournalNodeLagging)."),
    ("Journal", "JournalNodes out of sync", "timeseries", "none",
     (("qjournal_namenode_journal_node_out_of_sync", "{{journal_node}}"),),
     "1 while the writer skips a JournalNode until the next segment (QJournalJournalNodeOutOfSync)."),
    ("Journal", "Edits queued for each JournalNode", "timeseries", "bytes",
     (("qjournal_namenode_journal_node_queued_bytes", "{{journal_node}}"),),
     "Bytes sent to a JournalNode and not yet acknowledged (dfs.qjournal.queued-edits.limit.mb bounds it)."),
    ("Journal", "fsync latency p99 (last minute)", "timeseries", "s",
     (('qjournal_journalnode_sync_duration_seconds{window="60s",percentile="99"}', "{{instance}} {{jid}}"),),
     "The 99th percentile of each JournalNode's batch fsync over a sliding minute (Hadoop's Syncs60s)."),
    ("Journal", "Transactions written", "timeseries", "ops",
     (("rate(qjournal_journalnode_txns_written_total[$__rate_interval])", "{{instance}} {{jid}}"),),
     "Transactions each JournalNode wrote per second."),
    ("Journal", "Edit cache (in-progress tailing)", "timeseries", "bytes",
     (("qjournal_journalnode_edit_cache_bytes", "{{instance}} {{jid}} cached"),
      ("rate(qjournal_journalnode_txns_served_via_rpc_total[$__rate_interval])", "{{instance}} {{jid}} served/s")),
     "Bytes held by each JournalNode's edit cache, and transactions it served to tailing NameNodes."),
    ("Journal", "Under-replicated segments and conflicts", "timeseries", "short",
     (("qjournal_journalnode_under_replicated_segments", "{{instance}} {{jid}} under-replicated"),
      ("qjournal_journalnode_sync_conflicts", "{{instance}} {{jid}} conflicts")),
     "Finalized segments missing on some JournalNode, and copies that differ (QJournalSyncConflict)."),
    ("Journal", "JournalNodeSyncer", "timeseries", "short",
     (("increase(qjournal_journalnode_syncer_segments_synced_total[$__rate_interval])", "{{instance}} copied"),
      ("increase(qjournal_journalnode_syncer_rounds_failed_total[$__rate_interval])", "{{instance}} failed rounds")),
     "Segments each JournalNode copied from its peers, and its failed rounds (QJournalSyncerFailing)."),
    ("Journal", "Epochs", "timeseries", "none",
     (("qjournal_journalnode_last_promised_epoch", "{{instance}} promised"),
      ("qjournal_journalnode_last_writer_epoch", "{{instance}} writer")),
     "Each JournalNode's promised and writer epochs: a step is a new writer (a failover)."),
    ("Disks", "Free space of the journal disks", "timeseries", "percentunit",
     (("qjournal_journalnode_disk_free_bytes / qjournal_journalnode_disk_size_bytes", "{{instance}}"),
      ("qjournal_namenode_disk_free_bytes / qjournal_namenode_disk_size_bytes", "{{instance}} {{dir}}")),
     "Free share of each JournalNode's edits directory and each NameNode's name and edits directories "
     "(QJournalDiskNearlyFull below 10%)."),
)


def build_dashboard() -> Any:
    """The dashboard as the SDK's builder (``.build()`` gives the model)."""
    from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, Row  # noqa: PLC0415
    from grafana_foundation_sdk.builders.prometheus import Dataquery  # noqa: PLC0415
    from grafana_foundation_sdk.builders.stat import Panel as Stat  # noqa: PLC0415
    from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries  # noqa: PLC0415
    from grafana_foundation_sdk.models.dashboard import DataSourceRef  # noqa: PLC0415

    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    board = (Dashboard("qjournal")
             .uid("qjournal-overview")
             .description("A qjournal cluster: NameNode HA, the quorum journal, the JournalNodes and their disks. "
                          "Shipped with the package (qjournal monitoring dashboard); its alerts: alerts.yml.")
             .tags(["qjournal", "hdfs", "journal"])
             .refresh("30s")
             .time("now-1h", "now")
             .timezone("browser")
             .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus")))
    row = None
    for row_title, title, kind, unit, queries, description in PANEL_QUERIES:
        if row_title != row:
            board = board.with_row(Row(row_title))
            row = row_title
        panel = (Stat() if kind == "stat" else Timeseries()).title(title).description(description) \
            .unit(unit).datasource(ds).height(7).span(6 if kind == "stat" else 9)
        for i, (expr, legend) in enumerate(queries):
            panel = panel.with_target(Dataquery().expr(expr).legend_format(legend).ref_id(chr(ord("A") + i))
                                      .datasource(ds))
        board = board.with_panel(panel)
    return board


def dashboard_json() -> str:
    """The text of ``grafana-dashboard.json``."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: PLC0415

    return json.dumps(build_dashboard().build(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the generated files beside this module (``--check``: only say whether they are current)."""
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    stale = []
    for name, text in (("dashboard", dashboard_json()), ("alerts-test", alerts_test_yaml())):
        path = artifact_path(name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:
            stale.append(path)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
    for path in stale:
        print(f"{'stale' if check else 'wrote'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
