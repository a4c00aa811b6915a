"""ZooKeeper ACLs and auth of the elector's znodes (``ha.zookeeper.acl`` / ``ha.zookeeper.auth``).

Shows: with a digest ACL (all rights for the ZKFC's user) plus ``world:anyone:r``,
the controllers elect normally; a client without the credentials can read the
lock but cannot delete it or the breadcrumb (so it cannot steal the election).
"""

import asyncio

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from qjournal.ha.elector import digest_acl_id, parse_zk_acls

from .fake_ha import Harness
from qjournal.util.waiting import async_wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def test_digest_acl_protects_the_lock(zookeeper, zk_parent):
    acls = parse_zk_acls(f"digest:{digest_acl_id('zkfc', 's3cret')}:cdrwa,world:anyone:r")

    class AclHarness(Harness):
        def settings(self, nn_id):
            s = super().settings(nn_id)
            s.elector.acls = acls
            s.elector.auth = [("digest", "zkfc:s3cret")]
            return s

    async def main():
        h = AclHarness(zookeeper.connect_string, zk_parent, 2)
        try:
            await h.start_all()
            await async_wait_until(lambda: len(h.actives()) == 1, "one active", 20)
            lock = h.zkfcs["nn1"].settings.elector.lock_path
            crumb = h.zkfcs["nn1"].settings.elector.breadcrumb_path

            def intruder():
                zk = KazooClient(hosts=zookeeper.connect_string)
                zk.start(timeout=10)
                try:
                    data, _ = zk.get(lock)                 # world:anyone:r
                    assert b'"nn_id"' in data
                    for path in (lock, crumb):
                        with pytest.raises(NoAuthError):
                            zk.set(path, b"evil")
                    with pytest.raises(NoAuthError):
                        zk.delete(lock)                    # delete needs d on the parent
                    acl, _ = zk.get_acls(lock)
                    return sorted((a.id.scheme, a.perms) for a in acl)
                finally:
                    zk.stop()
                    zk.close()
            assert await asyncio.to_thread(intruder) == [("digest", 31), ("world", 1)]
        finally:
            await h.stop_all()
    asyncio.run(main())
