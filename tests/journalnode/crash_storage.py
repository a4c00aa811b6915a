"""A JournalStorage in memory that models durability, for crash tests of the Journal.

Each file is an inode with ``data`` (what a running process sees) and
``durable`` (what survives a crash: the data as of its last ``sync``). Directory
entries are likewise volatile until ``sync_dir`` of their directory. Every
mutating call is one *step*; ``crash_at=i`` raises :class:`Crash` instead of
performing step ``i``. :meth:`reboot` then returns the state a restarted node
would find, with the unsynced tail of each file kept according to ``tail``:
``"none"`` (lost), ``"all"`` (the page cache happened to reach the disk) or
``"torn"`` (half of it: a torn write).

``preallocate=N`` models the disk's preallocation of the open segment
(``create(grows=True)``): the file carries N zero bytes after its data, appends
overwrite them in place, and a crash keeps the zero tail (what ``posix_fallocate``
leaves on a real disk once synced).
"""

from __future__ import annotations

import io

from qjournal.errors import JournalLockedError
from qjournal.journalnode.storage import JournalStorage


class Crash(BaseException):
    """The simulated power cut (not an Exception, so nothing in the Journal catches it)."""


class _Inode:
    def __init__(self, data: bytes = b"") -> None:
        self.data = bytearray(data)
        self.durable = bytearray()
        #: end of the written data of a preallocated file (None: appends extend the file)
        self.written: int | None = None


class CrashStorage(JournalStorage):
    def __init__(self, crash_at: int | None = None, preallocate: int = 0) -> None:
        self.where = "mem:/current"
        self.crash_at = crash_at
        self.preallocate = preallocate
        self.steps = 0
        self.files: dict[str, _Inode] = {}         # volatile directory entries
        self.durable_files: dict[str, _Inode] = {}  # entries as of the last sync_dir
        self.locked = False

    def _step(self, what: str) -> None:
        if self.crash_at is not None and self.steps == self.crash_at:
            self.steps += 1
            raise Crash(what)
        self.steps += 1

    @staticmethod
    def _sub(name: str) -> str:
        return name.split("/", 1)[0] if "/" in name else ""

    # lifecycle
    def lock(self) -> None:
        if self.locked:
            raise JournalLockedError("Cannot lock storage mem:/: already locked")
        self.locked = True

    def close(self) -> None:
        self.locked = False

    def wipe(self) -> None:
        self._step("wipe")
        self.files.clear()
        self.durable_files.clear()

    # reading
    def list_files(self, subdir: str = "") -> list[str]:
        pre = f"{subdir}/" if subdir else ""
        return sorted(n[len(pre):] for n in self.files if self._sub(n) == subdir and n.startswith(pre))

    def exists(self, name: str) -> bool:
        return name in self.files

    def size(self, name: str) -> int:
        return len(self._ino(name).data)

    def _ino(self, name: str) -> _Inode:
        try:
            return self.files[name]
        except KeyError:
            raise FileNotFoundError(name) from None

    def read(self, name: str, offset: int = 0, length: int = -1) -> bytes:
        d = bytes(self._ino(name).data)
        return d[offset:] if length < 0 else d[offset:offset + length]

    def open_read(self, name: str):
        return io.BytesIO(bytes(self._ino(name).data))

    # content
    def create(self, name: str, data: bytes, *, grows: bool = False) -> None:
        self._step(f"create {name}")
        ino = self.files[name] = _Inode(data)
        if grows and self.preallocate:
            ino.written = len(data)
            ino.data += bytes(self.preallocate)

    def append(self, name: str, data: bytes) -> None:
        self._step(f"append {name}")
        ino = self._ino(name)
        if ino.written is None:
            ino.data += data
            return
        end = ino.written + len(data)
        if end > len(ino.data):
            ino.data += bytes(end - len(ino.data) + self.preallocate)
        ino.data[ino.written:end] = data
        ino.written = end

    def sync(self, name: str) -> None:
        self._step(f"sync {name}")
        ino = self._ino(name)
        ino.durable = bytearray(ino.data)

    def truncate(self, name: str, length: int) -> None:
        self._step(f"truncate {name}")
        ino = self._ino(name)
        del ino.data[length:]
        if ino.written is not None:
            ino.written = len(ino.data)

    # directory
    def rename(self, src: str, dst: str) -> None:
        self._step(f"rename {src} {dst}")
        self.files[dst] = self.files.pop(src)

    def delete(self, name: str) -> None:
        self._step(f"delete {name}")
        self.files.pop(name, None)

    def sync_dir(self, subdir: str = "") -> None:
        self._step(f"sync_dir {subdir}")
        for n in [n for n in self.durable_files if self._sub(n) == subdir]:
            del self.durable_files[n]
        for n, ino in self.files.items():
            if self._sub(n) == subdir:
                self.durable_files[n] = ino

    # small values: the same steps as the disk implementation
    def write_atomic(self, name: str, data: bytes) -> None:
        tmp = f"{name}.tmp"
        self.create(tmp, data)
        self.sync(tmp)
        self.rename(tmp, name)
        self.sync_dir(self._sub(name))

    def write_best_effort(self, name: str, data: bytes) -> None:
        self._step(f"best-effort {name}")
        if name not in self.files:
            self.files[name] = _Inode()
        self.files[name].data[:len(data)] = data

    # crash
    def reboot(self, tail: str = "none") -> "CrashStorage":
        """The storage a restarted node finds (see module docstring)."""
        out = CrashStorage(preallocate=self.preallocate)
        seen: dict[int, _Inode] = {}
        for name, ino in sorted(self.durable_files.items()):
            new = seen.get(id(ino))
            if new is None:
                kept = bytes(ino.durable)
                if tail != "none" and ino.data[:len(kept)] == kept and len(ino.data) > len(kept):
                    extra = bytes(ino.data[len(kept):])
                    kept += extra if tail == "all" else extra[: max(1, len(extra) // 2)]
                elif tail != "none" and len(ino.data) == len(kept) and ino.data != kept:
                    # written in place (preallocated): the changed bytes reach the disk, or half of them
                    i = next(k for k in range(len(kept)) if ino.data[k] != kept[k])
                    j = len(kept) - next(k for k in range(len(kept)) if ino.data[-1 - k] != kept[-1 - k])
                    n = j - i if tail == "all" else max(1, (j - i) // 2)
                    kept = kept[:i] + bytes(ino.data[i:i + n]) + kept[i + n:]
                new = _Inode(kept)
                new.durable = bytearray(kept)
                seen[id(ino)] = new
            out.files[name] = new
            out.durable_files[name] = new
        return out
