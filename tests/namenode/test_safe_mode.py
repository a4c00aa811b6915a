"""Safe mode and the dfsadmin calls on in-process NameNodes (``admin_protocol.py``), and the
``-beforeShutdown`` rule (``checkpointer.save_needed``).

Shows: writes refused with SafeModeError while reads are served, a retry of an answered write still
answered, rolls refused; superuser checks; saveNamespace only in safe mode, its image loads back;
rollEdits; safe mode per NameNode in an HA pair; dfs.ha.nn.not-become-active-in-safemode (transition
refused, unhealthy to the ZKFC) and a standby in safe mode not ready to become active either way.
"""

from __future__ import annotations

import asyncio

import pytest

from qjournal.errors import (HealthCheckFailedError, InvalidRequestError, PermissionDeniedError, SafeModeError,
                             ServiceFailedError, StandbyError)
from qjournal.namenode import image as img
from qjournal.namenode.checkpointer import save_needed
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import format_namenode
from qjournal.namenode.ha_state import HAState
from qjournal.namenode.http import NameNodeHttpServer
from qjournal.namenode.namespace import Namespace

from .test_ha_inprocess import start_pair
from .test_server_inprocess import W, conf_for

BOB = dict(user="bob", groups=["staff"])


@pytest.mark.parametrize("age_ms,image_txid,last_txid,window_s,gap,want", [
    (10**9, 0, 100, 0, 0, True),        # no -beforeShutdown: always
    (None, 0, 100, 3600, 10, True),     # no image at all
    (1000, 95, 100, 3600, 10, False),   # young and close: nothing to do
    (1000, 89, 100, 3600, 10, True),    # too many txns behind
    (1000, 90, 100, 3600, 10, False),   # exactly tx_gap behind: still fine
    (3600_001, 100, 100, 3600, 10, True),  # too old
    (3600_000, 100, 100, 3600, 10, False),  # exactly the window: still fine
])
def test_save_needed_table(age_ms, image_txid, last_txid, window_s, gap, want):
    assert save_needed(age_ms, image_txid, last_txid, window_s, gap) is want


def test_safe_mode_and_admin_calls_on_one_namenode(tmp_path):
    async def main():
        conf = conf_for(tmp_path)
        await format_namenode(conf, cluster_id="CID-sm", namespace_id=9)
        nn = NameNode(conf, "nn1")
        await nn.start(serve=False)
        cp, adm = nn.client_protocol, nn.admin_protocol
        try:
            await cp.rpc_mkdirs("/a", **W)
            cid = b"\x05" * 16
            first = await cp.rpc_create("/a/f", client_id=cid, call_id=1, **W)
            with pytest.raises(PermissionDeniedError, match="Access denied for user bob. Superuser privilege"):
                await adm.rpc_set_safe_mode("enter", **BOB)
            assert await adm.rpc_set_safe_mode("get", **BOB) is False   # anyone may ask
            with pytest.raises(InvalidRequestError, match="unknown safe mode action"):
                await adm.rpc_set_safe_mode("sideways", **W)
            with pytest.raises(SafeModeError, match="Safe mode should be turned ON"):
                await adm.rpc_save_namespace(**W)
            # a write that passed the HA gate before safe mode was entered is refused when it is applied
            async with nn.ns_lock:
                late = asyncio.ensure_future(cp.rpc_mkdirs("/late", **W))
                for _ in range(10000):   # until it waits for the namespace lock (a condition, bounded)
                    if nn.ns_lock._waiters:
                        break
                    await asyncio.sleep(0)
                assert nn.ns_lock._waiters and not late.done()
                assert await adm.rpc_set_safe_mode("enter", **W) is True
            with pytest.raises(SafeModeError, match="Cannot create directory /late"):
                await late
            assert nn.editlog.synced_txid == nn.editlog.last_written_txid   # everything before is durable
            txid_before = nn.last_applied_txid
            with pytest.raises(SafeModeError) as ei:
                await cp.rpc_mkdirs("/b", **W)
            assert "Cannot create directory /b. Name node is in safe mode (NameNode nn1)" in str(ei.value)
            assert "dfsadmin -safemode leave" in str(ei.value)
            with pytest.raises(SafeModeError, match="Cannot rename /a/f"):
                await cp.rpc_rename("/a/f", "/a/g", **W)
            # reads are served; a retry of a write answered before safe mode gets its answer
            assert [s["name"] for s in await cp.rpc_list_status("/a", **W)] == ["f"]
            assert await cp.rpc_create("/a/f", client_id=cid, call_id=1, **W) == first
            with pytest.raises(SafeModeError, match="Log not rolled"):
                await nn.namenode_protocol.rpc_roll_edit_log()
            with pytest.raises(SafeModeError, match="Log not rolled"):
                await adm.rpc_roll_edits(**W)
            assert nn.last_applied_txid == txid_before   # nothing was written

            # saveNamespace: the active rolls, then saves at its last txid; the image loads back
            with pytest.raises(PermissionDeniedError):
                await adm.rpc_save_namespace(**BOB)
            saved = await adm.rpc_save_namespace(**W)
            assert saved["saved"] is True and saved["txid"] == nn.last_applied_txid > txid_before
            assert nn.editlog.segment_txid == saved["txid"]   # the new segment begins at the image
            info, table = img.load_image(img.image_path(nn.name_dir, saved["txid"]))
            back = Namespace.from_image_columns(table.to_pydict(), info.last_inode_id, superuser="hdfs")
            assert back.snapshot() == nn.namespace.snapshot()
            # -beforeShutdown: the image just written is young and current: nothing more to do
            again = await adm.rpc_save_namespace(time_window_s=3600, tx_gap=10, **W)
            assert again == {"saved": False, "txid": saved["txid"]}

            report = await adm.rpc_get_report(**W)
            assert report["safe_mode"] is True and report["state"] == "active"
            assert (report["files"], report["directories"]) == (1, 2)
            assert report["last_checkpoint_txid"] == saved["txid"] and report["last_checkpoint_time_ms"] > 0
            assert report["namespace_id"] == 9 and report["cluster_id"] == "CID-sm"
            assert report["journals"] and report["journals"][0]["disabled"] == "false"
            with pytest.raises(PermissionDeniedError):
                await adm.rpc_get_report(**BOB)
            # /jmx's NameNodeInfo.Safemode (Hadoop's tip while on, empty while off) and /metrics say so too
            http = NameNodeHttpServer(nn)

            def shown():
                beans = {b["name"].split("name=")[1]: b for b in http.beans()}
                gauge = http.registry.get_sample_value("qjournal_namenode_safe_mode")
                return beans["NameNodeInfo"]["Safemode"], gauge
            tip, gauge = shown()
            assert tip.startswith("Safe mode is ON") and "-safemode leave" in tip and gauge == 1.0

            assert await adm.rpc_set_safe_mode("leave", **W) is False
            assert shown() == ("", 0.0)
            await cp.rpc_mkdirs("/b", **W)
            seg = await adm.rpc_roll_edits(**W)
            assert seg == nn.editlog.segment_txid == nn.last_applied_txid
            assert await adm.rpc_roll_edits(**W) == seg + 2   # an empty segment is rolled too
        finally:
            await nn.stop()
        # safe mode is not persisted: a restart comes up out of it
        nn2 = NameNode(conf, "nn1")
        await nn2.start(serve=False)
        try:
            assert nn2.safe_mode is False and nn2.last_checkpoint_txid == saved["txid"]
        finally:
            await nn2.stop()

    asyncio.run(main())


