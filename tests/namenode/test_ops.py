"""Edit-op codec: round trips, bad bodies, the column decoder (invariants of namenode/ops.py)."""

import dataclasses

import msgpack
import pytest

from qjournal.errors import CorruptRecordError
from qjournal.namenode import ops as O
from qjournal.protocol.segment import encode_header, encode_record

CID = bytes(range(16))

SAMPLES = [
    O.StartLogSegmentOp("nn", O.NO_CLIENT_ID, O.NO_CALL_ID, 1),
    O.EndLogSegmentOp("nn", O.NO_CLIENT_ID, O.NO_CALL_ID, 2),
    O.MkdirOp("alice", CID, 1, 3, inode=16386, parent=16385, name="a", path="/a", perm=0o755,
              owner="alice", group="staff", mtime=3),
    O.CreateOp("alice", CID, 2, 4, inode=16387, parent=16386, name="f", path="/a/f", perm=0o644,
               owner="alice", group="staff", mtime=4, atime=4, replication=2, block_size=1 << 20,
               length=0, overwrite_inode=0),
    O.DeleteOp("alice", CID, 3, 5, inode=16387, parent=16386, path="/a/f", mtime=5),
    O.RenameOp("alice", CID, 4, 6, inode=16386, src_parent=16385, dst_parent=16385, dst_name="b",
               src_path="/a", dst_path="/b", mtime=6, overwrite_inode=0),
    O.SetPermissionOp("alice", CID, 5, 7, inode=16386, path="/b", perm=0o700),
    O.SetOwnerOp("root", CID, 6, 8, inode=16386, path="/b", owner=None, group="g"),
    O.SetTimesOp("alice", CID, 7, 9, inode=16386, path="/b", mtime=-1, atime=10),
    O.SetReplicationOp("alice", CID, 8, 10, inode=16386, path="/b", replication=5),
]


def test_every_opcode_has_a_sample_and_round_trips():
    assert sorted(O.OPS) == sorted(s.OPCODE for s in SAMPLES)
    for op in SAMPLES:
        code, body = O.encode_op(op)
        assert code == op.OPCODE
        assert O.decode_op(code, body) == op
        assert O.OPCODES_BY_NAME[op.NAME] == code


def test_each_body_holds_every_field_in_declaration_order():
    # the generated to_body of each op class is the generic map of the op's fields (same bytes on disk)
    for op in SAMPLES:
        generic = O.EditOp.to_body(op)
        assert list(generic) == [f.name for f in dataclasses.fields(op)]
        assert op.to_body() == generic and list(op.to_body()) == list(generic), op.NAME
        assert O.encode_body(op) == msgpack.packb(generic, use_bin_type=True)


@pytest.mark.parametrize("opcode,body,needle", [
    (0x7E, b"\x80", "unknown edit opcode 0x7e at txid 9"),
    (O.OP_MKDIR, b"\xc1", "not valid msgpack"),
    (O.OP_MKDIR, msgpack.packb([1, 2]), "expected a map"),
    (O.OP_MKDIR, msgpack.packb({"user": "u"}), "'client_id' is missing"),
    (O.OP_SET_PERMISSION, msgpack.packb({"user": "u", "client_id": CID, "call_id": 1, "ts": 1,
                                          "inode": "x", "path": "/", "perm": 1}),
     "'inode' has type str"),
    (O.OP_MKDIR, O.encode_body(SAMPLES[2]).replace(b"staff", b"\xff\xfe\xfd\xfc\xfb"), "msgpack"),
])
def test_bad_bodies_name_opcode_field_and_txid(opcode, body, needle):
    with pytest.raises(CorruptRecordError) as ei:
        O.decode_op(opcode, body, txid=9)
    assert needle in str(ei.value)
    assert "txid 9" in str(ei.value)


def test_set_owner_null_is_only_allowed_for_owner_and_group():
    body = O.encode_body(SAMPLES[7])
    d = msgpack.unpackb(body)
    d["path"] = None
    with pytest.raises(CorruptRecordError, match="'path'"):
        O.decode_op(O.OP_SET_OWNER, msgpack.packb(d))


def test_decode_columns_matches_decode_op_and_isolates_bad_rows():
    txids = list(range(1, len(SAMPLES) + 3))
    opcodes = [op.OPCODE for op in SAMPLES] + [0x7E, O.OP_MKDIR]
    bodies = [O.encode_body(op) for op in SAMPLES] + [b"\x80", b"\xc1"]
    cols = O.decode_columns(txids, opcodes, bodies)
    assert set(cols) == set(O.COLUMN_NAMES)
    assert all(len(v) == len(txids) for v in cols.values())
    for i, op in enumerate(SAMPLES):
        assert cols["op"][i] == op.NAME and cols["error"][i] is None
        for k, v in op.to_body().items():
            assert cols[k][i] == v, (op.NAME, k)
    assert cols["op"][-2] == "OP_UNKNOWN_0x7e" and "unknown" in cols["error"][-2]
    assert cols["inode"][-1] is None and "msgpack" in cols["error"][-1]


def test_decode_segment_columns_reads_a_segment_image():
    buf = encode_header() + b"".join(
        encode_record(i + 1, op.OPCODE, O.encode_body(op)) for i, op in enumerate(SAMPLES))
    cols = O.decode_segment_columns(buf + b"\x00" * 8)
    assert cols["txid"] == list(range(1, len(SAMPLES) + 1))
    assert cols["op"][3] == "OP_CREATE" and cols["path"][3] == "/a/f"


def test_ops_module_does_not_import_pyarrow_or_pandas():
    import subprocess
    import sys
    code = ("import sys, qjournal.namenode.ops; "
            "bad=[m for m in ('pyarrow','pandas') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
