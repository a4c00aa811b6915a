"""NameNode shell in one process: non-HA restart replay, health check, stale reads, in-flight retries,
and a journal failure that stops the NameNode (it never carries on)."""

from __future__ import annotations

import asyncio
import errno

import pytest

from qjournal.config import Configuration
from qjournal.errors import (FencedError, FileAlreadyExistsError, FileNotFoundError_, HealthCheckFailedError, QJournalError,
                             ServiceFailedError, StandbyError)
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.editlog import EditLogFatalError
from qjournal.namenode.format import format_namenode, initialize_shared_edits
from qjournal.namenode.ha_state import HAState


def conf_for(tmp, **extra):
    c = Configuration()
    c.set("dfs.namenode.name.dir", f"file://{tmp}/name")
    c.set("qjournal.namenode.superuser", "hdfs")
    c.set("dfs.namenode.checkpoint.check.period", "3600s")
    c.set("dfs.ha.log-roll.period", "0")
    for k, v in extra.items():
        c.set(k, v)
    return c


W = dict(user="hdfs", groups=["supergroup"])


def test_non_ha_restart_replays_local_edits_and_checkpoint(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf)
        await nn.start(serve=False)
        assert nn.state == HAState.ACTIVE
        for i in range(10):
            await nn.client_protocol.rpc_mkdirs(f"/a/{i}", **W)
        txid = await nn.checkpointer.checkpoint()   # non-HA: the active checkpoints itself
        await nn.client_protocol.rpc_create("/a/0/f", **W)
        await nn.client_protocol.rpc_rename("/a/0/f", "/a/1", **W)
        want = nn.namespace.snapshot()
        with pytest.raises(ServiceFailedError, match="HA is not enabled"):
            await nn.ha_service.transition_to_standby("user")
        await nn.stop()
        nn2 = NameNode(conf)
        await nn2.start(serve=False)
        assert nn2.namespace.snapshot() == want
        assert nn2.last_checkpoint_txid == txid
        assert nn2.last_applied_txid > txid
        await nn2.stop()
        # a damaged newest image is skipped: the older image plus more edits give the same state
        path = f"{tmp_path}/name/current/fsimage_{txid:019d}"
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(path, "wb").write(bytes(data))
        nn3 = NameNode(conf)
        await nn3.start(serve=False)
        assert nn3.last_checkpoint_txid == 0 and nn3.namespace.snapshot() == want
        await nn3.stop()

    asyncio.run(main())


def test_health_check_space_and_stale_reads(tmp_path):
    async def main():
        conf = conf_for(tmp_path, **{"dfs.namenode.shared.edits.dir": f"file://{tmp_path}/shared",
                                     "dfs.ha.allow.stale.reads": "true",
                                     "dfs.ha.tail-edits.period": "3600s"})
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf, "nn1")
        await nn.start(serve=False)
        try:
            assert (await nn.ha_service.rpc_get_service_status())["state"] == "standby"
            await nn.ha_service.rpc_monitor_health()
            assert await nn.client_protocol.rpc_get_file_info("/", **W) is not None   # stale reads allowed
            with pytest.raises(StandbyError, match="WRITE"):
                await nn.client_protocol.rpc_mkdirs("/x", **W)
            nn.ha_service.health_free_bytes_override = 10   # simulate a nearly full disk
            with pytest.raises(HealthCheckFailedError, match="dfs.namenode.resource.du.reserved"):
                await nn.ha_service.rpc_monitor_health()
        finally:
            await nn.stop()

    asyncio.run(main())


def test_concurrent_retry_of_an_in_flight_call_gets_the_same_answer(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf)
        await nn.start(serve=False)
        try:
            cid = b"\x05" * 16
            a, b = await asyncio.gather(nn.client_protocol.rpc_create("/f", client_id=cid, call_id=1, **W),
                                        nn.client_protocol.rpc_create("/f", client_id=cid, call_id=1, **W))
            assert a == b and a["path"] == "/f"
            assert nn.editlog.last_written_txid == 2   # START + one OP_CREATE, not two
        finally:
            await nn.stop()

    asyncio.run(main())


