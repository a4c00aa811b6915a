"""The columns of the fsimage: one definition for the NameNode, the pure namespace and the Spark pipeline.

Why a pure module of its own: the image is one row per inode in Parquet. The NameNode writes and
loads it with pyarrow (``image.py``), the namespace turns itself into its rows and back
(``namespace.py``, which must stay free of pyarrow), and the Spark pipeline builds one
(``pipeline/fold.py``, ``pipeline/checkpoint.py``) that the NameNode must load. All three read the columns, their
order and their types from here, as plain data.
"""

from __future__ import annotations

__all__ = ["IMAGE_FIELDS", "IMAGE_COLUMNS"]

#: ``(column, Arrow type name)`` in file order; the rows are sorted by ``inode_id``
IMAGE_FIELDS: tuple[tuple[str, str], ...] = (
    ("inode_id", "int64"), ("parent_id", "int64"), ("name", "string"), ("type", "string"),
    ("permission", "int32"), ("owner", "string"), ("group", "string"), ("mtime", "int64"),
    ("atime", "int64"), ("replication", "int32"), ("block_size", "int64"), ("length", "int64"),
)
IMAGE_COLUMNS: tuple[str, ...] = tuple(name for name, _ in IMAGE_FIELDS)
