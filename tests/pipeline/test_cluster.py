"""The pipeline on a real Spark standalone cluster whose worker cannot see the driver's files.

``qjournal spark up --hide <driver scratch>`` starts a master and one worker from
the pyspark jars, the worker in its own mount namespace with the driver's
scratch directory (the JournalNodes' data, the local run's output, the driver's
temporary files) covered by an empty tmpfs. Against three running JournalNodes
(one of them stopped, so the audit has findings: its copies are missing), a
``spark-submit`` of ``pipeline/__main__.py all`` and ``qjournal pipeline ingest
--master spark://...`` run at once (one core each) and write to a directory the
cluster shares. The spark-submit run gives the checkpoint image of the
NameNode's own replay of the finalized edits (the reference that ``local[2]``
runs are held to in test_end_to_end.py: the decisive image test) and an audit
whose findings are exactly the missing copies of the stopped node; the CLI's
run ingests the same edits copy for copy; the master's own application list
shows both runs with cores granted, whose executors ran on the hidden worker
(so spark-submit's master was not overridden). (Two full pipeline runs on the
cluster plus a ``local[2]`` reference took three minutes of the suite's ten on two
cores; the CLI and spark-submit share every stage after the session, run.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from qjournal.localcluster.spark import SparkCluster, pyspark_home
from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import Namespace
from qjournal.pipeline import ingest as ing
from qjournal.pipeline import run as runner
from qjournal.protocol import segment as seg
from qjournal.util.proc import qjournal_argv
from qjournal.util.waiting import wait_until
from tests.pipeline.live_journal import JournalWriter, journal_uri, start_journalnodes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SEED = int(os.environ.get("QJ_CLUSTER_SEED", "20261127"))


def _cli(*args: str, env: dict | None = None, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout_s,
                          env={**os.environ, **(env or {})})


def _start(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env})


def _image(out: str):
    cur = os.path.join(out, "checkpoint", "current")
    names = sorted(n for n in os.listdir(cur) if nn_image.parse_image_file_name(n) is not None)
    assert names, f"no image in {cur}"
    return nn_image.load_image(os.path.join(cur, names[-1]))


def _replay_finalized(full_dir) -> tuple[Namespace, set[int]]:
    """The NameNode's own replay of every finalized segment in ``full_dir``, and their first txids."""
    ns = Namespace(permissions_enabled=False)
    names = (seg.parse_segment_file_name(n) for n in os.listdir(full_dir))
    segs = sorted((p.start_txid, p.end_txid) for p in names if p is not None and not p.in_progress)
    for s, e in segs:
        with open(os.path.join(full_dir, seg.segment_file_name(s, e)), "rb") as f:
            for rec in seg.iter_records(f.read()):
                ns.apply(nn_ops.decode_op(rec.opcode, rec.body, rec.txid))
    return ns, {s for s, _e in segs}


def _rows(table_dir: str) -> list[dict]:
    """A table the cluster wrote, read with pyarrow: this test needs no SparkSession of its own, so a
    parallel run starts it beside the Spark group (tests/parallel.py)."""
    return pq.read_table(table_dir).to_pylist()


def _findings(out: str) -> list[tuple]:
    return sorted((r["kind"], r["node"], r["segment_start"], r["severity"])
                  for r in _rows(ing.OutputLayout(out).findings))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("java") is None,
                    reason="needs root, util-linux unshare and java")
