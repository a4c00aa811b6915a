"""The NameNode's web UI in headless Chromium, and the shipped monitoring files against a live cluster.

Real processes (``LocalCluster``: ZooKeeper, three JournalNodes, an active and a standby NameNode with their
ZKFCs, an observer), a real browser (Debian's chromium through Playwright). Shows:

* the overview of the active names its HA state, the three NameNodes with theirs (active, standby, observer),
  the journal and each JournalNode in sync, with JavaScript and without;
* "Browse the file system" lists a directory with Hadoop's columns exactly as ``qjournal dfs -ls`` does, a click
  on a directory (and on a breadcrumb, and the path box) shows that directory, the column heads sort, and a
  directory larger than ``dfs.ls.limit`` is paged (LISTSTATUS_BATCH), with JavaScript (no reload) and without
  (plain links and a GET form);
* every metric family that the Grafana dashboard and the alert rules name is exported by a live daemon.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import urllib.error
import urllib.request

import pytest

from qjournal.config import Configuration
from qjournal.localcluster.launcher import LocalCluster
from qjournal.monitoring import build as monitoring_build
from qjournal.monitoring import read_artifact
from qjournal.namenode.dfs_client import DFSClient
from qjournal.util.proc import qjournal_argv

from qjournal.util.waiting import wait_until
from .browser import chromium, screenshot

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

LS_LIMIT = 4
HOME = "/user/hdfs"
MANY = 10  # entries of HOME/many: three pages of LS_LIMIT


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("webui") / "cluster")
    c = LocalCluster(run_dir, observers=1, extra_conf={"dfs.ls.limit": str(LS_LIMIT)}, out=lambda s: None)
    c.up()
    try:
        conf = Configuration.load(c.conf_dir)

        async def populate():
            async with DFSClient(conf, user="root", groups=["supergroup"]) as root:
                await root.mkdirs(HOME)
                await root.set_owner(HOME, "hdfs", "supergroup")
            async with DFSClient(conf, user="hdfs", groups=["supergroup"]) as hdfs:
                for d in ("alpha", "beta", "zeta"):
                    await hdfs.mkdirs(f"{HOME}/{d}")
                await hdfs.create(f"{HOME}/alpha/inner.txt", replication=2)
                await hdfs.create(f"{HOME}/readme.md", replication=3)
                await hdfs.create(f"{HOME}/data.bin", replication=1)
                await hdfs.set_permission(f"{HOME}/zeta", 0o1777)
                await hdfs.mkdirs(f"{HOME}/private")
                await hdfs.set_permission(f"{HOME}/private", 0o700)
                await hdfs.mkdirs(f"{HOME}/many")
                for i in range(MANY):
                    await hdfs.create(f"{HOME}/many/f{i:02d}", replication=1 + i % 3)
                return hdfs.state_id

        state_id = asyncio.run(populate())
        # the observer has applied everything (its page shows its txid)
        wait_until(lambda: ((c.nn_states()[c.observer_ids[0]] or {}).get("last_applied_txid") or 0) >= state_id,
                   "the observer applied the namespace", 30)
        yield c
    finally:
        c.down()


def http_url(cluster, nn: str) -> str:
    return cluster.procs[nn].ready["http_url"]


def active_url(cluster) -> str:
    return http_url(cluster, cluster.active_namenode())


def dfs_ls(cluster, path: str) -> list[list[str]]:
    """``qjournal dfs -ls PATH`` as rows ``[mode, replication, owner, group, length, date time, name]``."""
    r = subprocess.run(qjournal_argv("--conf", cluster.conf_dir, "dfs", "++user", "hdfs", "++groups", "supergroup",
                                     "-ls", path), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = []
    for line in r.stdout.splitlines():
        if line.startswith("Found "):
            continue
        mode, rep, owner, group, length, day, minute, full = line.split(None, 7)
        rows.append([mode, rep, owner, group, length, f"{day} {minute}", full.rsplit("/", 1)[-1]])
    return rows


def shown_rows(page) -> list[list[str]]:
    """The explorer's table as rows in the same columns as :func:`dfs_ls` (size in bytes)."""
    return page.eval_on_selector_all("#listing tbody tr:not(.empty)", """trs => trs.map(tr => {
        const c = tr.cells;
        return [c[0].textContent, c[5].textContent, c[1].textContent, c[2].textContent,
                c[3].title.split(' ')[0], c[4].textContent, c[6].textContent.trim()];
    })""")


