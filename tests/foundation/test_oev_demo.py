"""``qjournal oev`` (dump and --scan with exit codes) and the interim ``qjournal demo``."""

from __future__ import annotations

import json
import subprocess
import sys

from qjournal.cli import oev
from qjournal.cli.demo import run_demo
from qjournal.cli.main import main as cli_main
from qjournal.namenode import ops
from qjournal.protocol import segment as seg

from .helpers import run


def write_seg(path, recs, tail=b""):
    with open(path, "wb") as f:
        f.write(seg.encode_header() + seg.encode_records(recs) + tail)
    return str(path)


def test_dump_json_decodes_namenode_ops_and_falls_back_to_hex(tmp_path, capsys):
    op = ops.MkdirOp(user="alice", client_id=b"\x01" * 16, call_id=3, ts=1000, inode=16386, parent=16385,
                     name="d", path="/d", perm=0o755, owner="alice", group="staff", mtime=1000)
    opcode, b = ops.encode_op(op)
    p = write_seg(tmp_path / seg.segment_file_name(1, 2),
                  [seg.EditRecord(1, opcode, b), seg.EditRecord(2, seg.OP_DATA, b"\x00\xff")])
    assert cli_main(["oev", "-i", p]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["op"] == "OP_MKDIR" and lines[0]["fields"]["path"] == "/d"
    assert lines[0]["fields"]["client_id"] == "01" * 16 and lines[0]["txid"] == 1
    assert lines[1]["body_hex"] == "00ff" and lines[1]["length"] == 2
    assert lines[1]["checksum"].startswith("0x")


def test_dump_xml(tmp_path, capsys):
    p = write_seg(tmp_path / "x", [seg.EditRecord(5, seg.OP_DATA, b"<&>")])
    assert cli_main(["oev", "-i", p, "-p", "xml"]) == 0
    out = capsys.readouterr().out
    assert "<EDITS>" in out and "<TXID>5</TXID>" in out and "<BODY_HEX>3c263e</BODY_HEX>" in out


def test_stats(tmp_path, capsys):
    p = write_seg(tmp_path / "s", [seg.EditRecord(t, seg.OP_DATA, b"x") for t in range(3, 8)])
    assert cli_main(["oev", "-i", p, "-p", "stats"]) == 0
    out = capsys.readouterr().out
    assert "records: 5 (txids 3-7)" in out and "OP_DATA" in out and out.rstrip().endswith("5")


def test_scan_clean_and_corrupt_exit_codes(tmp_path, capsys):
    recs = [seg.EditRecord(t, seg.OP_DATA, b"r%d" % t) for t in range(1, 6)]
    p = write_seg(tmp_path / seg.segment_file_name(1, 5), recs)
    assert cli_main(["oev", "-i", p, "--scan"]) == 0
    assert "valid range: txids 1-5" in capsys.readouterr().out
    data = bytearray(open(p, "rb").read())
    off = seg.HEADER_SIZE + 2 * len(recs[0].encode()) + seg.REC_HEAD_SIZE
    data[off] ^= 1
    open(p, "wb").write(bytes(data))
    assert cli_main(["oev", "-i", p, "--scan"]) == 1
    out = capsys.readouterr().out
    assert "valid range: txids 1-2" in out and "corrupt: checksum mismatch for txid 3" in out
    assert "name-mismatch" in out and "status: CORRUPT" in out
    assert cli_main(["oev", "-i", p]) == 1
    err = capsys.readouterr().err
    assert f"at byte {off - seg.REC_HEAD_SIZE}" in err


def test_scan_torn_tail_of_in_progress_is_not_corruption(tmp_path, capsys):
    recs = [seg.EditRecord(1, seg.OP_DATA, b"a")]
    p = write_seg(tmp_path / seg.segment_file_name(1), recs, tail=seg.encode_record(2, 1, b"bb")[:7])
    assert cli_main(["oev", "-i", p, "--scan"]) == 0
    assert "torn tail of an in-progress segment" in capsys.readouterr().out
    assert cli_main(["oev", "-i", str(tmp_path / "missing")]) == 2


def test_oev_subprocess_entry_point(tmp_path):
    p = write_seg(tmp_path / "s", [seg.EditRecord(1, seg.OP_DATA, b"a")])
    r = subprocess.run([sys.executable, "-m", "qjournal", "oev", "-i", p, "--scan"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and "status: clean" in r.stdout


def test_demo_writes_breaks_restores_and_verifies():
    lines = []
    assert run(run_demo(txns=600, per_segment=200, batch=25, out=lines.append)) == 0
    text = "\n".join(lines)
    assert "injecting fdatasync failures" in text and "restored" in text
    assert "read back txids 1-600" in text and lines[-1].startswith("demo: OK")
