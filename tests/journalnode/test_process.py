"""A real ``qjournal journalnode`` process: READY line, RPC and HTTP over real sockets,
kill -9 in the middle of a segment and restart with every acknowledged txn, SIGTERM
stops it cleanly, and start-up failures exit 1 with the cause."""

import asyncio
import socket

import aiohttp
import pytest

from qjournal.protocol.segment import encode_header
from qjournal.transport import RpcClient
from qjournal.util.proc import DaemonStartError, qjournal_argv, start_daemon

from .jn_helpers import NS, Writer, batch

pytestmark = pytest.mark.slow
JID = "proc"


def start_jn(edits_dir, log_path, *extra):
    return start_daemon("journalnode", qjournal_argv(
        "-D", "qjournal.log.level=INFO", "journalnode", "--edits-dir", str(edits_dir),
        "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0", *extra),
        log_path=str(log_path), ready_timeout_s=60)


async def connect(d):
    host, port = d.ready["rpc"].rsplit(":", 1)
    return await RpcClient.connect_tcp(host, int(port))


def test_real_process_kill9_restart_and_sigterm(tmp_path):
    edits = tmp_path / "edits"
    log = tmp_path / "jn.log"
    d = start_jn(edits, log, "--pid-file", str(tmp_path / "jn.pid"))
    try:
        assert d.ready["role"] == "journalnode" and d.ready["pid"] == d.pid
        assert (tmp_path / "jn.pid").read_text().strip() == str(d.pid)

        async def write():
            c = await connect(d)
            try:
                await c.call("format", jid=JID, ns_info=NS.to_wire())
                await c.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
                w = Writer(JID, 1)
                await c.call("start_log_segment", req=w.req().to_wire(), txid=1, layout_version=1)
                for first in range(1, 100, 10):
                    await c.call("journal", req=w.req().to_wire(), segment_txid=1, first_txid=first,
                                 num_txns=10, records=batch(first, 10))
            finally:
                await c.close()
        asyncio.run(write())
        d.kill()  # kill -9 with the segment open
        d = start_jn(edits, log)

        async def check():
            c = await connect(d)
            try:
                m = await c.call("get_edit_log_manifest", jid=JID, since_txid=0, in_progress_ok=True)
                assert m["segments"] == [[1, 100, True]]
                st = await c.call("get_journal_state", jid=JID)
                assert st["last_promised_epoch"] == 1 and st["ns_info"] == NS.to_wire()
                async with aiohttp.ClientSession() as s:
                    async with s.get(f"http://{d.ready['http']}/getJournal?jid={JID}&segmentTxId=1") as r:
                        assert r.status == 200
                        assert await r.read() == encode_header(1) + batch(1, 100)
            finally:
                await c.close()
        asyncio.run(check())
        assert d.stop() == 0  # SIGTERM: clean exit
    finally:
        d.kill()


def test_start_failures_exit_1(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(DaemonStartError, match="exited with 1"):
        start_jn(afile, tmp_path / "a.log")
    assert "is not a directory" in (tmp_path / "a.log").read_text()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        port = s.getsockname()[1]
        with pytest.raises(DaemonStartError, match="exited with 1"):
            start_daemon("journalnode", qjournal_argv(
                "journalnode", "--edits-dir", str(tmp_path / "e"), "--rpc-address", f"127.0.0.1:{port}",
                "--http-address", "127.0.0.1:0"), log_path=str(tmp_path / "b.log"), ready_timeout_s=60)
    finally:
        s.close()
    assert "cannot listen" in (tmp_path / "b.log").read_text()


def test_relative_edits_dir_refused(tmp_path):
    with pytest.raises(DaemonStartError, match="exited with 1"):
        start_daemon("journalnode", qjournal_argv(
            "-D", "dfs.journalnode.edits.dir=relative/dir", "journalnode", "--rpc-address", "127.0.0.1:0",
            "--http-address", "127.0.0.1:0"), log_path=str(tmp_path / "c.log"), ready_timeout_s=60,
            cwd=str(tmp_path))
    assert "dfs.journalnode.edits.dir 'relative/dir' is not an absolute path" in (tmp_path / "c.log").read_text()


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_kill9_during_writes_keeps_every_acked_txn(tmp_path, seed):
    """kill -9 while batches are in flight, at a seeded point; the restarted node has every
    acknowledged txn, byte for byte, and serves a clean prefix."""
    import random
    import signal

    from qjournal.protocol.segment import HEADER_SIZE, iter_records, scan_segment

    rng = random.Random(seed)
    print("seed", seed)
    edits, log = tmp_path / "edits", tmp_path / "jn.log"
    d = start_jn(edits, log)
    acked = []
    try:
        async def write_until_killed():
            c = await connect(d)
            try:
                await c.call("format", jid=JID, ns_info=NS.to_wire())
                await c.call("new_epoch", jid=JID, ns_info=NS.to_wire(), epoch=1)
                w = Writer(JID, 1)
                await c.call("start_log_segment", req=w.req().to_wire(), txid=1, layout_version=1)
                kill_after = rng.randint(5, 40)
                first = 1
                pending = []
                while True:
                    n, size = rng.randint(1, 50), rng.randint(1, 300)
                    data = batch(first, n, size=size)
                    pending.append((first, data, asyncio.ensure_future(c.call(
                        "journal", req=w.req().to_wire(), segment_txid=1, first_txid=first, num_txns=n,
                        records=data))))
                    first += n
                    if len(pending) >= 4:
                        f, k, fut = pending.pop(0)
                        await fut
                        acked.append((f, k))
                        if len(acked) == kill_after:
                            d.signal(signal.SIGKILL)  # batches still in flight
                            for _f, _k, fut2 in pending:
                                try:
                                    await fut2
                                except Exception:  # noqa: BLE001 - the node is gone
                                    pass
                            return
            finally:
                await c.close()
        asyncio.run(write_until_killed())
        d.kill()
        d = start_jn(edits, log)

        async def check():
            c = await connect(d)
            try:
                m = await c.call("get_edit_log_manifest", jid=JID, since_txid=0, in_progress_ok=True)
                (start, end, ip), = m["segments"]
                acked_bytes = b"".join(data for _f, data in acked)
                last_acked = acked[-1][0] + sum(1 for _ in iter_records(acked[-1][1], 0)) - 1
                async with aiohttp.ClientSession() as s:
                    async with s.get(f"http://{d.ready['http']}/getJournal?jid={JID}&segmentTxId=1") as r:
                        body = await r.read()
                res = scan_segment(body, expected_first_txid=1)
                assert res.clean and res.last_txid == end  # served bytes are a clean prefix
                assert start == 1 and ip and end >= last_acked, (m, last_acked)
                assert body[HEADER_SIZE:HEADER_SIZE + len(acked_bytes)] == acked_bytes  # byte for byte
            finally:
                await c.close()
        asyncio.run(check())
    finally:
        d.kill()