def by_name(rows):
    return sorted(rows, key=lambda r: r[-1])


def test_overview_shows_ha_journal_and_peers(cluster):
    active = cluster.active_namenode()
    standby = "nn2" if active == "nn1" else "nn1"
    observer = cluster.observer_ids[0]
    with chromium() as browser:
        for js in (True, False):
            page = browser.new_context(java_script_enabled=js).new_page()
            page.goto(active_url(cluster) + "/dfshealth.html")
            assert page.text_content("#ha-state") == "active"
            rows = {r[0].split(" ")[0]: r for r in page.eval_on_selector_all(
                "section:has(h2:text('NameNodes')) tbody tr",
                "trs => trs.map(tr => Array.from(tr.cells).map(c => c.textContent.trim()))")}
            assert rows[active][2] == "active" and rows[active][0].endswith("(this one)")
            assert rows[standby][2] == "standby" and rows[observer][2] == "observer"
            jns = page.eval_on_selector_all("section:has(h2:text('JournalNodes')) tbody tr",
                                            "trs => trs.map(tr => Array.from(tr.cells).map(c => c.textContent.trim()))")
            assert len(jns) == 3 and all(r[1] == "in sync" for r in jns), jns
            # each JournalNode answered the overview's probe: its epochs are shown
            assert all(re.fullmatch(r"\d+ / \d+", r[5]) for r in jns), jns
            assert "Needs attention" not in page.content()
            if js:
                screenshot(page, "overview")
            page.context.close()
        # the standby's and the observer's own overviews say what they are
        page = browser.new_page()
        for nn, state in ((standby, "standby"), (observer, "observer")):
            page.goto(http_url(cluster, nn) + "/")
            assert page.text_content("#ha-state") == state


def test_browse_the_file_system_matches_dfs_ls(cluster):
    base = active_url(cluster)
    with chromium() as browser:
        for js in (True, False):
            page = browser.new_context(java_script_enabled=js).new_page()
            page.goto(f"{base}/explorer.html?path={HOME}&user.name=hdfs")
            everything = dfs_ls(cluster, HOME)
            assert len(everything) > LS_LIMIT
            # the first page is the first LS_LIMIT names, each row as dfs -ls shows it; the next pages the rest
            assert by_name(shown_rows(page)) == by_name(everything)[:LS_LIMIT]
            names = []
            while True:
                rows = shown_rows(page)
                names += [r[-1] for r in rows]
                if page.query_selector("#next-page") is None:
                    break
                page.click("#next-page")
                page.wait_for_load_state()
                page.wait_for_function("first => document.querySelector('#listing tbody tr').dataset.name !== first",
                                       arg=rows[0][-1])
            assert names == [r[-1] for r in by_name(everything)]
            assert by_name(shown_rows(page)) == by_name(everything)[-len(shown_rows(page)):]
            if js:
                screenshot(page, "explorer-paged")

            # into a directory by clicking its link
            page.goto(f"{base}/explorer.html?path={HOME}&user.name=hdfs")
            page.click("#listing a.dir:text('alpha')")
            page.wait_for_function("() => document.getElementById('crumbs').textContent.includes('alpha')")
            assert page.input_value("#path") == f"{HOME}/alpha"
            assert by_name(shown_rows(page)) == by_name(dfs_ls(cluster, f"{HOME}/alpha"))
            if js:  # navigated in the page: the URL followed without a reload
                assert page.url.endswith("path=%2Fuser%2Fhdfs%2Falpha&user.name=hdfs"), page.url

            # the path box, then a breadcrumb back up
            page.fill("#path", f"{HOME}/many")
            page.press("#path", "Enter")
            page.wait_for_function("() => document.getElementById('crumbs').textContent.includes('many')")
            assert by_name(shown_rows(page)) == by_name(dfs_ls(cluster, f"{HOME}/many")[:LS_LIMIT])
            page.click("#crumbs a:text('user')")
            page.wait_for_function("() => !document.getElementById('crumbs').textContent.includes('hdfs')")
            assert [r[-1] for r in shown_rows(page)] == ["hdfs"]

            # sorting by size, then by replication descending, within the page of HOME/many
            page.goto(f"{base}/explorer.html?path={HOME}/many&user.name=hdfs")
            page.click("#listing th[data-col='replication'] a")
            page.wait_for_load_state()
            reps = [int(r[1]) for r in shown_rows(page)]
            assert reps == sorted(reps)
            page.click("#listing th[data-col='replication'] a")
            page.wait_for_load_state()
            reps = [int(r[1]) for r in shown_rows(page)]
            assert reps == sorted(reps, reverse=True)
            assert "▼" in page.text_content("#listing th[data-col='replication']")
            if js:
                page.goto(f"{base}/explorer.html?path={HOME}&user.name=hdfs")
                screenshot(page, "explorer")
            page.context.close()


