"""The NameNode checkpoint image: a Parquet file per checkpoint, with a checksum beside it.

Why Parquet: the image is read by the NameNode at start-up and by the Spark
pipeline (audit, checkpoint building, reports). A columnar file with an
explicit schema serves both without a second format. The contract is in
``docs/architecture.md`` ("Image format").

Layout in a name directory::

    <name dir>/current/fsimage_<txid 19 digits>        Parquet, one row per inode, sorted by inode_id
    <name dir>/current/fsimage_<txid 19 digits>.crc    "<hex crc32c> <byte length>\\n"

The header is the Parquet key-value metadata (``qjournal.image.*``: txid,
layout_version, namespace_id, cluster_id, last_inode_id).

Theory of operation (save): write the Parquet bytes to ``fsimage_<txid>.tmp``
and fsync, write the ``.crc`` file atomically, then rename the Parquet file
into place and fsync the directory. The rename is the commit point: an image
file exists only with its checksum already durable beside it.

Invariants:

1. :func:`load_image` returns an image only if its length and CRC32C match
   the ``.crc`` file and its metadata txid matches its file name; otherwise it
   raises :class:`~qjournal.errors.CorruptSegmentError` naming the path.
2. Rows are sorted by ``inode_id`` (the writer sorts; the loader checks).
3. :func:`newest_valid_image` skips invalid images (logging why) and returns the
   valid image with the highest txid, or None.
"""

from __future__ import annotations

import io
import logging
import os
import re
from dataclasses import dataclass

import crc32c as _crc32c
import pyarrow as pa
import pyarrow.parquet as pq

from qjournal.errors import CorruptSegmentError
from qjournal.namenode.image_schema import IMAGE_COLUMNS, IMAGE_FIELDS
from qjournal.util.fs import atomic_write, fsync_dir

log = logging.getLogger(__name__)

#: Arrow schema of the image (the columns are ``image_schema.IMAGE_FIELDS``).
IMAGE_SCHEMA = pa.schema([(name, getattr(pa, arrow_type)()) for name, arrow_type in IMAGE_FIELDS])

META_TXID = "qjournal.image.txid"
META_LAYOUT_VERSION = "qjournal.image.layout_version"
META_NAMESPACE_ID = "qjournal.image.namespace_id"
META_CLUSTER_ID = "qjournal.image.cluster_id"
META_LAST_INODE_ID = "qjournal.image.last_inode_id"

_IMAGE_RE = re.compile(r"^fsimage_(\d{19})$")


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """The image header (Parquet key-value metadata).

    Attributes:
        txid: every edit up to and including this txid is in the image.
        layout_version: layout of the edit records the image follows.
        namespace_id / cluster_id: identity of the namespace.
        last_inode_id: highest inode id ever handed out (the next is +1).
    """

    txid: int
    layout_version: int
    namespace_id: int
    cluster_id: str
    last_inode_id: int

    def to_metadata(self) -> dict[bytes, bytes]:
        return {META_TXID.encode(): str(self.txid).encode(),
                META_LAYOUT_VERSION.encode(): str(self.layout_version).encode(),
                META_NAMESPACE_ID.encode(): str(self.namespace_id).encode(),
                META_CLUSTER_ID.encode(): self.cluster_id.encode(),
                META_LAST_INODE_ID.encode(): str(self.last_inode_id).encode()}

    @classmethod
    def from_metadata(cls, md: dict[bytes, bytes] | None, where: str) -> "ImageInfo":
        """Parse the header. Raises CorruptSegmentError naming ``where`` and the key."""
        md = md or {}
        def get(key: str) -> str:
            v = md.get(key.encode())
            if v is None:
                raise CorruptSegmentError(f"{where}: image metadata key {key} is missing", path=where)
            return v.decode()
        try:
            return cls(int(get(META_TXID)), int(get(META_LAYOUT_VERSION)),
                       int(get(META_NAMESPACE_ID)), get(META_CLUSTER_ID),
                       int(get(META_LAST_INODE_ID)))
        except ValueError as e:
            raise CorruptSegmentError(f"{where}: bad image metadata: {e}", path=where) from None


