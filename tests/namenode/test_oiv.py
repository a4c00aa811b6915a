"""``qjournal oiv`` (``cli/oiv.py``): an image written from a namespace built through its API, read back as
Hadoop-style XML (parsed with ElementTree and compared with the namespace, names with XML specials and
control characters included) and as delimited rows; a damaged image is an error naming the file."""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET

import pytest

from qjournal.cli.main import main
from qjournal.namenode import image as img
from qjournal.namenode.namespace import CallContext, Namespace, mode_string

SU = CallContext("hdfs", ("supergroup",), b"\x00" * 16, -1, 1_700_000_000_000)
ODD = "a&b <c> \"q\" 'x' \\ tab\there nl\nend \x01 日本"


def _build(tmp_path) -> tuple[Namespace, str]:
    ns = Namespace(superuser="hdfs", root_mtime=1_600_000_000_000)
    ns.mkdirs(SU, "/user/alice/data", 0o750)
    ns.create(SU, "/user/alice/data/part-0", 0o640, replication=2, block_size=64 << 20)
    ns.create(SU, f"/user/{ODD}", 0o600)
    ns.set_owner(SU, "/user/alice", "alice", "staff")
    ns.set_times(SU, "/user/alice/data/part-0", 1_700_000_100_000, 1_700_000_200_000)
    # files carry a length (no client op sets one: the pipeline's images do; an INode is a read-only value)
    ns._table.set_length(max(ns.inodes), 12345)
    info = img.ImageInfo(txid=42, layout_version=1, namespace_id=77, cluster_id="CID-oiv",
                         last_inode_id=ns.last_inode_id)
    path = img.save_image(str(tmp_path / "name"), ns.to_image_columns(), info)
    return ns, path


def _unmangle(s: str | None) -> str:
    return re.sub(r"\\([0-9a-f]+);", lambda m: chr(int(m.group(1), 16)), s or "")


def test_xml_round_trip(tmp_path, capsys):
    ns, path = _build(tmp_path)
    out = tmp_path / "image.xml"
    assert main(["oiv", "-p", "xml", "-i", path, "-o", str(out)]) == 0
    root = ET.parse(out).getroot()   # well-formed despite the names
    assert root.tag == "fsimage"
    assert root.findtext("version/layoutVersion") == "1"
    assert root.findtext("NameSection/namespaceId") == "77" and root.findtext("NameSection/txid") == "42"
    sec = root.find("INodeSection")
    assert int(sec.findtext("lastInodeId")) == ns.last_inode_id
    assert int(sec.findtext("numInodes")) == len(ns)
    parent = {int(c.text): int(d.findtext("parent"))
              for d in root.iter("directory") for c in d.findall("child")}
    seen = {}
    for el in sec.findall("inode"):
        iid = int(el.findtext("id"))
        user, group, perm = el.findtext("permission").rsplit(":", 2)
        row = {"name": _unmangle(el.findtext("name")), "dir": el.findtext("type") == "DIRECTORY",
               "owner": _unmangle(user), "group": _unmangle(group), "perm": int(perm, 8),
               "mtime": int(el.findtext("mtime")), "parent": parent.get(iid, 0)}
        if not row["dir"]:
            row.update(atime=int(el.findtext("atime")), replication=int(el.findtext("replication")),
                       block_size=int(el.findtext("preferredBlockSize")), length=int(el.findtext("length")))
        else:
            assert el.findtext("nsquota") == el.findtext("dsquota") == "-1"
        seen[iid] = row
    want = {}
    for iid, n in ns.inodes.items():
        row = {"name": n.name, "dir": n.is_dir, "owner": n.owner, "group": n.group, "perm": n.perm,
               "mtime": n.mtime, "parent": n.parent}
        if not n.is_dir:
            row.update(atime=n.atime, replication=n.replication, block_size=n.block_size, length=n.length)
        want[iid] = row
    assert seen == want
    assert any(r["name"] == ODD for r in seen.values()) and any(r["length"] == 12345 for r in seen.values()
                                                                if not r["dir"])


def test_delimited_rows_to_stdout(tmp_path, capsys):
    ns, path = _build(tmp_path)
    assert main(["oiv", "-p", "Delimited", "-delimiter", "|", "-i", path, "-o", "-"]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert lines[0] == ("Path|Replication|ModificationTime|AccessTime|PreferredBlockSize|BlocksCount|FileSize|"
                        "NSQUOTA|DSQUOTA|Permission|UserName|GroupName")

    def date(ms):
        return time.strftime("%Y-%m-%d %H:%M", time.localtime(ms / 1000))
    by_path = {line.split("|", 1)[0]: line for line in lines[1:] if line.startswith("/")}
    root = ns.root
    assert ns.path_of(root.id) == "/"
    assert by_path["/"] == "|".join(["/", "0", date(root.mtime), date(0), "0", "0", "0", "-1", "-1",
                                     "drwxr-xr-x", "hdfs", "supergroup"])
    assert by_path["/user/alice/data/part-0"] == "|".join(
        ["/user/alice/data/part-0", "2", date(1_700_000_100_000), date(1_700_000_200_000), str(64 << 20), "0",
         "0", "0", "0", mode_string(False, 0o640), "hdfs", "supergroup"])
    # every inode, in id order, from the namespace's own fields
    want = [lines[0]]
    for iid in sorted(ns.inodes):
        n = ns.inodes[iid]
        mid = ([0, date(n.mtime), date(0), 0, 0, 0, -1, -1] if n.is_dir else
               [n.replication, date(n.mtime), date(n.atime), n.block_size, 0, n.length, 0, 0])
        want.append("|".join([ns.path_of(iid)] + [str(v) for v in mid]
                             + [mode_string(n.is_dir, n.perm), n.owner, n.group]))
    assert "\n".join(want) + "\n" == "\n".join(lines)


def test_damaged_or_missing_image_is_an_error_naming_it(tmp_path, capsys):
    _ns, path = _build(tmp_path)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(path, "wb").write(bytes(data))
    out = tmp_path / "x.xml"
    assert main(["oiv", "-p", "XML", "-i", path, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert path in err and "checksum" in err and not out.exists()
    assert main(["oiv", "-p", "XML", "-i", str(tmp_path / "fsimage_0000000000000000009"), "-o", "-"]) == 1
    assert "image file is missing" in capsys.readouterr().err
    assert main(["oiv", "-i", path, "-o", "-"]) == 2   # Hadoop's default Web processor is not offered
    assert "use -p XML or -p Delimited" in capsys.readouterr().err