def test_journal_failure_stops_the_namenode(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        exits = []
        nn = NameNode(conf, exit_hook=exits.append)
        await nn.start(serve=False)
        await nn.client_protocol.rpc_mkdirs("/ok", **W)
        member = nn.journal_set.members[0].journal

        def broken(fd):
            raise OSError(errno.EIO, "simulated disk failure")

        member.disk.fdatasync = broken
        with pytest.raises(EditLogFatalError):
            await nn.client_protocol.rpc_mkdirs("/lost", **W)
        assert exits == [1] and nn.state == HAState.STOPPING
        with pytest.raises(StandbyError, match="stopping"):
            await nn.client_protocol.rpc_get_file_info("/ok", **W)
        with pytest.raises(HealthCheckFailedError):
            await nn.ha_service.rpc_monitor_health()
        await nn.stop()

    asyncio.run(main())


def test_checkpoint_is_due_by_txn_count_and_by_period(tmp_path):
    async def main():
        now = [1_000_000]
        conf = conf_for(tmp_path, **{"dfs.namenode.checkpoint.txns": "5",
                                     "dfs.namenode.checkpoint.period": "60s",
                                     "dfs.namenode.edit.log.autoroll.multiplier.threshold": "100"})
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf, monotonic_ms=lambda: now[0])
        await nn.start(serve=False)
        try:
            ck = nn.checkpointer
            await nn.client_protocol.rpc_mkdirs("/a", **W)            # START + 1 op since the txid-0 image
            assert not ck.due()
            now[0] += 60_000
            assert ck.due()                           # period elapsed with something new
            txid = await ck.checkpoint()
            assert not ck.due()
            for i in range(5):
                await nn.client_protocol.rpc_mkdirs(f"/b{i}", **W)
            assert nn.last_applied_txid - txid == 5 and ck.due()   # txn count reached
        finally:
            await nn.stop()

    asyncio.run(main())


def test_h1_a_wall_clock_jump_expires_no_retry_cache_entry_and_starts_no_checkpoint(tmp_path):
    """Issue 28, H1: the retry cache expired its entries, and the checkpointer measured its period, by
    the wall clock. A NameNode whose wall clock jumped an hour ahead answered a client's retry of an
    acknowledged create with "File exists" (a write applied twice, from the client's view) and
    checkpointed at once; one whose clock jumped back held its checkpoint back by as much. Durations
    are the monotonic clock's now; the wall clock only dates things."""
    async def main():
        wall, mono = [1_000_000_000], [5_000]
        conf = conf_for(tmp_path, **{"dfs.namenode.checkpoint.period": "60s",
                                     "dfs.namenode.retrycache.expirytime.millis": "600000"})
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf, clock_ms=lambda: wall[0], monotonic_ms=lambda: mono[0])
        await nn.start(serve=False)
        try:
            cid = b"\x07" * 16
            first = await nn.client_protocol.rpc_create("/f", client_id=cid, call_id=1, **W)
            ck = nn.checkpointer
            wall[0] += 3_600_000                       # an hour ahead: no time passed
            again = await nn.client_protocol.rpc_create("/f", client_id=cid, call_id=1, **W)
            assert again == first                      # the retry gets the first answer
            assert not ck.due()
            wall[0] -= 7_200_000                       # an hour behind the truth
            mono[0] += 60_000                          # a minute passes
            assert ck.due()
            mono[0] += 600_001                         # the entry's real expiry
            with pytest.raises(FileAlreadyExistsError):
                await nn.client_protocol.rpc_create("/f", client_id=cid, call_id=1, **W)
        finally:
            await nn.stop()

    asyncio.run(main())


def test_initialize_shared_edits_turns_a_non_ha_namenode_into_ha(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf)
        await nn.start(serve=False)
        for i in range(5):
            await nn.client_protocol.rpc_mkdirs(f"/pre/{i}", **W)
        await nn.editlog.roll()
        await nn.client_protocol.rpc_create("/pre/f", **W)
        want = nn.namespace.snapshot()
        await nn.stop()
        conf.set("dfs.namenode.shared.edits.dir", f"file://{tmp_path}/shared")
        conf.set("dfs.ha.tail-edits.period", "3600s")
        copied = await initialize_shared_edits(conf)
        assert copied == nn.last_applied_txid   # every txn since the txid-0 image
        ha = NameNode(conf, "nn1")
        await ha.start(serve=False)
        try:
            assert ha.state == HAState.STANDBY and ha.namespace.snapshot() == want
            await ha.ha_service.transition_to_active("user")
            await ha.client_protocol.rpc_mkdirs("/post", **W)
        finally:
            await ha.stop()

    asyncio.run(main())