def image_file_name(txid: int) -> str:
    """``fsimage_<txid 19 digits>``."""
    return f"fsimage_{txid:019d}"


def parse_image_file_name(name: str) -> int | None:
    """The txid of an image file name, or None (``.crc``, ``.tmp`` and others)."""
    m = _IMAGE_RE.match(name)
    return int(m.group(1)) if m else None


#: the directory of a name dir holding its images and NNVERSION
CURRENT_DIR = "current"


def current_dir(name_dir: str) -> str:
    """``<name dir>/current``: where the images live."""
    return os.path.join(name_dir, CURRENT_DIR)


def image_path(name_dir: str, txid: int) -> str:
    return os.path.join(current_dir(name_dir), image_file_name(txid))


def image_to_bytes(columns: dict[str, list] | pa.Table, info: ImageInfo) -> bytes:
    """Serialise an image to Parquet bytes (rows sorted by inode_id, invariant 2).

    Args:
        columns: ``{column: list}`` for every name in :data:`IMAGE_COLUMNS`, or an Arrow table.
        info: the header.
    """
    table = columns if isinstance(columns, pa.Table) else pa.table(
        {c: columns[c] for c in IMAGE_COLUMNS}, schema=IMAGE_SCHEMA)
    table = table.select(list(IMAGE_COLUMNS)).cast(IMAGE_SCHEMA)
    table = table.sort_by("inode_id")
    table = table.replace_schema_metadata(info.to_metadata())
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


def crc_line(data: bytes) -> bytes:
    """The ``.crc`` file content for ``data``."""
    return f"{_crc32c.crc32c(data):08x} {len(data)}\n".encode("ascii")


def save_image(name_dir: str, columns: dict[str, list] | pa.Table, info: ImageInfo) -> str:
    """Write ``fsimage_<txid>`` and its ``.crc`` durably into ``<name_dir>/current``.

    Commit point: the rename of the Parquet file (module docstring).

    Returns:
        The image path.
    """
    data = image_to_bytes(columns, info)
    return _store(name_dir, info.txid, data, crc_line(data))


def save_image_bytes(name_dir: str, txid: int, data: bytes, crc: bytes) -> str:
    """Store image bytes received from another NameNode (checkpoint upload), after verifying them.

    Raises:
        CorruptSegmentError: the bytes do not match ``crc`` or their header txid is not ``txid``.
    """
    where = f"uploaded image {image_file_name(txid)}"
    _verify(data, crc, where)
    info, _ = _parse(data, where)
    if info.txid != txid:
        raise CorruptSegmentError(f"{where}: header txid {info.txid} does not match {txid}", path=where)
    return _store(name_dir, txid, data, crc)


def _store(name_dir: str, txid: int, data: bytes, crc: bytes) -> str:
    """Write ``fsimage_<txid>`` and its ``.crc`` durably; the image's rename is the commit point."""
    cur = current_dir(name_dir)
    os.makedirs(cur, exist_ok=True)
    path = os.path.join(cur, image_file_name(txid))
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    atomic_write(path + ".crc", crc)
    os.replace(tmp, path)
    fsync_dir(cur)
    return path


def _verify(data: bytes, crc: bytes | None, where: str) -> None:
    if crc is None:
        raise CorruptSegmentError(f"{where}: checksum file is missing", path=where)
    parts = crc.decode("ascii", "replace").split()
    if len(parts) != 2:
        raise CorruptSegmentError(f"{where}: malformed checksum file {crc[:60]!r}", path=where)
    try:
        want_crc, want_len = int(parts[0], 16), int(parts[1])
    except ValueError:
        raise CorruptSegmentError(f"{where}: malformed checksum file {crc[:60]!r}", path=where) from None
    if len(data) != want_len:
        raise CorruptSegmentError(f"{where}: length {len(data)} does not match {want_len} in .crc",
                                  path=where)
    got = _crc32c.crc32c(data)
    if got != want_crc:
        raise CorruptSegmentError(f"{where}: checksum {got:08x} does not match {want_crc:08x} in .crc",
                                  path=where)


