"""Parquet image: save/load round trip, checksum verification, newest-valid choice, purge."""

import os

import pytest

from qjournal.errors import CorruptSegmentError
from qjournal.namenode import image as I


def cols(n):
    ids = [16385] + [16386 + i for i in range(n)]
    return {"inode_id": ids[::-1], "parent_id": [0] + [16385] * n,
            "name": [""] + [f"f{i}" for i in range(n)][::-1][::-1],
            "type": ["d"] + ["f"] * n, "permission": [0o755] + [0o644] * n,
            "owner": ["root"] * (n + 1), "group": ["supergroup"] * (n + 1),
            "mtime": list(range(n + 1)), "atime": [0] * (n + 1), "replication": [0] + [3] * n,
            "block_size": [0] + [1 << 27] * n, "length": [0] * (n + 1)}


def info(txid, last):
    return I.ImageInfo(txid, 1, 42, "CID-x", last)


def test_round_trip_sorted_with_metadata(tmp_path):
    p = I.save_image(str(tmp_path), cols(5), info(7, 16390))
    assert os.path.basename(p) == "fsimage_0000000000000000007"
    got_info, table = I.load_image(p)
    assert got_info == info(7, 16390)
    assert table.column("inode_id").to_pylist() == sorted(table.column("inode_id").to_pylist())
    assert table.num_rows == 6
    assert open(p + ".crc").read().split()[1] == str(os.path.getsize(p))


