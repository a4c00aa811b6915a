"""The compiled decoder (qjournal.pipeline.vdecode) against the reference path: equal batches, always.

Pure and fast (no Spark). Each test compares ``compiled=True`` with
``compiled=False`` (the scan and ``decode_columns``, the reference) with
``Table.equals``, and also checks that the compiled kernels really took the
cases they should take, so an equality cannot hold only because everything
fell back. Randomised tests print their seed.
"""

from __future__ import annotations

import os
import random

import crc32c
import msgpack
import numpy as np
import pyarrow as pa
import pytest

from qjournal.namenode import ops as nn_ops
from qjournal.pipeline import decode as dec
from qjournal.pipeline import vdecode as vd
from qjournal.pipeline.generate import DAMAGE_KINDS, GenOptions, generate
from qjournal.protocol import segment as seg

CTX = dict(user="alice", client_id=b"\x01" * 16, call_id=7, ts=1000)


def _both(start: int, end: int, data, **kw) -> tuple[pa.Table, pa.Table]:
    """The compiled and the reference decoding of one copy, as tables."""
    got = pa.Table.from_batches(list(dec.decode_segment_batches("j", "n1", start, end, data, **kw)),
                                dec.EDITS_ARROW_SCHEMA)
    want = pa.Table.from_batches(list(dec.decode_segment_batches("j", "n1", start, end, data,
                                                                 compiled=False, **kw)),
                                 dec.EDITS_ARROW_SCHEMA)
    return got, want


def _assert_same(start: int, end: int, data, **kw) -> pa.Table:
    got, want = _both(start, end, data, **kw)
    if not got.equals(want):
        for g, w in zip(got.to_pylist(), want.to_pylist()):
            assert g == w
        assert got.num_rows == want.num_rows
    assert [b.num_rows for b in got.to_batches()] == [b.num_rows for b in want.to_batches()]
    return want


def _segment(start: int, bodies: list[tuple[int, bytes]]) -> bytes:
    return seg.encode_header() + seg.encode_records([(start + i, op, b) for i, (op, b) in enumerate(bodies)])


def _kernel_takes(data: bytes, start: int, end: int) -> bool:
    """The compiled framing and body decoder both accept the whole copy."""
    cols = vd.frame_clean(data, start, end, seg.DEFAULT_MAX_RECORD_BYTES)
    if cols is None:
        return False
    _txids, opcodes, offsets, lengths, _sums = cols
    return vd.decode_bodies(data, offsets, lengths, opcodes) is not None


def test_crc32c_kernel_matches_the_crc32c_package():
    seed = random.randrange(2 ** 32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    for n in list(range(0, 40)) + [rng.randrange(40, 5000) for _ in range(30)]:
        data = rng.randbytes(n)
        assert vd.crc32c(data) == crc32c.crc32c(data), (n, seed)
        if n > 9:  # a kernel over a slice of a larger buffer
            assert int(vd._crc32c_kernel(np.frombuffer(data, np.uint8), 3, n - 5, vd._CRC_TABLES)) \
                == crc32c.crc32c(data[3:n - 5])


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("hist"))
    return generate(GenOptions(seed=11, txns=1600, out=out, roll_every_txns=200, damage=DAMAGE_KINDS))


def _copies(history):
    for d in history.journal_dirs:
        cur = os.path.join(d, "qjournal", "current")
        for name in sorted(os.listdir(cur)):
            start, end = (int(x) for x in name.removeprefix("edits_").split("-"))
            with open(os.path.join(cur, name), "rb") as f:
                yield start, end, f.read()


def test_generated_history_with_every_damage_kind_decodes_identically(history):
    clean = damaged = 0
    for start, end, data in _copies(history):
        for kw in ({}, {"batch_rows": 64}, {"batch_rows": 50, "txid_range": (start + 30, start + 120)}):
            table = _assert_same(start, end, data, **kw)
        if pa.compute.all(table["valid"]).as_py():
            clean += 1
            assert _kernel_takes(data, start, end), (start, end)
        else:
            damaged += 1
    assert clean and damaged, (clean, damaged)