def _parse(data: bytes, where: str) -> tuple[ImageInfo, pa.Table]:
    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as e:  # pyarrow raises ArrowInvalid and friends
        raise CorruptSegmentError(f"{where}: not a readable Parquet file: {e}", path=where) from None
    info = ImageInfo.from_metadata(table.schema.metadata, where)
    missing = [c for c in IMAGE_COLUMNS if c not in table.column_names]
    if missing:
        raise CorruptSegmentError(f"{where}: image lacks columns {missing}", path=where)
    return info, table.select(list(IMAGE_COLUMNS))


def read_image_bytes(path: str) -> tuple[bytes, bytes]:
    """The raw image bytes and its ``.crc`` content (for a checkpoint upload).

    Raises:
        CorruptSegmentError: either file is missing or the checksum does not match.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise CorruptSegmentError(f"{path}: image file is missing", path=path) from None
    try:
        with open(path + ".crc", "rb") as f:
            crc = f.read()
    except FileNotFoundError:
        crc = None
    _verify(data, crc, path)
    return data, crc  # type: ignore[return-value]


def load_image(path: str) -> tuple[ImageInfo, pa.Table]:
    """Load and verify one image (invariants 1, 2).

    Returns:
        The header and the rows as an Arrow table with :data:`IMAGE_SCHEMA` columns.

    Raises:
        CorruptSegmentError: missing/mismatched checksum, unreadable Parquet,
            missing metadata, txid not matching the file name, unsorted rows.
    """
    data, _crc = read_image_bytes(path)
    info, table = _parse(data, path)
    want = parse_image_file_name(os.path.basename(path))
    if want is not None and want != info.txid:
        raise CorruptSegmentError(f"{path}: header txid {info.txid} does not match the file name",
                                  path=path)
    ids = table.column("inode_id").to_pylist()
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise CorruptSegmentError(f"{path}: rows are not sorted by unique inode_id", path=path)
    return info, table


def list_images(name_dir: str) -> list[tuple[int, str]]:
    """``(txid, path)`` of every image file in ``<name_dir>/current``, by txid ascending."""
    cur = current_dir(name_dir)
    try:
        names = sorted(os.listdir(cur))
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        t = parse_image_file_name(n)
        if t is not None:
            out.append((t, os.path.join(cur, n)))
    out.sort()
    return out


def newest_image_time_ms(name_dir: str) -> tuple[int, int] | None:
    """``(txid, modification time in ms)`` of the newest image file (HDFS's ``LastCheckpointTime`` is the
    image write), or None when there is none."""
    images = list_images(name_dir)
    if not images:
        return None
    txid, path = images[-1]
    try:
        return txid, int(os.stat(path).st_mtime * 1000)
    except OSError:  # purged meanwhile
        return None


def newest_valid_image(name_dir: str) -> tuple[ImageInfo, pa.Table, str] | None:
    """The valid image with the highest txid (invariant 3), or None when there is none."""
    for txid, path in reversed(list_images(name_dir)):
        try:
            info, table = load_image(path)
        except CorruptSegmentError as e:
            log.warning("skipping invalid image %s: %s", path, e.message)
            continue
        return info, table, path
    return None


def purge_images(name_dir: str, num_retained: int) -> list[int]:
    """Delete all but the newest ``num_retained`` images (with their ``.crc``).

    Returns:
        The txids of the deleted images.
    """
    imgs = list_images(name_dir)
    doomed = imgs[:-num_retained] if num_retained > 0 else imgs
    for _t, p in doomed:
        for f in (p, p + ".crc"):
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
    if doomed:
        fsync_dir(current_dir(name_dir))
    return [t for t, _ in doomed]


__all__ = [
    "IMAGE_SCHEMA", "IMAGE_COLUMNS", "ImageInfo", "image_file_name", "parse_image_file_name",
    "image_path", "image_to_bytes", "crc_line", "save_image", "save_image_bytes",
    "read_image_bytes", "load_image", "list_images", "newest_image_time_ms", "newest_valid_image", "purge_images",
    "current_dir",
]