def test_safe_mode_is_per_namenode_and_the_standby_saves_its_own_image(tmp_path):
    async def main():
        nn1, nn2, _conf = await start_pair(tmp_path)
        try:
            await nn1.ha_service.transition_to_active("user")
            await nn1.client_protocol.rpc_mkdirs("/x", **W)
            await nn1.admin_protocol.rpc_set_safe_mode("enter", **W)
            assert nn2.safe_mode is False   # entering on the active leaves the standby as it was
            with pytest.raises(StandbyError):   # the standby answers a write as a standby (client fails over)
                await nn2.client_protocol.rpc_mkdirs("/y", **W)
            await nn2.admin_protocol.rpc_set_safe_mode("enter", **W)
            st = await nn2.ha_service.rpc_get_service_status()
            assert st["ready_to_become_active"] is False and "safe mode" in st["not_ready_reason"]
            await nn2.ha_service.rpc_monitor_health()   # healthy without the key
            await nn1.editlog.roll()
            await nn2.tailer.catch_up(nn2.shared_reader)
            saved = await nn2.admin_protocol.rpc_save_namespace(**W)
            assert saved["saved"] and saved["txid"] == nn2.last_applied_txid
            assert [t for t, _ in img.list_images(nn2.name_dir)][-1] == saved["txid"]
            # without the key a standby in safe mode may still be made active, and stays in safe mode
            await nn1.ha_service.transition_to_standby("user")
            await nn2.ha_service.transition_to_active("user")
            assert nn2.state == HAState.ACTIVE and nn2.safe_mode
            with pytest.raises(SafeModeError):
                await nn2.client_protocol.rpc_mkdirs("/y", **W)
        finally:
            await nn1.stop()
            await nn2.stop()

    asyncio.run(main())


def test_not_become_active_in_safe_mode(tmp_path):
    async def main():
        nn1, nn2, _conf = await start_pair(tmp_path, **{"dfs.ha.nn.not-become-active-in-safemode": "true"})
        try:
            await nn2.admin_protocol.rpc_set_safe_mode("enter", **W)
            with pytest.raises(ServiceFailedError, match="not-become-active-in-safemode"):
                await nn2.ha_service.transition_to_active("zkfc")
            with pytest.raises(ServiceFailedError, match="not-become-active-in-safemode"):
                await nn2.ha_service.transition_to_observer("user")
            assert nn2.state == HAState.STANDBY
            with pytest.raises(HealthCheckFailedError, match="UNHEALTHY to ZKFC in safe mode"):
                await nn2.ha_service.rpc_monitor_health()
            await nn1.ha_service.transition_to_active("user")
            await nn1.ha_service.rpc_monitor_health()   # not in safe mode: healthy
            await nn2.admin_protocol.rpc_set_safe_mode("leave", **W)
            await nn2.ha_service.rpc_monitor_health()
            await nn2.ha_service.transition_to_observer("user")
        finally:
            await nn1.stop()
            await nn2.stop()

    asyncio.run(main())
