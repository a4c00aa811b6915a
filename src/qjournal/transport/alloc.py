"""Keep glibc from handing large frame buffers back to the kernel after every call.

Why this module exists: a ``journal`` batch is one frame of a few hundred KiB.
Each call allocates its frame (msgpack output, then header + body) and frees it
when the write completes. With glibc's default malloc settings such blocks sit
at the top of the heap or in fresh ``mmap`` regions, and every free gives the
pages back to the kernel (trim / ``munmap``); the next frame then page-faults
all of its pages in again. Measured on this machine (``bench/rpc_bench.py``
notes): encoding one 200 KB batch costs about 135 us with the defaults and
about 18 us once the thresholds below are raised, and the client's CPU per
batch falls accordingly.

:func:`tune_allocator` raises ``M_MMAP_THRESHOLD`` (blocks below it come from
the heap and are reused) and ``M_TRIM_THRESHOLD`` (free memory at the top of
the heap is kept up to it). It is called once by the first ``RpcServer`` or
``RpcClient`` of a process; setting ``QJOURNAL_MALLOC_TUNING=0`` in the
environment disables it. On a C library other than glibc it does nothing.

Invariants:

1. The tuning is applied at most once per process and never fails loudly: a
   missing ``mallopt`` leaves the process as it was.
2. The limits are bounded (64 MiB mmap threshold = the maximum frame size,
   256 MiB kept at the top of the heap), so the memory kept is bounded too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_allocator"]

log = logging.getLogger("qjournal.transport.alloc")

#: blocks smaller than this come from the (reused) heap, not from fresh mmap regions
MMAP_THRESHOLD_BYTES = 64 * 1024 * 1024
#: free memory kept at the top of the heap instead of being returned to the kernel
TRIM_THRESHOLD_BYTES = 256 * 1024 * 1024

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_done = False
_applied = False


def tune_allocator() -> bool:
    """Raise glibc's mmap and trim thresholds, once per process.

    Returns:
        True if the thresholds are (now or already) raised; False if disabled by
        ``QJOURNAL_MALLOC_TUNING=0`` or not supported by the C library.
    """
    global _done, _applied
    if _done:
        return _applied
    _done = True
    if os.environ.get("QJOURNAL_MALLOC_TUNING", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    ok = mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
    _applied = ok
    if not ok:
        log.debug("mallopt refused the RPC buffer thresholds; keeping the C library defaults")
    return ok
