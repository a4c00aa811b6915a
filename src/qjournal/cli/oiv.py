"""``qjournal oiv``: the offline image viewer (``hdfs oiv``): an fsimage as XML or delimited text.

Why: an operator or a script wants to look at a checkpoint without a running
NameNode (what does the image at txid N hold, who owns what, which files are
big), with the formats Hadoop's viewer writes. The image is read through its
one home (``namenode/image.py``: the checksum is verified first, a damaged
image is an error naming the file) and its tree is rebuilt and checked by
``Namespace.from_image_columns``.

Processors (``-p``, any case, as Hadoop's):

* ``XML``: Hadoop's fsimage XML where its elements apply: ``<fsimage>``,
  ``<version><layoutVersion>``, ``<NameSection>`` (``namespaceId``, ``txid``),
  ``<INodeSection>`` (``lastInodeId``, ``numInodes``, one ``<inode>`` per inode
  in id order: ``id``, ``type`` DIRECTORY|FILE, ``name``; a file's
  ``replication``, ``mtime``, ``atime``, ``preferredBlockSize``, and, as it has
  no blocks here, its ``length``; a directory's ``mtime``; then ``permission``
  as ``user:group:0755``, and a directory's ``nsquota``/``dsquota``, -1: no
  quotas) and ``<INodeDirectorySection>`` (``<directory><parent>`` and its
  ``<child>`` ids by name). Text is escaped; characters XML 1.0 cannot carry
  (controls) and the backslash are written as Hadoop's ``XMLUtils`` mangles
  them, ``\\<hex code point>;``.
* ``Delimited``: Hadoop's columns ``Path, Replication, ModificationTime,
  AccessTime, PreferredBlockSize, BlocksCount, FileSize, NSQUOTA, DSQUOTA,
  Permission, UserName, GroupName`` after a header line, one row per inode
  in id order, times as ``yyyy-MM-dd HH:mm`` local time, separated by
  ``-delimiter`` (default a tab). Fields are not quoted (as Hadoop's).

Hadoop's default processor (``Web``, a WebHDFS server over the image) and
``FileDistribution``/``ReverseXML`` are not offered.

Options: ``-i IMAGE`` (its ``.crc`` beside it), ``-o OUT`` (``-`` for stdout),
``-p XML|Delimited``, ``-delimiter STRING``. Exit status: 0; 1 when the image
cannot be read or the output cannot be written (the message names the file);
2 for a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, Iterator
from xml.sax.saxutils import escape

from qjournal.errors import QJournalError
from qjournal.namenode import image as img
from qjournal.namenode.namespace import INode, Namespace, mode_string

PROCESSORS = ("XML", "Delimited")

DELIMITED_COLUMNS = ("Path", "Replication", "ModificationTime", "AccessTime", "PreferredBlockSize",
                     "BlocksCount", "FileSize", "NSQUOTA", "DSQUOTA", "Permission", "UserName", "GroupName")


def load(path: str) -> tuple[img.ImageInfo, Namespace]:
    """Read and verify one image and rebuild its tree.

    Raises:
        CorruptSegmentError: missing file or ``.crc``, checksum mismatch, unreadable Parquet, or a
            broken tree (each naming ``path``).
    """
    info, table = img.load_image(path)
    return info, Namespace.from_image_columns(table.to_pydict(), info.last_inode_id, where=path)


def mangle(s: str) -> str:
    """Escape ``s`` for XML text; code points XML 1.0 cannot carry, and ``\\``, become ``\\<hex>;``."""
    out = []
    for ch in s:
        cp = ord(ch)
        if cp < 0x20 or 0xD800 <= cp <= 0xDFFF or cp in (0xFFFE, 0xFFFF) or ch == "\\":
            out.append(f"\\{cp:x};")
        else:
            out.append(ch)
    return escape("".join(out))


def _el(tag: str, value: object) -> str:
    return f"<{tag}>{mangle(str(value))}</{tag}>"


def _inode_xml(n: INode) -> str:
    parts = [_el("id", n.id), _el("type", "DIRECTORY" if n.is_dir else "FILE"), _el("name", n.name)]
    if n.is_dir:
        parts.append(_el("mtime", n.mtime))
    else:
        parts += [_el("replication", n.replication), _el("mtime", n.mtime), _el("atime", n.atime),
                  _el("preferredBlockSize", n.block_size), _el("length", n.length)]
    parts.append(_el("permission", f"{n.owner}:{n.group}:{n.perm:04o}"))
    if n.is_dir:
        parts += [_el("nsquota", -1), _el("dsquota", -1)]
    return "<inode>" + "".join(parts) + "</inode>"


def xml_lines(info: img.ImageInfo, ns: Namespace) -> Iterator[str]:
    """The XML processor's output, line by line (module docstring)."""
    yield '<?xml version="1.0"?>'
    yield "<fsimage>"
    yield f"<version>{_el('layoutVersion', info.layout_version)}</version>"
    yield f"<NameSection>{_el('namespaceId', info.namespace_id)}{_el('txid', info.txid)}</NameSection>"
    yield f"<INodeSection>{_el('lastInodeId', info.last_inode_id)}{_el('numInodes', len(ns))}"
    for iid in sorted(ns.inodes):
        yield _inode_xml(ns.inodes[iid])
    yield "</INodeSection>"
    yield "<INodeDirectorySection>"
    for iid in sorted(ns.inodes):
        children = ns.inodes[iid].children
        if children:
            yield ("<directory>" + _el("parent", iid)
                   + "".join(_el("child", children[name]) for name in sorted(children)) + "</directory>")
    yield "</INodeDirectorySection>"
    yield "</fsimage>"


