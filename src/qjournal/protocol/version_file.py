"""The VERSION file of a storage directory: which namespace the directory belongs to.

Why one codec: a JournalNode's journal, a FileJournal and a NameNode's name directory
each record the namespace they belong to, and each refuses to serve another one. The
three used to write three formats; this module is the one format (java-properties
text, as Hadoop's storage directories; reference §2.1). Pure: bytes in, bytes out;
the file itself is read and written by :mod:`qjournal.util.storage_dir`.

Format::

    #qjournal storage
    namespaceID=<int>
    clusterID=<string>
    layoutVersion=<int>
    storageType=JOURNAL_NODE | EDITS | NAME_NODE

Invariants:

1. ``decode_version(encode_version(ns, t), w) == ns`` for every namespace and type.
2. Malformed content raises :class:`~qjournal.errors.JournalError` naming the file;
   nothing else escapes.
3. A legacy NameNode ``NNVERSION`` (one JSON object, written before this format) still
   decodes, so existing name directories load.
"""

from __future__ import annotations

import json

from qjournal.errors import InvalidRequestError, JournalError
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import LAYOUT_VERSION

__all__ = ["STORAGE_TYPES", "encode_version", "decode_version"]

#: what a storage directory holds (the ``storageType`` line)
STORAGE_TYPES = ("JOURNAL_NODE", "EDITS", "NAME_NODE")


def encode_version(ns: NamespaceInfo, storage_type: str) -> bytes:
    """The VERSION file's bytes.

    Raises:
        ValueError: ``storage_type`` is not one of :data:`STORAGE_TYPES` (a programmer error).
    """
    if storage_type not in STORAGE_TYPES:
        raise ValueError(f"storage type {storage_type!r} is not one of {STORAGE_TYPES}")
    return (f"#qjournal storage\nnamespaceID={ns.namespace_id}\nclusterID={ns.cluster_id}\n"
            f"layoutVersion={ns.layout_version}\nstorageType={storage_type}\n").encode("utf-8")


def decode_version(raw: bytes, where: str) -> NamespaceInfo:
    """The namespace recorded in a VERSION file.

    Args:
        raw: the file's bytes.
        where: the file's path, for messages.

    Raises:
        JournalError: naming ``where`` when a field is missing or malformed (invariant 2).
    """
    text = raw.decode("utf-8", "replace")
    if text.lstrip().startswith("{"):  # invariant 3
        try:
            return NamespaceInfo.from_wire(json.loads(text))
        except (ValueError, InvalidRequestError) as e:
            raise JournalError(f"{where}: malformed VERSION file ({e})", path=where) from None
    props: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        k, _, v = line.partition("=")
        props[k.strip()] = v.strip()
    try:
        return NamespaceInfo(int(props["namespaceID"]), props["clusterID"],
                             int(props.get("layoutVersion", LAYOUT_VERSION)))
    except KeyError as e:
        raise JournalError(f"{where}: malformed VERSION file (no {e.args[0]})", path=where) from None
    except ValueError as e:
        raise JournalError(f"{where}: malformed VERSION file ({e})", path=where) from None
