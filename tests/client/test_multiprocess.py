"""Real processes on loopback: three ``qjournal journalnode`` daemons and ``qjournal log write``.

One JournalNode is SIGKILLed mid-write and writing goes on; the writer is SIGKILLed mid-batch;
the JournalNode restarts; a second writer recovers and writes; ``qjournal log read`` returns every
txid the first writer printed as acked, and each txid's bytes agree across every node that holds
it on disk (and with what the reader returned).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import time

import pytest

from qjournal.protocol.segment import crc32c, iter_records, parse_segment_file_name, scan_segment
from qjournal.util.proc import qjournal_argv, start_daemon

pytestmark = pytest.mark.slow

JID = "mp"


class LineReader:
    """Lines of a child's stdout, read with a deadline (no sleeps)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.sel = selectors.DefaultSelector()
        self.sel.register(proc.stdout, selectors.EVENT_READ)
        self.buf = b""
        self.lines: list[str] = []

    def pump(self, timeout_s: float) -> bool:
        """Read what is available within ``timeout_s``; False at EOF."""
        if not self.sel.select(timeout=timeout_s):
            return True
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self.buf += chunk
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            self.lines.append(line.decode())
        return True

    def acked(self) -> list[int]:
        return [int(x.split()[1]) for x in self.lines if x.startswith("acked ")]

    def wait_for(self, pred, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {what}; last lines: {self.lines[-3:]}"
            if not self.pump(min(left, 0.5)):
                assert pred(), f"writer exited before {what} (rc {self.proc.wait()})"
                return

    def drain(self) -> None:
        while self.pump(0.5):
            pass
        self.sel.close()


def node_txids(edits_dir: str) -> dict[int, bytes]:
    """Every txid in the valid prefix of every segment file of one JournalNode's journal."""
    out: dict[int, bytes] = {}
    cur = os.path.join(edits_dir, JID, "current")
    for name in sorted(os.listdir(cur)):
        if parse_segment_file_name(name) is None:
            continue
        with open(os.path.join(cur, name), "rb") as f:
            data = f.read()
        scan = scan_segment(data)
        if not scan.header_ok:
            continue
        for rec in iter_records(memoryview(data)[:scan.valid_length]):
            assert out.setdefault(rec.txid, rec.body) == rec.body, f"{name}: txid {rec.txid} twice, different"
    return out


def run_cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(qjournal_argv("log", *args), capture_output=True, text=True, timeout=timeout_s)


def test_jn_and_writer_killed_second_writer_recovers(tmp_path):
    dirs = [str(tmp_path / f"jn{i}") for i in range(3)]
    jns = []
    writer = None
    try:
        for i in range(3):
            jns.append(start_daemon(f"jn{i}", qjournal_argv(
                "journalnode", "--edits-dir", dirs[i], "--rpc-address", "127.0.0.1:0",
                "--http-address", "127.0.0.1:0"), log_path=str(tmp_path / f"jn{i}.log")))
        addrs = [j.ready["rpc"] for j in jns]
        uri = "qjournal://" + ";".join(addrs) + f"/{JID}"
        r = run_cli("format", "--journal", uri)
        assert r.returncode == 0, r.stderr

        writer = subprocess.Popen(qjournal_argv("log", "write", "--journal", uri, "--count", "1000000",
                                                "--size", "100", "--batch", "5"),
                                  stdout=subprocess.PIPE, stderr=open(tmp_path / "w1.log", "wb"),
                                  start_new_session=True)
        out = LineReader(writer)
        out.wait_for(lambda: out.acked() and out.acked()[-1] >= 50, 60, "50 acked txids")
        jns[0].kill()  # SIGKILL one JournalNode mid-write
        before = out.acked()[-1]
        out.wait_for(lambda: out.acked()[-1] >= before + 100, 60, "writes to go on after a JN died")
        os.kill(writer.pid, signal.SIGKILL)  # the writer dies mid-batch
        writer.wait()
        out.drain()
        acked1 = out.acked()
        assert acked1 == sorted(acked1)
        last_acked = acked1[-1]

        # the dead JournalNode comes back on its port; a second writer recovers and writes
        host, port = addrs[0].rsplit(":", 1)
        jns[0] = start_daemon("jn0", qjournal_argv(
            "journalnode", "--edits-dir", dirs[0], "--rpc-address", f"{host}:{port}",
            "--http-address", "127.0.0.1:0"), log_path=str(tmp_path / "jn0.log"))
        r = run_cli("write", "--journal", uri, "--count", "20", "--size", "100", "--batch", "7")
        assert r.returncode == 0, r.stderr
        acked2 = [int(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("acked ")]
        recovered_end = acked2[-1] - 20  # the second writer starts right after the recovered log
        assert recovered_end >= last_acked, "recovery dropped an acknowledged txid"
        assert acked2 == [recovered_end + 7, recovered_end + 14, recovered_end + 20]

        r = run_cli("read", "--journal", uri, "--from", "1")
        assert r.returncode == 0, r.stderr
        rows = [json.loads(x) for x in r.stdout.splitlines()]
        txids = [row["txid"] for row in rows]
        assert txids == list(range(1, acked2[-1] + 1)), "the reader must see a contiguous log"
        assert set(acked1) <= set(txids), "a txid acknowledged to the first writer was lost"

        per_node = [node_txids(d) for d in dirs]
        for row in rows:
            t = row["txid"]
            holders = [n for n in per_node if t in n]
            assert len(holders) >= 2, f"txid {t} is on fewer than a quorum of nodes"
            for n in holders:
                assert n[t] == holders[0][t], f"txid {t} differs between JournalNodes"
            assert f"{crc32c(holders[0][t]):08x}" == row["crc32c"], f"txid {t}: reader bytes differ"
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
            writer.wait()
        for j in jns:
            j.kill()
