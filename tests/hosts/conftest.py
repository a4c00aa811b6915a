"""The cluster deployed on test hosts by following docs/deploy.md, shared by the hosts tests of a module.

Why one deployment per module: building the wheel, installing it and the first start take about half a
minute; the tests then each do one thing to the running cluster (the rolling restart, the failover), in
file order, in one xdist group. The package is built and installed once per session (:func:`package`):
every later deployment mounts the same ``/opt/qjournal`` (the hosts share one, as docs/deploy.md's test
section says) and starts from the first start's blocks. Unprivileged runs skip with the reason; CI runs
as root.
"""

from __future__ import annotations

import os
import pathlib
import time

import pytest

from qjournal.hosts.cluster import HostCluster
from qjournal.hosts.netns import unavailable_reason

REPO = pathlib.Path(__file__).resolve().parents[2]
DEPLOY_DOC = REPO / "docs" / "deploy.md"
#: the first start, as docs/deploy.md orders it (the blocks without an id are an operator's by hand)
FIRST_START = ["render", "verify-units", "start-zookeeper", "check-zookeeper", "start-journalnodes",
               "format-namenode", "bootstrap-standby", "format-zk", "start-zkfcs", "check-ha", "client-smoke"]


class Package:
    """The session's ``/opt/qjournal``: empty until the first deployment builds and installs into it."""

    def __init__(self, opt_dir: str) -> None:
        self.opt_dir = opt_dir
        self.installed = False


@pytest.fixture(scope="session")
def package(tmp_path_factory) -> Package:
    return Package(str(tmp_path_factory.mktemp("opt-qjournal")))


def deploy(workdir: str, package: Package, extra_hosts: tuple[str, ...] = (), doc_text: str | None = None,
           before_start=None) -> HostCluster:
    """Hosts for the description of docs/deploy.md, the package built and installed, the first start
    done, all by the document's blocks. The caller closes the cluster.

    Args:
        doc_text: docs/deploy.md with another description (the fault tests put ZooKeeper on hosts of
            its own).
        before_start: called with the cluster once the units are installed, before the first start
            (the fault tests' drop-ins).
        package: the session's ``/opt/qjournal``; built and installed by the first deployment only.
    """
    t0 = time.monotonic()
    cluster = HostCluster(workdir, doc_text or DEPLOY_DOC.read_text(),
                          log=lambda s: print(f"{time.monotonic() - t0:7.1f}s {s}"), opt_dir=package.opt_dir)
    try:
        cluster.start(extra_hosts)
        if not package.installed:
            cluster.copy_source(str(REPO))
            cluster.run("build")
            # the hosts share one /opt/qjournal (docs/deploy.md, "How the tests run this page"): install once
            cluster.run("install", hosts=[next(iter(cluster.desc.hosts))])
            package.installed = True
        cluster.copy_description()
        for block in FIRST_START:
            if block == "start-zookeeper" and before_start is not None:
                before_start(cluster)
            cluster.run(block)
    except BaseException:
        cluster.close()
        raise
    print("deployment timings: " + ", ".join(f"{b} {s:.1f}s" for b, s in cluster.timings)
          + f"; total {time.monotonic() - t0:.1f}s")
    return cluster


def deployed(tmp_path_factory, package: Package, name: str):
    """A module's deployment (skipped without root), closed after the module: yield from it in a fixture."""
    why = unavailable_reason()
    if why is not None:
        pytest.skip(f"hosts tests skipped: {why}")
    c = deploy(str(tmp_path_factory.mktemp(name)), package)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, package):
    yield from deployed(tmp_path_factory, package, "hosts")


def heavy() -> bool:
    """The heavier hosts runs (``make hosts-soak``: QJOURNAL_HOSTS_HEAVY=1)."""
    return os.environ.get("QJOURNAL_HOSTS_HEAVY") == "1"
