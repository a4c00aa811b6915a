"""What an operator's monitoring reads: the Grafana dashboard and the Prometheus alert rules that ship.

Why a package of its own: the dashboard (``grafana-dashboard.json``), the alerting rules (``alerts.yml``), their
unit tests (``alerts_test.yml``) and an example scrape configuration are files an operator installs into
Grafana and Prometheus; they belong to no daemon, and they must name only metric families the daemons really
export. :mod:`qjournal.monitoring.build` generates the dashboard (with Grafana's own foundation SDK) and the rules'
tests; ``tests/monitoring`` checks the shipped files against that generator, against ``promtool`` and against a
live scrape of every role. ``qjournal monitoring`` prints or writes them from an installed package.
"""

from __future__ import annotations

import os

__all__ = ["ARTIFACTS", "artifact_path", "read_artifact"]

#: the shipped files, by the name ``qjournal monitoring`` knows them under
ARTIFACTS = {
    "dashboard": "grafana-dashboard.json",
    "alerts": "alerts.yml",
    "alerts-test": "alerts_test.yml",
    "scrape-config": "prometheus-scrape.yml",
}


def artifact_path(name: str) -> str:
    """The path of a shipped file (a key of :data:`ARTIFACTS`) inside the installed package."""
    return os.path.join(os.path.dirname(__file__), ARTIFACTS[name])


def read_artifact(name: str) -> str:
    """The text of a shipped file (a key of :data:`ARTIFACTS`)."""
    with open(artifact_path(name), encoding="utf-8") as f:
        return f.read()