def test_pipeline_on_a_standalone_cluster_that_cannot_see_the_driver(tmp_path):
    print(f"cluster history seed={SEED}")
    scratch, shared, run_dir = tmp_path / "driver", tmp_path / "shared", tmp_path / "spark"
    for d in (scratch / "tmp", shared):
        d.mkdir(parents=True)
    jns = start_journalnodes(scratch)
    cluster_up = False
    try:
        uri = journal_uri(jns, "cl")
        writer = JournalWriter(uri, SEED)
        try:
            for _ in range(2):
                writer.write(79)
                writer.finalize()
            jns[2].stop()                 # the third node misses what follows: audit findings
            writer.write(59)
            writer.finalize()
            writer.write(20)              # an open segment: not ingested
        finally:
            writer.close()

        up = _cli(*qjournal_argv("spark", "up", "--workers", "1", "--run-dir", str(run_dir),
                                 "--hide", str(scratch)))
        cluster_up = True
        assert up.returncode == 0, up.stdout + up.stderr
        cluster = SparkCluster.open(str(run_dir))
        worker = next(p for p in cluster.state.procs if p.name == "worker1")
        # the worker's view of the driver's scratch directory is an empty tmpfs
        assert os.listdir(f"/proc/{worker.pid}/root{scratch}") == []
        assert os.listdir(scratch / "jn0")

        # both cluster runs at once (one core each: spark.cores.max=1): the CLI's ingest, spark-submit's all
        env = {"TMPDIR": str(scratch / "tmp"),  # the driver's temporary files (the shipped code) hidden too
               "PYSPARK_SUBMIT_ARGS": "--conf spark.cores.max=1 pyspark-shell"}
        out1, out2 = str(shared / "out-cli"), str(shared / "out-submit")
        r1 = _start(*qjournal_argv("pipeline", "ingest", "--master", cluster.state.master_url, "--journal", uri,
                                   "--out", out1), env=env)
        submit = os.path.join(pyspark_home(), "bin", "spark-submit")
        main_py = os.path.join(os.path.dirname(runner.__file__), "__main__.py")
        r2 = _start(submit, "--master", cluster.state.master_url, "--conf", "spark.cores.max=1", main_py, "all",
                    "--journal", uri, "--out", out2,
                    env={**env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
        want, segments = _replay_finalized(scratch / "jn0" / "cl" / "current")
        assert len(want) > 1 and segments == {1, 81, 161}
        for r in (r1, r2):
            _out, err = r.communicate(timeout=600)
            assert r.returncode == 0, err[-3000:]

        info, table = _image(out2)
        assert info.txid == 80 + 80 + 60
        got = Namespace.from_image_columns(table.to_pydict(), info.last_inode_id, permissions_enabled=False)
        assert got.snapshot() == want.snapshot(), "the cluster's image differs from the NameNode's replay"
        findings = _findings(out2)
        assert {k for k, *_ in findings} == {"missing-copy"}
        # the stopped node is unreachable: each of its finalized copies is missing, and nothing else is wrong
        assert len({node for _k, node, _s, _sev in findings}) == 1
        assert sorted(start for _k, _node, start, _sev in findings) == sorted(segments)
        # the CLI's run on the cluster ingested the same edits, copy for copy
        tables = [sorted((tuple(r.items()) for r in _rows(ing.OutputLayout(out).edits)), key=repr)
                  for out in (out1, out2)]
        assert len(tables[0]) == 2 * 220 and tables[0] == tables[1]

        def both_completed():
            apps = [a for a in (cluster.master_json() or {}).get("completedapps", [])
                    if a.get("name") == "qjournal-pipeline"]
            return apps if len(apps) == 2 else None

        # the master and the worker learn of an application's end asynchronously after its driver exits
        apps = wait_until(both_completed, "both applications in the master's completed list", 60)
        assert all(a["state"] == "FINISHED" and a["cores"] > 0 for a in apps), apps

        def ran_both():
            ran = {e["appid"] for e in (cluster.worker_json("worker1") or {}).get("finishedexecutors", [])}
            return ran if {a["id"] for a in apps} <= ran else None

        ran = wait_until(ran_both, "the worker's finished executors of both applications", 60)
        assert {a["id"] for a in apps} <= ran, (apps, ran)
        status = _cli(*qjournal_argv("spark", "status", "--run-dir", str(run_dir)))
        assert status.returncode == 0 and "workers alive: 1" in status.stdout, status.stdout + status.stderr
        assert all(a["id"] in status.stdout for a in apps) and f"hidden from the workers: {scratch}" in status.stdout
    finally:
        if cluster_up:
            down = _cli(*qjournal_argv("spark", "down", "--run-dir", str(run_dir)))
            assert down.returncode == 0, down.stderr
        for j in jns:
            j.stop()
