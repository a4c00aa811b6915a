"""``qjournal log format|write|read|status`` against three in-process JournalNodes over real TCP
and HTTP (run on a background event loop); the CLI runs in the test's thread."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from qjournal.cli.main import main as cli_main
from qjournal.cli.log import record_body
from qjournal.config import Configuration
from qjournal.journalnode.node import JournalNode
from qjournal.protocol.segment import crc32c


class BackgroundJNs:
    def __init__(self, root: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        conf = Configuration({"qjournal.journalnode.fsync": "false"})
        self.nodes = [JournalNode(conf, edits_dir=f"{root}/jn{i}", rpc_address=("127.0.0.1", 0),
                                  http_address=("127.0.0.1", 0)) for i in range(3)]
        for n in self.nodes:
            self.do(n.start())
        self.uri = "qjournal://" + ";".join(n.rpc_bound for n in self.nodes) + "/clijournal"

    def do(self, coro, timeout_s: float = 30):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def stop(self, *idx: int) -> None:
        for i in idx:
            self.do(self.nodes[i].stop())

    def close(self) -> None:
        for n in self.nodes:
            self.do(n.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def jns(tmp_path):
    b = BackgroundJNs(str(tmp_path))
    try:
        yield b
    finally:
        b.close()


def cli(capsys, *args):
    rc = cli_main(["-D", "ipc.client.connect.timeout=2000", "log", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_log_cli_end_to_end(jns, capsys):
    u = jns.uri
    rc, out, err = cli(capsys, "write", "--journal", u, "--count", "3", "--size", "10")
    assert rc == 1 and "not formatted" in err and len(err.strip().splitlines()) == 1
    rc, out, err = cli(capsys, "format", "--journal", u, "--namespace-id", "5", "--cluster-id", "c")
    assert rc == 0, err
    rc, out, err = cli(capsys, "format", "--journal", u)
    assert rc == 1 and "JournalAlreadyFormattedError" in err
    rc, out, err = cli(capsys, "write", "--journal", u, "--count", "7", "--size", "50", "--batch", "3")
    assert rc == 0, err
    assert out.splitlines() == ["acked 3", "acked 6", "acked 7"]
    rc, out, err = cli(capsys, "write", "--journal", u, "--count", "4", "--size", "50", "--roll-every", "2")
    assert rc == 0, err
    assert out.splitlines() == ["acked 8", "acked 9", "acked 10", "acked 11"]
    rc, out, err = cli(capsys, "read", "--journal", u, "--from", "2", "--to", "9")
    assert rc == 0, err
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["txid"] for r in rows] == list(range(2, 10))
    for r in rows:
        epoch = 1 if r["txid"] <= 7 else 2
        assert r == {"txid": r["txid"], "length": 50, "crc32c": f"{crc32c(record_body(epoch, r['txid'], 50)):08x}"}
    rc, out, err = cli(capsys, "status", "--journal", u)
    assert rc == 0, err
    # without --journal: the configured shared edits dir, the same answer
    rc2 = cli_main(["-D", "ipc.client.connect.timeout=2000", "-D", f"dfs.namenode.shared.edits.dir={u}",
                    "log", "status"])
    out2, _ = capsys.readouterr()
    assert rc2 == 0 and len(out2.splitlines()) == len(out.splitlines())
    *st, summary = [json.loads(x) for x in out.splitlines()]
    assert len(st) == 3 and all(s["answered"] and s["last_promised_epoch"] == 2 for s in st)
    assert all([10, 11, False] in s["segments"] for s in st)
    assert summary["journalnodes"] == 3 and summary["answered"] == 3
    assert summary["under_replicated"] == [] and summary["finalized_segments"] >= 1
    rc, out, err = cli(capsys, "read", "--journal", u, "--from", "1", "--to", "20")
    assert rc == 1 and "gap in transactions" in err

    jns.stop(0, 1)
    rc, out, err = cli(capsys, "status", "--journal", u)
    assert rc == 1 and "only 1 of 3" in err
    summary = json.loads(out.splitlines()[-1])
    assert summary["answered"] == 1 and summary["under_replicated"]   # held by 1 of the 3 that could be asked
    assert "on fewer than all 3 JournalNodes" in err
    rc, out, err = cli(capsys, "write", "--journal", u, "--count", "1", "--size", "1")
    assert rc == 1 and err.startswith("qjournal log write: no quorum")


def test_log_cli_bad_uri(capsys):
    rc, out, err = cli(capsys, "status", "--journal", "qjournal://h:notaport/j")
    assert rc == 1 and "bad port" in err
    rc, out, err = cli(capsys, "status")
    assert rc == 1 and "no --journal URI and no dfs.namenode.shared.edits.dir" in err
