"""util.packer: the reused per-thread packer packs exactly as ``msgpack.packb`` and survives errors."""

from __future__ import annotations

import threading

import msgpack
import pytest

from qjournal.util.packer import packb

VALUES = [None, True, 0, -1, 2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1, 1.5, "", "é", b"", b"\x00\xff",
          [1, [2, [3]]], (1, 2), {"a": b"x", "b": {"c": None}}, {1: "int key"}, bytearray(b"ab"),
          "x" * 70000, [b"y" * 70000, {"k": list(range(100))}]]


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_same_bytes_as_msgpack_packb(value):
    assert packb(value) == msgpack.packb(value, use_bin_type=True)


@pytest.mark.parametrize("bad", [[1, object()], {"a": {1, 2}}, 2 ** 64, [b"z" * 100, object()]])
def test_an_error_raises_as_packb_does_and_leaves_nothing_behind(bad):
    with pytest.raises(Exception) as mine:
        packb(bad)
    with pytest.raises(Exception) as theirs:
        msgpack.packb(bad, use_bin_type=True)
    assert type(mine.value) is type(theirs.value)
    assert packb([7]) == msgpack.packb([7])  # the half-packed value did not stay in the buffer


def test_each_thread_packs_alone():
    results: dict[int, list[bool]] = {}

    def work(k: int) -> None:
        value = {"thread": k, "payload": [k] * 1000}
        want = msgpack.packb(value, use_bin_type=True)
        results[k] = [packb(value) == want for _ in range(200)]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(all(v) for v in results.values()) and len(results) == 4