def test_malformed_arguments_get_typed_errors_never_crashes(tmp_path):
    """Every client call with wrongly typed arguments answers a QJournalError (the RPC layer sends it typed)."""
    bad_values = [None, 7, "x", b"\x00", [1], {"a": 1}, -1, True, "/ok", 2 ** 70]
    calls = {
        "rpc_mkdirs": ("path", "perm", "create_parent"),
        "rpc_create": ("path", "perm", "replication", "block_size", "overwrite"),
        "rpc_delete": ("path", "recursive"),
        "rpc_rename": ("src", "dst"),
        "rpc_set_permission": ("path", "perm"),
        "rpc_set_owner": ("path", "owner", "group"),
        "rpc_set_times": ("path", "mtime", "atime"),
        "rpc_set_replication": ("path", "replication"),
        "rpc_get_file_info": ("path",),
        "rpc_list_status": ("path",),
        "rpc_get_listing": ("path", "start_after", "limit"),
        "rpc_check_access": ("path", "access"),
        "rpc_get_content_summary": ("path",),
    }

    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf)
        await nn.start(serve=False)
        try:
            await nn.client_protocol.rpc_mkdirs("/ok", **W)
            await nn.client_protocol.rpc_create("/ok/f", **W)
            good = {"path": "/ok/f", "perm": 0o644, "create_parent": True, "replication": 2,
                    "block_size": 1024, "overwrite": True, "recursive": False, "src": "/ok/f",
                    "dst": "/ok/g", "owner": "hdfs", "group": "g", "mtime": 5, "atime": 5,
                    "start_after": "a", "limit": 1, "access": 4}
            for method in sorted(calls):
                for arg in calls[method]:
                    for v in bad_values:
                        kw = {a: good[a] for a in calls[method]}
                        kw[arg] = v
                        try:
                            await getattr(nn.client_protocol, method)(**kw, **W)
                        except QJournalError:
                            pass
            for v in bad_values:   # a bad identity is refused before anything else
                for k in ("user", "groups", "client_id", "call_id", "state_id"):
                    ident = dict(W, client_id=b"\x01" * 16, call_id=1)
                    ident[k] = v
                    try:
                        await nn.client_protocol.rpc_mkdirs("/ok/z", **ident)
                    except QJournalError:
                        pass
            assert nn.state == HAState.ACTIVE and nn.fatal_error is None
        finally:
            await nn.stop()

    asyncio.run(main())


@pytest.mark.parametrize("call,plain", [
    (lambda cp: cp.rpc_rename("/missing", "/x", **W), FileNotFoundError_),
    (lambda cp: cp.rpc_mkdirs("/ok", **W), True),       # a no-op: nothing to log
    (lambda cp: cp.rpc_create("/ok", **W), FileAlreadyExistsError),
], ids=["rename-refused", "mkdirs-no-op", "create-refused"])
def test_a_write_that_logs_nothing_passes_the_read_barrier(tmp_path, call, plain):
    """client_protocol invariant 4: an answer taken from the namespace alone (a refusal, a no-op)
    is a read, so a fenced active that still believes it is active gives no such answer."""
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(conf, exit_hook=lambda _status: None)
        await nn.start(serve=False)
        try:
            await nn.client_protocol.rpc_mkdirs("/ok", **W)
            if isinstance(plain, type):
                with pytest.raises(plain):
                    await call(nn.client_protocol)
            else:
                assert await call(nn.client_protocol) == plain
            written = nn.editlog.last_written_txid

            async def fenced():
                raise FencedError("journal 'test': a newer writer (epoch 9) fenced epoch 1")

            nn.editlog.journal.confirm_writer = fenced
            with pytest.raises(EditLogFatalError, match="fenced"):
                await call(nn.client_protocol)
            assert nn.editlog.last_written_txid == written  # nothing was logged on the way
        finally:
            await nn.stop()

    asyncio.run(main())
