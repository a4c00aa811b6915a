"""The monitoring files that ship (``qjournal/monitoring``): current, valid, and each alert tested.

Shows: ``grafana-dashboard.json`` and ``alerts_test.yml`` are exactly what ``qjournal.monitoring.build``
generates (the dashboard with Grafana's foundation SDK); the dashboard loads back into the SDK's model with
a Prometheus query and the data-source variable on every panel; ``promtool check rules`` accepts the rules and
``promtool test rules`` passes a test of every alert firing (and staying silent before and after its fault);
the example scrape configuration passes ``promtool check config``; ``qjournal monitoring`` prints and writes
the files from the installed package. (tests/operations/test_web_ui.py checks every metric they name against a
live scrape of every role.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from qjournal.monitoring import ARTIFACTS, artifact_path, read_artifact
from qjournal.monitoring import build
from qjournal.util.proc import qjournal_argv


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is not installed: run scripts/setup.sh (it installs the Debian package prometheus)")
    return path


def test_generated_files_are_current():
    assert read_artifact("dashboard") == build.dashboard_json(), \
        "grafana-dashboard.json is stale: run python -m qjournal.monitoring.build"
    assert read_artifact("alerts-test") == build.alerts_test_yaml(), \
        "alerts_test.yml is stale: run python -m qjournal.monitoring.build"


def test_dashboard_loads_back_into_grafanas_model():
    from grafana_foundation_sdk.models.dashboard import Dashboard  # noqa: PLC0415

    doc = json.loads(read_artifact("dashboard"))
    model = Dashboard.from_json(doc)
    assert model.uid == "qjournal-overview" and model.title == "qjournal"
    assert [v["name"] for v in doc["templating"]["list"]] == ["datasource"]
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len(panels) == len(build.PANEL_QUERIES)
    for p, (_row, title, kind, unit, queries, _desc) in zip(panels, build.PANEL_QUERIES):
        assert (p["title"], p["type"]) == (title, kind)
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert [t["expr"] for t in p["targets"]] == [q for q, _ in queries]
        assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"])
        assert p["fieldConfig"]["defaults"]["unit"] == unit
    rows = [p["title"] for p in doc["panels"] if p["type"] == "row"]
    assert rows == list(dict.fromkeys(r for r, *_ in build.PANEL_QUERIES))


def test_promtool_checks_the_rules_and_the_scrape_config():
    r = subprocess.run([promtool(), "check", "rules", artifact_path("alerts")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([promtool(), "check", "config", artifact_path("scrape-config")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_fires_and_clears_under_promtool(tmp_path):
    rules = {r["alert"] for g in yaml.safe_load(read_artifact("alerts"))["groups"] for r in g["rules"]}
    tests = yaml.safe_load(read_artifact("alerts-test"))["tests"]
    tested = {}
    for t in tests:
        for check in t["alert_rule_test"]:
            tested.setdefault(check["alertname"], []).append(bool(check["exp_alerts"]))
    assert set(tested) == rules, f"alerts without a test: {sorted(rules - set(tested))}"
    for name, outcomes in tested.items():
        assert outcomes[0] is False and outcomes[-1] is False and True in outcomes, (name, outcomes)
    r = subprocess.run([promtool(), "test", "rules", ARTIFACTS["alerts-test"]], cwd=os.path.dirname(
        artifact_path("alerts")), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr


def test_a_broken_rule_fails_its_test(tmp_path):
    """The tests can fail: an alert whose threshold moved no longer fires where its test says it must."""
    broken = read_artifact("alerts").replace("qjournal_journalnode_sync_conflicts > 0",
                                             "qjournal_journalnode_sync_conflicts > 5")
    assert broken != read_artifact("alerts")
    (tmp_path / ARTIFACTS["alerts"]).write_text(broken)
    (tmp_path / ARTIFACTS["alerts-test"]).write_text(read_artifact("alerts-test"))
    r = subprocess.run([promtool(), "test", "rules", ARTIFACTS["alerts-test"]], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0 and "QJournalSyncConflict" in r.stdout + r.stderr


def test_cli_prints_and_writes_the_files(tmp_path):
    r = subprocess.run(qjournal_argv("monitoring", "alerts"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout == read_artifact("alerts")
    r = subprocess.run(qjournal_argv("monitoring", "write", "--dir", str(tmp_path / "m")), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path / "m")) == sorted(ARTIFACTS.values())
    r = subprocess.run([promtool(), "test", "rules", ARTIFACTS["alerts-test"]], cwd=tmp_path / "m",
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run(qjournal_argv("monitoring", "write"), capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--dir" in r.stderr
