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
