"""Namespace against a simple path-dict model with Hypothesis, plus replay and image+edits equality.

Each example prints nothing on success; on failure Hypothesis prints the falsifying
sequence and its seed (``--hypothesis-seed`` replays it).
"""

from __future__ import annotations

import posixpath

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qjournal.errors import (DirectoryNotEmptyError, FileAlreadyExistsError, FileNotFoundError_,
                             InvalidRequestError, NotADirectoryError_)
from qjournal.namenode import image as img
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.namenode.ops import decode_op, encode_op

NAMES = ["a", "b", "c"]
PATHS = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map(lambda p: "/" + "/".join(p))

OPS = st.one_of(
    st.tuples(st.just("mkdirs"), PATHS),
    st.tuples(st.just("create"), PATHS, st.booleans()),
    st.tuples(st.just("delete"), PATHS, st.booleans()),
    st.tuples(st.just("rename"), PATHS, PATHS),
    st.tuples(st.just("chmod"), PATHS, st.integers(0, 0o777)),
    st.tuples(st.just("setrep"), PATHS, st.integers(1, 5)),
)


class Model:
    """Paths -> 'd'/'f' with the semantics the namespace must have."""

    def __init__(self):
        self.kind = {"/": "d"}

    def _parent_ok(self, p):
        par = posixpath.dirname(p)
        if par not in self.kind:
            return FileNotFoundError_
        if self.kind[par] != "d":
            return NotADirectoryError_
        return None

    def _first_file_ancestor(self, p):
        parts = p.strip("/").split("/")
        for i in range(1, len(parts)):
            a = "/" + "/".join(parts[:i])
            if a not in self.kind:
                return None
            if self.kind[a] == "f":
                return a
        return None

    def _sub(self, p):
        return sorted(q for q in self.kind if q == p or q.startswith(p + "/"))

    def mkdirs(self, p):
        if self._first_file_ancestor(p):
            return NotADirectoryError_
        if self.kind.get(p) == "f":
            return FileAlreadyExistsError
        parts = p.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            self.kind.setdefault("/" + "/".join(parts[:i]), "d")
        return None

    def create(self, p, overwrite):
        if self._first_file_ancestor(p):
            return NotADirectoryError_
        if p in self.kind:
            if self.kind[p] == "d" or not overwrite:
                return FileAlreadyExistsError
        err = self._parent_ok(p)
        if err:
            return err
        self.kind[p] = "f"
        return None

    def delete(self, p, recursive):
        if self._first_file_ancestor(p):
            return NotADirectoryError_
        if p not in self.kind:
            return FileNotFoundError_
        sub = self._sub(p)
        if len(sub) > 1 and not recursive:
            return DirectoryNotEmptyError
        for q in sub:
            del self.kind[q]
        return None

    def rename(self, s, d):
        if self._first_file_ancestor(s):
            return NotADirectoryError_
        if s not in self.kind:
            return FileNotFoundError_
        if self._first_file_ancestor(d):
            return NotADirectoryError_
        if self.kind.get(d) == "d" and d != s:
            d = posixpath.join(d, posixpath.basename(s))
            if self._first_file_ancestor(d):
                return NotADirectoryError_
        if d == s:
            return None
        if d.startswith(s + "/"):
            return InvalidRequestError
        if d in self.kind:
            return FileAlreadyExistsError
        err = self._parent_ok(d)
        if err:
            return err
        for q in self._sub(s):
            self.kind[d + q[len(s):]] = self.kind.pop(q)
        return None

    def chmod(self, p, _perm):
        if self._first_file_ancestor(p):
            return NotADirectoryError_
        return None if p in self.kind else FileNotFoundError_

    def setrep(self, p, _r):
        if self._first_file_ancestor(p):
            return NotADirectoryError_
        if p not in self.kind:
            return FileNotFoundError_
        return InvalidRequestError if self.kind[p] == "d" else None


def run(ns: Namespace, ctx: CallContext, step):
    name, *args = step
    fn = {"mkdirs": ns.mkdirs, "create": lambda p, o: ns.create(ctx, p, overwrite=o),
          "delete": lambda p, r: ns.delete(ctx, p, recursive=r),
          "rename": lambda s, d: ns.rename(ctx, s, d),
          "chmod": lambda p, m: ns.set_permission(ctx, p, m),
          "setrep": lambda p, r: ns.set_replication(ctx, p, r)}[name]
    if name == "mkdirs":
        return ns.mkdirs(ctx, *args)
    return fn(*args)


def walk(ns: Namespace) -> dict:
    out = {}
    for iid, node in ns.inodes.items():
        out[ns.path_of(iid)] = "d" if node.is_dir else "f"
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(OPS, max_size=40), cut=st.integers(0, 40))
def test_namespace_matches_model_and_replays(steps, cut):
    ns = Namespace(superuser="nn")
    model = Model()
    log = []
    image = None
    for i, step in enumerate(steps):
        if i == cut:
            image = (ns.to_image_columns(), ns.last_inode_id, len(log))
        ctx = CallContext("nn", (), bytes(16), i, ts=1000 + i)
        before = ns.snapshot()
        want = getattr(model, step[0])(*step[1:])
        try:
            ops = run(ns, ctx, step)
        except Exception as e:  # compare the error type with the model's
            assert want is not None and isinstance(e, want), (step, e, want)
            assert ns.snapshot() == before, "a failed mutation changed the namespace"
            continue
        assert want is None, (step, "succeeded, model says", want)
        log.extend(ops)
        assert walk(ns) == model.kind, step
    # replay equality (namespace invariant 1)
    replay = Namespace(superuser="nn")
    for op in log:  # through the record codec, as a reader of the journal sees them
        replay.apply(decode_op(*encode_op(op)))
    assert replay.snapshot() == ns.snapshot()
    # image at `cut` (through real Parquet bytes) plus later edits equals the live state
    if image is not None:
        cols, last, n = image
        data = img.image_to_bytes(cols, img.ImageInfo(n, 1, 1, "CID", last))
        info, table = img._parse(data, "hypothesis image")
        loaded = Namespace.from_image_columns(table.to_pydict(), info.last_inode_id, superuser="nn")
        for op in log[n:]:
            loaded.apply(op)
        assert loaded.snapshot() == ns.snapshot()