def get_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback test URL
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_explorer_errors_are_pages_not_crashes(cluster):
    base = active_url(cluster)
    status, text = get_status(f"{base}/explorer.html?path=/nowhere&user.name=hdfs")
    assert status == 404 and "File does not exist: /nowhere" in text
    status, text = get_status(f"{base}/explorer.html?path={HOME}&sort=colour&user.name=hdfs")
    assert status == 400 and "sort=&#x27;colour&#x27;: not a column" in text
    status, text = get_status(f"{base}/explorer.html?path=/a/../b&user.name=hdfs")
    assert status == 400 and "path=" in text
    # what a caller sends reaches the page escaped (a user name may hold '<', as HDFS allows)
    status, text = get_status(f"{base}/explorer.html?path={HOME}&user.name=mallory%3Cscript%3E")
    assert status == 200 and "<script>alert" not in text and "mallory&lt;script&gt;" in text
    status, text = get_status(f"{base}/explorer.html?path=/%3Cb%3Enowhere&user.name=hdfs")
    assert status == 404 and "<b>nowhere" not in text and "&lt;b&gt;nowhere" in text
    # the namespace's permission check, as for any client: mode 1777 lists for anyone, 700 only for its owner
    assert get_status(f"{base}/explorer.html?path={HOME}/zeta&user.name=nobody")[0] == 200
    assert get_status(f"{base}/explorer.html?path={HOME}/private&user.name=hdfs")[0] == 200
    status, text = get_status(f"{base}/explorer.html?path={HOME}/private&user.name=nobody")
    assert status == 403 and "Permission denied" in text, text
    # the standby sends the browser to the active; the observer serves the listing (reads are its job)
    standby = "nn2" if cluster.active_namenode() == "nn1" else "nn1"
    status, text = get_status(f"{http_url(cluster, standby)}/explorer.html?path={HOME}&user.name=hdfs")
    assert status == 503 and "Browse on the active NameNode" in text
    status, text = get_status(f"{http_url(cluster, cluster.observer_ids[0])}/explorer.html?path={HOME}"
                              f"&user.name=hdfs")
    assert status == 200 and "data-name='alpha'" in text


def test_dashboard_and_alerts_name_only_exported_metrics(cluster):
    """Every ``qjournal_*`` family of the dashboard's queries and of the alert rules is in a live scrape."""
    exported: set[str] = set()
    urls = [p.ready.get("http_url") for name, p in sorted(cluster.procs.items())
            if p.kind in ("journalnode", "namenode", "zkfc")]
    assert len(urls) == 3 + 3 + 2 and all(urls), urls
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:  # noqa: S310 - loopback test URL
            text = r.read().decode()
        exported |= {line.split("{")[0].split(" ")[0] for line in text.splitlines()
                     if line and not line.startswith("#")}
    named = set(re.findall(r"\bqjournal_[a-z0-9_]+", monitoring_build.dashboard_json()))
    named |= set(re.findall(r"\bqjournal_[a-z0-9_]+", read_artifact("alerts")))
    assert named, "the dashboard and the rules name no metric"
    missing = sorted(n for n in named if n not in exported)
    assert not missing, f"named by the dashboard or the alert rules but exported by no daemon: {missing}"
