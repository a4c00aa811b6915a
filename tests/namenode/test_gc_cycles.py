"""The NameNode's request path leaves no reference cycles: what a request allocates is freed by reference counting.

Why it matters: the NameNode freezes its long-lived objects (``util/proc.py``: out of the cyclic collector's sight,
so that a full collection does not scan 10^7 inodes' worth of objects). A frozen object that later becomes cyclic
garbage is never freed; a request in flight while the process freezes is frozen with it. With no cycle per
request, successful or refused, nothing leaks that way (docs/performance.md, "A NameNode holding 10^5-10^7
inodes", item 5).
"""

from __future__ import annotations

import asyncio
import gc

from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.namenode.daemon import NameNode
from qjournal.namenode.format import format_namenode

W = dict(user="hdfs", groups=["supergroup"])
OTHER = dict(user="mallory", groups=["users"])


def test_requests_successful_or_refused_leave_no_cyclic_garbage(tmp_path):
    async def main():
        c = Configuration()
        c.set("dfs.namenode.name.dir", f"file://{tmp_path}/name")
        c.set("qjournal.namenode.superuser", "hdfs")
        c.set("dfs.namenode.checkpoint.check.period", "3600s")
        c.set("dfs.ha.log-roll.period", "0")
        await format_namenode(c, cluster_id="CID-gc", namespace_id=5)
        nn = NameNode(c)
        await nn.start(serve=False)
        cp = nn.client_protocol
        await cp.rpc_mkdirs("/d", **W)
        calls = [
            lambda k: cp.rpc_create(f"/d/f{k}", client_id=b"\x01" * 16, call_id=k, **W),   # success
            lambda k: cp.rpc_create(f"/d/f{k}", client_id=b"\x01" * 16, call_id=k, **W),   # retried: the cache
            lambda k: cp.rpc_get_file_info(f"/d/f{k}", **W),
            lambda k: cp.rpc_create("/d", **W),                                            # exists
            lambda k: cp.rpc_list_status(f"/d/nope{k}", **W),                              # not found
            lambda k: cp.rpc_create(f"/d/x{k}", **OTHER),                                  # permission denied
            lambda k: cp.rpc_rename(f"/d/f{k}", f"/d/g{k}", **W),
            lambda k: cp.rpc_delete(f"/d/g{k}", **W),
        ]
        for k in range(5):  # warm-up: lazily made objects (caches, interned names) are not per request
            for call in calls:
                try:
                    await call(k)
                except QJournalError:
                    pass
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for k in range(5, 30):
                for call in calls:
                    try:
                        await call(k)
                    except QJournalError:
                        pass
            gc.collect()
            frames = sorted({f"{o.f_code.co_filename}:{o.f_code.co_name}" for o in gc.garbage
                             if type(o).__name__ == "frame"})
            found = len(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        await nn.stop()
        assert found == 0, f"{found} objects in reference cycles after 200 requests; frames: {frames}"

    asyncio.run(main())