def test_whole_copy_in_one_batch_and_a_wrong_name():
    ops = [nn_ops.StartLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1000),
           nn_ops.MkdirOp(**CTX, inode=16386, parent=16385, name="a", path="/a", owner="o", group="g"),
           nn_ops.SetOwnerOp(**CTX, inode=16386, path="/a", owner=None, group="h"),
           nn_ops.EndLogSegmentOp("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, 1000)]
    data = _segment(10, [nn_ops.encode_op(op) for op in ops])
    got = dec.decode_segment("j", "n1", 10, 13, data)
    assert got.equals(dec.decode_segment("j", "n1", 10, 13, data, compiled=False))
    assert _kernel_takes(data, 10, 13)
    for start, end in ((10, 20), (10, 12), (9, 13), (11, 13), (10, 9), (-1, 2)):
        _assert_same(start, end, data)  # names that do not match the records
    for cut in (0, 5, 16, 20, len(data) - 3):
        _assert_same(10, 13, data[:cut])
    _assert_same(10, 13, data + b"\x00" * 7)
    _assert_same(10, 13, data + b"garbage")
    other_version = bytearray(seg.encode_header(2) + data[seg.HEADER_SIZE:])
    _assert_same(10, 13, bytes(other_version))
    assert vd.frame_clean(bytes(other_version), 10, 13, seg.DEFAULT_MAX_RECORD_BYTES) is None
    _assert_same(10, 13, memoryview(bytearray(data)))  # a writable buffer takes the same kernels


# --- hand-built msgpack bodies ------------------------------------------------------------------

def _s(text: str | bytes, form: str = "fix") -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    n = len(raw)
    if form == "fix":
        assert n < 32
        return bytes([0xA0 | n]) + raw
    code, width = {"8": (0xD9, 1), "16": (0xDA, 2), "32": (0xDB, 4)}[form]
    return bytes([code]) + n.to_bytes(width, "big") + raw


def _b(raw: bytes, form: str = "8") -> bytes:
    code, width = {"8": (0xC4, 1), "16": (0xC5, 2), "32": (0xC6, 4)}[form]
    return bytes([code]) + len(raw).to_bytes(width, "big") + raw


def _i(v: int, form: str) -> bytes:
    """An int in an explicit msgpack form (u8..u64, i8..i64, fix)."""
    if form == "fix":
        return msgpack.packb(v)
    code, width, signed = {"u8": (0xCC, 1, False), "u16": (0xCD, 2, False), "u32": (0xCE, 4, False),
                           "u64": (0xCF, 8, False), "i8": (0xD0, 1, True), "i16": (0xD1, 2, True),
                           "i32": (0xD2, 4, True), "i64": (0xD3, 8, True)}[form]
    return bytes([code]) + v.to_bytes(width, "big", signed=signed)


def _map(pairs: list[tuple[bytes, bytes]], form: str = "fix") -> bytes:
    n = len(pairs)
    if form == "fix":
        assert n < 16
        head = bytes([0x80 | n])
    else:
        code, width = {"16": (0xDE, 2), "32": (0xDF, 4)}[form]
        head = bytes([code]) + n.to_bytes(width, "big")
    return head + b"".join(k + v for k, v in pairs)


def _base(**override: bytes) -> list[tuple[bytes, bytes]]:
    """A mkdir body's fields as (key, value) msgpack pieces, some replaced."""
    fields = {"user": _s("alice"), "client_id": _b(b"\x01" * 16), "call_id": _i(7, "fix"), "ts": _i(1000, "u16"),
              "inode": _i(16386, "u16"), "parent": _i(16385, "u16"), "name": _s("a"), "path": _s("/a"),
              "perm": _i(0o755, "u16"), "owner": _s("o"), "group": _s("g"), "mtime": _i(5, "fix")}
    fields.update(override)
    return [(_s(k), v) for k, v in fields.items()]


#: bodies the compiled decoder must take (and match)
ACCEPTED = {
    "plain": _map(_base(), "16"),
    "map32": _map(_base(), "32"),
    "fixmap": _map(_base()[:10]),
    "missing-fields": _map(_base()[:3]),
    "nil-values": _map(_base(owner=b"\xc0", inode=b"\xc0", client_id=b"\xc0"), "16"),
    "duplicate-key-last-wins": _map(_base() + [(_s("path"), _s("/b")), (_s("owner"), b"\xc0")], "16"),
    "str-forms": _map(_base(name=_s("x" * 40, "8"), path=_s("/p", "16"), owner=_s("é", "32")), "16"),
    "key-forms": _map([(_s("user", "8"), _s("u")), (_s("path", "16"), _s("/q")), (_s("ts", "32"), _i(1, "u8"))]),
    "bin-forms": _map(_base(client_id=_b(b"\x02" * 300, "16")), "16"),
    "bin32": _map(_base(client_id=_b(b"", "32")), "16"),
    "empty-strings": _map(_base(name=_s(""), path=_s("", "8")), "16"),
    "int-widths": _map(_base(inode=_i(2 ** 63 - 1, "u64"), parent=_i(-(2 ** 63), "i64"), mtime=_i(-1, "fix"),
                             ts=_i(-128, "i8"), call_id=_i(-2, "i16"), perm=_i(2 ** 31 - 1, "u32")), "16"),
    "int32-edges": _map(_base(perm=_i(-(2 ** 31), "i32")), "16"),
    "negative-fixint": _map(_base(mtime=b"\xe0", ts=b"\xff"), "16"),
    "other-op-fields": _map(_base() + [(_s("atime"), _i(3, "u8")), (_s("dst_name"), _s("d"))], "16"),
    "utf8": _map(_base(name=_s("日本語"), path=_s("/\U0001F600")), "16"),
}

#: bodies the compiled decoder must hand to the reference (which marks them or decodes them its way)
DECLINED = {
    "str-in-int": _map(_base(inode=_s("not-an-int")), "16"),
    "int-in-str": _map(_base(path=_i(5, "fix")), "16"),
    "bin-in-str": _map(_base(path=_b(b"/a")), "16"),
    "str-in-bin": _map(_base(client_id=_s("c")), "16"),
    "bool": _map(_base(inode=b"\xc3"), "16"),
    "float": _map(_base(mtime=b"\xcb" + bytes(8)), "16"),
    "array-value": _map(_base(path=b"\x91\x01"), "16"),
    "uint64-over-int64": _map(_base(inode=_i(2 ** 63, "u64")), "16"),
    "int32-overflow": _map(_base(perm=_i(2 ** 31, "u32")), "16"),
    "int32-underflow": _map(_base(perm=_i(-(2 ** 31) - 1, "i64")), "16"),
    "unknown-key": _map(_base() + [(_s("colour"), _s("red"))], "16"),
    "txid-key": _map(_base() + [(_s("txid"), _i(1, "fix"))], "16"),
    "bin-key": _map([(_b(b"path"), _s("/a"))]),
    "int-key": _map([(_i(1, "fix"), _s("/a"))]),
    "trailing-bytes": _map(_base(), "16") + b"\x00",
    "empty-body": b"",
    "not-a-map": msgpack.packb([1, 2]),
    "truncated-map": _map(_base(), "16")[:-3],
    "map-count-too-big": b"\xdf\xff\xff\xff\xff" + b"".join(k + v for k, v in _base()),
    "str-length-past-end": _map([(_s("path"), b"\xdb\x00\x00\x10\x00/a")]),
    "invalid-utf8": _map(_base(path=_s(b"/\xff\xfe")), "16"),
    "surrogate": _map(_base(name=_s(b"\xed\xa0\x80")), "16"),
    "invalid-utf8-key": _map([(_s(b"pa\xffh"), _s("/a"))]),
}


def _one_body_segment(body: bytes, opcode: int = nn_ops.OP_MKDIR) -> bytes:
    good = nn_ops.encode_body(nn_ops.MkdirOp(**CTX, inode=1, parent=2, name="n", path="/n"))
    return _segment(1, [(opcode, good), (opcode, body), (opcode, good)])


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_bodies_the_kernel_takes_decode_as_the_reference_does(case):
    data = _one_body_segment(ACCEPTED[case])
    assert _kernel_takes(data, 1, 3), case
    table = _assert_same(1, 3, data)
    assert all(table["valid"].to_pylist()), table["problem"].to_pylist()


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_bodies_the_kernel_declines_go_to_the_reference(case):
    data = _one_body_segment(DECLINED[case])
    assert not _kernel_takes(data, 1, 3), case
    _assert_same(1, 3, data)
    _assert_same(1, 3, data, batch_rows=1)  # the good neighbours' batches still take the kernel


def test_unknown_opcode_goes_to_the_reference():
    data = _one_body_segment(_map(_base(), "16"), opcode=0x7E)
    assert not _kernel_takes(data, 1, 3)
    table = _assert_same(1, 3, data)
    assert table["op"][1].as_py() == "OP_UNKNOWN_0x7e"


# --- randomised damage --------------------------------------------------------------------------

def _records(history) -> tuple[int, int, list[tuple[int, bytes]]]:
    start, end, data = next(iter(_copies(history)))
    recs = [(r.opcode, r.body) for r in seg.iter_records(data)]
    return start, end, recs[:end - start + 1]


def test_random_body_damage_with_good_checksums_decodes_identically(history):
    """Bodies mutated and re-framed with valid CRCs: the body decoder meets garbage, never the framing."""
    seed = random.randrange(2 ** 32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    start, end, recs = _records(history)
    for _ in range(60):
        mutated = list(recs)
        for _k in range(rng.randint(1, 3)):
            r = rng.randrange(len(mutated))
            op, body = mutated[r]
            b = bytearray(body)
            how = rng.choice(("flip", "byte", "cut", "insert", "opcode"))
            if how == "flip" and b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            elif how == "byte" and b:
                b[rng.randrange(len(b))] = rng.choice((0xC0, 0xC2, 0xCC, 0xCF, 0xD3, 0xD9, 0xDB, 0xDE,
                                                       0xDF, 0xE0, 0xFF, 0xA0, 0x80, rng.randrange(256)))
            elif how == "cut":
                del b[rng.randrange(len(b) + 1):]
            elif how == "insert":
                b.insert(rng.randrange(len(b) + 1), rng.randrange(256))
            else:
                op = rng.choice((0x01, 0x7E, nn_ops.OP_CREATE, nn_ops.OP_SET_OWNER))
            mutated[r] = (op, bytes(b))
        data = _segment(start, mutated)
        _assert_same(start, end, data, batch_rows=rng.choice((7, 64, None)))


def test_random_byte_damage_to_a_copy_decodes_identically(history):
    """Flipped, cut or appended bytes anywhere (framing damage): the scan's report, with the same rows."""
    seed = random.randrange(2 ** 32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    start, end, recs = _records(history)
    clean = _segment(start, recs)
    for _ in range(25):
        data = bytearray(clean)
        how = rng.choice(("flip", "cut", "append"))
        if how == "flip":
            for _k in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif how == "cut":
            del data[rng.randrange(len(data)):]
        else:
            data += rng.randbytes(rng.randint(1, 40))
        _assert_same(start, end, bytes(data), batch_rows=rng.choice((50, None)))


# --- code shipped as a zip (addPyFile), where numba cannot cache beside the source --------------

_ZIP_PROBE = """
import os, sys
from qjournal.pipeline import decode as dec, vdecode as vd
assert vd.__file__.startswith(sys.argv[1]), vd.__file__
data = open(sys.argv[2], "rb").read()
start, end = int(sys.argv[3]), int(sys.argv[4])
assert vd.frame_clean(data, start, end, 1 << 20) is not None
got = dec.decode_segment("j", "n", start, end, data)
assert got.equals(dec.decode_segment("j", "n", start, end, data, compiled=False))
print(type(vd._bodies_kernel._cache).__name__)  # numba's FunctionCache, or NullCache without one
"""


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_code_shipped_as_a_zip_compiles_with_or_without_a_writable_cache(history, tmp_path):
    """As on a Spark worker given the driver's zip: the user cache dir when writable, else no cache."""
    import subprocess
    import sys

    from qjournal.pipeline.session import code_zip

    start, end = history.segments[0]
    path = os.path.join(history.journal_dirs[0], "qjournal", "current", seg.segment_file_name(start, end))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    runs = {}
    for case, cache_home in (("writable", tmp_path / "cache"), ("unwritable", blocker / "cache")):
        env = dict(os.environ, PYTHONPATH=code_zip(), XDG_CACHE_HOME=str(cache_home))
        env.pop("NUMBA_CACHE_DIR", None)
        runs[case] = subprocess.Popen([sys.executable, "-c", _ZIP_PROBE, code_zip(), path, str(start), str(end)],
                                      env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
    out = {case: p.communicate(timeout=110) for case, p in runs.items()}
    for case, p in runs.items():
        assert p.returncode == 0, (case, out[case][1][-3000:])
    assert out["writable"][0].split() == ["FunctionCache"]
    assert any(n.endswith(".nbi") for _d, _s, files in os.walk(tmp_path / "cache") for n in files)
    assert out["unwritable"][0].split() == ["NullCache"]