def _date(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000.0))


def delimited_rows(ns: Namespace) -> Iterator[list[str]]:
    """The Delimited processor's rows (header first), in inode id order."""
    yield list(DELIMITED_COLUMNS)
    for iid in sorted(ns.inodes):
        n = ns.inodes[iid]
        path = ns.path_of(iid)
        if n.is_dir:  # no replication, access time, blocks or size; no quotas: -1
            middle = [0, _date(n.mtime), _date(0), 0, 0, 0, -1, -1]
        else:  # metadata only: no blocks, no quotas on files
            middle = [n.replication, _date(n.mtime), _date(n.atime), n.block_size, 0, n.length, 0, 0]
        yield [path] + [str(v) for v in middle] + [mode_string(n.is_dir, n.perm), n.owner, n.group]


def write_output(out: IO[str], info: img.ImageInfo, ns: Namespace, processor: str, delimiter: str) -> None:
    """Write the ``processor``'s output for the image to ``out``."""
    if processor == "XML":
        for line in xml_lines(info, ns):
            out.write(line + "\n")
    else:
        for row in delimited_rows(ns):
            out.write(delimiter.join(row) + "\n")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``oiv`` subcommand."""
    p = subparsers.add_parser("oiv", description=__doc__.splitlines()[0])
    p.add_argument("-i", "--inputFile", dest="oiv_input", required=True, metavar="IMAGE",
                   help="the fsimage file (its .crc beside it)")
    p.add_argument("-o", "--outputFile", dest="oiv_output", required=True, metavar="OUT",
                   help="where to write; - for stdout")
    p.add_argument("-p", "--processor", dest="oiv_processor", default="Web", metavar="PROCESSOR",
                   help="XML or Delimited")
    p.add_argument("-delimiter", dest="oiv_delimiter", default="\t", help="Delimited: field separator (tab)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    processor = {p.upper(): p for p in PROCESSORS}.get(args.oiv_processor.upper())
    if processor is None:
        print(f"oiv: processor {args.oiv_processor} is not offered: use -p XML or -p Delimited", file=sys.stderr)
        return 2
    try:
        info, ns = load(args.oiv_input)
    except QJournalError as e:
        print(f"oiv: cannot read the image: {e.message}", file=sys.stderr)
        return 1
    try:
        if args.oiv_output == "-":
            write_output(sys.stdout, info, ns, processor, args.oiv_delimiter)
        else:
            with open(args.oiv_output, "w", encoding="utf-8", newline="\n") as f:
                write_output(f, info, ns, processor, args.oiv_delimiter)
    except OSError as e:
        print(f"oiv: cannot write {args.oiv_output}: {e}", file=sys.stderr)
        return 1
    return 0


__all__ = ["PROCESSORS", "DELIMITED_COLUMNS", "load", "mangle", "xml_lines", "delimited_rows", "write_output",
           "register", "run"]
