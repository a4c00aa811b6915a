"""A small filesystem that can be filled on demand: the chaos harnesses' "disk full" fault.

Why a module: the JournalNode harness and the whole-cluster harness both need a directory whose
free space they control. Without root no size cap can be put on an ordinary directory (no quota,
no loop device), so the fault is then skipped and the caller reports it.

A :class:`SmallDisk` is a tmpfs of a few MiB mounted on a directory; :meth:`SmallDisk.fill` writes a
ballast file that leaves a few KiB (so the next append fails mid-way with ENOSPC), :meth:`free`
deletes it, :meth:`unmount` (lazy) undoes the mount. Every step is idempotent.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

__all__ = ["SmallDisk", "DEFAULT_BYTES"]

DEFAULT_BYTES = 8 * 1024 * 1024


class SmallDisk:
    """A tmpfs of ``size_bytes`` on ``path`` (see :meth:`mount`)."""

    def __init__(self, path: str, size_bytes: int = DEFAULT_BYTES) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self.mounted = False
        self.ballast: str | None = None

    def mount(self) -> str | None:
        """Mount the tmpfs. Returns None on success, else why it could not be done."""
        if os.geteuid() != 0 or not shutil.which("mount"):
            return "not root: no tmpfs mount possible"
        os.makedirs(self.path, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.size_bytes}", "tmpfs", self.path],
                           capture_output=True, timeout=10)
        if r.returncode != 0:
            return f"mount failed: {r.stderr.decode().strip()}"
        self.mounted = True
        return None

    @property
    def full(self) -> bool:
        return self.ballast is not None

    def fill(self) -> bool:
        """Write the ballast. Returns False when the disk was already too full to create it
        (it is full all the same)."""
        if not self.mounted or self.ballast is not None:
            return False
        path = os.path.join(self.path, "ballast")
        st = os.statvfs(self.path)
        free = st.f_bavail * st.f_frsize
        try:
            f = open(path, "wb", buffering=0)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            return False
        with f:
            left = max(0, free - 4096)
            chunk = b"\0" * (1 << 20)
            while left > 0:
                n = min(left, len(chunk))
                try:
                    f.write(chunk[:n])
                except OSError:
                    break
                left -= n
        self.ballast = path
        return True

    def free(self) -> None:
        """Delete the ballast (if any)."""
        if self.ballast is not None:
            try:
                os.unlink(self.ballast)
            except FileNotFoundError:
                pass
            self.ballast = None

    def unmount(self) -> None:
        """Lazy unmount (processes may still hold files there)."""
        if self.mounted:
            subprocess.run(["umount", "-l", self.path], capture_output=True, timeout=10)
            self.mounted = False
