"""The pipeline's output store: every small file under ``--out`` through Hadoop's FileSystem API.

Why: Spark users keep tables on ``hdfs://``, ``s3a://`` or a shared mount, and
on a cluster the driver's local disk is seen by nobody else. The large tables
(edits, findings) are written by Spark itself; everything else the pipeline
writes (the manifest, ``nodes.json``, the checkpoint image and its ``.crc``,
the report's tables, plots and page) is a small file written from the driver.
This module is the one home of those writes: through the JVM's
``org.apache.hadoop.fs`` API (``spark._jvm``), so any URI Spark can write
works, a local path included. There is no second, local-only path.

Theory of operation:

* :func:`output_uri` turns ``--out`` into a URI: a bare path means a local
  directory (``file://`` + absolute path), never the cluster's default file
  system, so ``--out out`` keeps meaning what it meant.
* :meth:`OutputStore.write_bytes` writes ``<name>.tmp`` then renames it over
  ``<name>`` with ``FileContext.rename(..., OVERWRITE)``: atomic where the file
  system's rename is (local disks, HDFS); on object stores (``s3a://``) a
  rename is a copy, so a reader may see a partial file only there.
* The ``FileSystem`` is a private instance (``FileSystem.newInstance``) with
  checksum files off, so a local output holds no ``.name.crc`` side files and
  Spark's cached instance keeps its own settings.

Invariants:

1. A file written by :meth:`OutputStore.write_bytes` is either absent, the old
   content, or the whole new content (where rename is atomic).
2. No write of the pipeline outside Spark's own writers goes anywhere but here.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from qjournal.errors import JournalError

#: bytes handed to the JVM per call when writing (py4j copies each piece once)
WRITE_PIECE_BYTES = 4 * 1024 * 1024


def output_uri(path: str) -> str:
    """``--out`` as a URI: a bare path is a local directory (``file:///abs``); a URI stays as given.

    Args:
        path: a local path or a Hadoop file system URI (``hdfs://nn/x``, ``s3a://b/x``, ``file:///x``).

    Returns:
        The URI without a trailing slash.
    """
    if "://" in path or path.startswith("file:"):
        return path.rstrip("/") or path
    return "file://" + os.path.abspath(path)


def is_local(uri: str) -> bool:
    """Whether ``uri`` names the local file system."""
    return urlsplit(uri).scheme in ("", "file")


def local_path(uri: str) -> str:
    """The local path of a ``file://`` URI (or a bare path).

    Raises:
        JournalError: ``uri`` names another file system.
    """
    parts = urlsplit(uri)
    if parts.scheme not in ("", "file"):
        raise JournalError(f"{uri} is not a local path", path=uri)
    return parts.path if parts.scheme else uri


def join(uri: str, *names: str) -> str:
    """``uri`` with path components appended (``/`` separated, whatever the local OS)."""
    out = uri.rstrip("/")
    for n in names:
        out += "/" + n.strip("/")
    return out


class OutputStore:
    """Small-file I/O under one root through Hadoop's FileSystem API (module docstring).

    Args:
        spark: the session (its JVM gateway and Hadoop configuration are used).
        root: the output root, a URI from :func:`output_uri`.
    """

    def __init__(self, spark, root: str) -> None:
        self.root = output_uri(root)
        self._spark = spark
        jvm = spark._jvm
        self._jvm = jvm
        self._hconf = spark._jsc.hadoopConfiguration()
        hadoop_fs = jvm.org.apache.hadoop.fs
        self._fs = hadoop_fs.FileSystem.newInstance(hadoop_fs.Path(self.root).toUri(), self._hconf)
        self._fs.setWriteChecksum(False)
        self._fs.setVerifyChecksum(False)
        self._fc = hadoop_fs.FileContext.getFileContext(hadoop_fs.Path(self.root).toUri(), self._hconf)

    def _path(self, uri: str):
        return self._jvm.org.apache.hadoop.fs.Path(output_uri(uri))

    def close(self) -> None:
        """Release the private FileSystem instance."""
        self._fs.close()

    def __enter__(self) -> "OutputStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def exists(self, uri: str) -> bool:
        """Whether a file or directory exists at ``uri``."""
        return bool(self._fs.exists(self._path(uri)))

    def makedirs(self, uri: str) -> None:
        """Create ``uri`` and its parents (no error if it exists)."""
        self._fs.mkdirs(self._path(uri))

    def read_bytes(self, uri: str) -> bytes:
        """The whole content of ``uri``.

        Raises:
            FileNotFoundError: nothing at ``uri``.
        """
        p = self._path(uri)
        if not self._fs.exists(p):
            raise FileNotFoundError(uri)
        stream = self._fs.open(p)
        try:
            return bytes(self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write_bytes(self, uri: str, data: bytes) -> str:
        """Write ``data`` to ``uri`` atomically: ``<uri>.tmp``, hsync, rename over ``uri`` (invariant 1).

        Returns:
            ``uri``.
        """
        target = self._path(uri)
        tmp = self._path(uri + ".tmp")
        self._fs.mkdirs(target.getParent())
        out = self._fs.create(tmp, True)
        try:
            view = memoryview(data)
            for i in range(0, len(view), WRITE_PIECE_BYTES):
                out.write(bytearray(view[i:i + WRITE_PIECE_BYTES]))
            out.hsync()
        finally:
            out.close()
        rename = self._jvm.org.apache.hadoop.fs.Options.Rename
        opts = self._spark.sparkContext._gateway.new_array(rename, 1)
        opts[0] = rename.OVERWRITE
        self._fc.rename(tmp, target, opts)
        return uri


__all__ = ["OutputStore", "output_uri", "is_local", "local_path", "join", "WRITE_PIECE_BYTES"]