@pytest.mark.parametrize("damage,needle", [
    ("flip", "checksum"), ("truncate", "length"), ("nocrc", "checksum file is missing"),
    ("badcrc", "malformed checksum"),
])
def test_damaged_image_is_refused_and_newest_valid_skips_it(tmp_path, damage, needle):
    d = str(tmp_path)
    I.save_image(d, cols(2), info(5, 16387))
    p = I.save_image(d, cols(3), info(9, 16388))
    data = open(p, "rb").read()
    if damage == "flip":
        open(p, "wb").write(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "truncate":
        open(p, "wb").write(data[:-3])
    elif damage == "nocrc":
        os.unlink(p + ".crc")
    else:
        open(p + ".crc", "w").write("zz\n")
    with pytest.raises(CorruptSegmentError, match=needle) as ei:
        I.load_image(p)
    assert p in str(ei.value)
    got = I.newest_valid_image(d)
    assert got is not None and got[0].txid == 5


def test_upload_bytes_verified_and_purge(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    for t in (3, 6, 9):
        I.save_image(a, cols(1), info(t, 16386))
    data, crc = I.read_image_bytes(I.image_path(a, 9))
    with pytest.raises(CorruptSegmentError, match="does not match 8"):
        I.save_image_bytes(b, 8, data, crc)
    with pytest.raises(CorruptSegmentError, match="checksum"):
        I.save_image_bytes(b, 9, data[:-1] + b"\x00", crc)
    I.save_image_bytes(b, 9, data, crc)
    assert I.load_image(I.image_path(b, 9))[0].txid == 9
    assert I.purge_images(a, 2) == [3]
    assert [t for t, _ in I.list_images(a)] == [6, 9]
    assert not os.path.exists(I.image_path(a, 3) + ".crc")


# --- the NameNode's own paths: its inode table's snapshot written, the file streamed back in batches ---------
from qjournal.namenode.namespace import CallContext, Namespace  # noqa: E402

SU = CallContext("hdfs", ("supergroup",), b"\x01" * 16, 1, 1_700_000_000_000)


def busy_namespace() -> Namespace:
    """Files, directories, deletes (dead rows in the table) and a directory moved under a newer one (a child
    whose parent has a higher id: the loader meets it before its parent)."""
    ns = Namespace(superuser="hdfs")
    ns.mkdirs(SU, "/old/sub")
    for i in range(300):
        ns.create(SU, f"/old/sub/f{i:03d}", replication=1 + i % 3)
    ns.mkdirs(SU, "/new")
    ns.rename(SU, "/old/sub", "/new/sub")
    for i in range(0, 300, 3):
        ns.delete(SU, f"/new/sub/f{i:03d}")
    ns.set_owner(SU, "/new", "alice", "staff")
    ns.set_permission(SU, "/new/sub/f001", 0o600)
    return ns


def load_streamed(path, batch_rows=64) -> Namespace:
    info, batches = I.iter_image_batches(path, batch_rows=batch_rows)
    return Namespace.from_image_batches(batches, info.last_inode_id, superuser="hdfs", where=path)


def test_snapshot_written_and_streamed_back_is_the_same_namespace(tmp_path):
    ns = busy_namespace()
    snap = ns.image_snapshot()
    want = ns.snapshot()
    ns.create(SU, "/after-the-snapshot")  # copy on write: the snapshot does not see it
    ns.delete(SU, "/new/sub/f001")
    p = I.save_image(str(tmp_path), snap, info(77, want[0]))
    assert load_streamed(p).snapshot() == want
    assert load_streamed(p, batch_rows=100_000).snapshot() == want
    # the same rows as the column path writes them (the pipeline's and the tools')
    _info, table = I.load_image(p)
    assert Namespace.from_image_columns(table.to_pydict(), want[0], superuser="hdfs").snapshot() == want


def test_an_image_written_from_columns_streams_back(tmp_path):
    """Images written before the inode table (from ``{column: list}``, as the pipeline and earlier NameNodes
    write them: the format is the same) load through the streaming path."""
    ns = busy_namespace()
    p = I.save_image(str(tmp_path), ns.to_image_columns(), info(5, ns.last_inode_id))
    assert load_streamed(p).snapshot() == ns.snapshot()


@pytest.mark.parametrize("damage,needle", [
    ("unsorted", "not sorted by unique inode_id"), ("duplicate", "not sorted by unique inode_id"),
    ("null", "null value"), ("type", "has type 'x'"), ("parent", "no parent directory 999999"),
    ("name", "duplicate name"), ("cycle", "not reachable from the root"),
])
def test_streamed_rows_are_checked(tmp_path, damage, needle):
    import pyarrow as pa
    c = cols(4)
    c["inode_id"] = sorted(c["inode_id"])  # rows in id order: the root, then f0..f3 under it
    if damage == "unsorted":
        c["inode_id"][2], c["inode_id"][3] = c["inode_id"][3], c["inode_id"][2]
    elif damage == "duplicate":
        c["inode_id"][3] = c["inode_id"][2]
    elif damage == "null":
        c["name"][2] = None
    elif damage == "type":
        c["type"][3] = "x"
    elif damage == "parent":
        c["parent_id"][4] = 999999
    elif damage == "name":
        c["name"][4] = c["name"][3]
    else:  # two directories, each the other's parent
        c["type"][3], c["type"][4] = "d", "d"
        c["parent_id"][3], c["parent_id"][4] = c["inode_id"][4], c["inode_id"][3]
    table = pa.table(c, schema=I.IMAGE_SCHEMA).replace_schema_metadata(info(3, 16390).to_metadata())
    import io
    import pyarrow.parquet as pq
    sink = io.BytesIO()
    pq.write_table(table, sink)
    data = sink.getvalue()
    p = os.path.join(str(tmp_path), I.image_file_name(3))
    open(p, "wb").write(data)
    open(p + ".crc", "wb").write(I.crc_line(data))
    with pytest.raises(CorruptSegmentError, match=needle):
        load_streamed(p, batch_rows=2)


def test_the_namenode_skips_an_image_whose_rows_do_not_load(tmp_path):
    """An image with a good checksum whose rows break the tree (a writer's bug, not the disk's) is skipped at
    start-up for the image before it, and the edits since then replay (Hadoop's FSImage does the same)."""
    import asyncio

    from qjournal.config import Configuration
    from qjournal.namenode.daemon import NameNode
    from qjournal.namenode.format import format_namenode

    async def main():
        c = Configuration()
        c.set("dfs.namenode.name.dir", f"file://{tmp_path}/name")
        c.set("qjournal.namenode.superuser", "hdfs")
        c.set("dfs.namenode.checkpoint.check.period", "3600s")
        c.set("dfs.ha.log-roll.period", "0")
        c.set("dfs.namenode.num.extra.edits.retained", "1000000")
        await format_namenode(c, cluster_id="CID-x", namespace_id=5)
        nn = NameNode(c)
        await nn.start(serve=False)
        w = dict(user="hdfs", groups=["supergroup"])
        await nn.client_protocol.rpc_mkdirs("/a/b", **w)
        txid = await nn.checkpointer.checkpoint()
        await nn.client_protocol.rpc_create("/a/b/f", **w)
        want = nn.namespace.snapshot()
        await nn.stop()
        bad = nn.namespace.to_image_columns()
        bad["parent_id"][-1] = 999999  # a dangling parent, checksum made to match
        layout = I.iter_image_batches(I.image_path(f"{tmp_path}/name", txid))[0].layout_version
        I.save_image(f"{tmp_path}/name", bad, I.ImageInfo(txid, layout, 5, "CID-x", 0))
        nn2 = NameNode(c)
        await nn2.start(serve=False)
        assert nn2.last_checkpoint_txid == 0 and nn2.namespace.snapshot() == want
        await nn2.stop()

    asyncio.run(main())
