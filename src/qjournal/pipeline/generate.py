"""Edit-log generator: deterministic NameNode histories written as JournalNode segments.

Why: the pipeline's tests and benchmark need realistic journals (a namespace
that grows, renames and deletes subtrees, many users) with known damage, and
the NameNode's own images of the same history to compare the pipeline's
checkpoint against. The history is produced by driving the real pure
:class:`qjournal.namenode.namespace.Namespace` (check, then apply), so every op
is one the NameNode could have logged, encoded with the shared codec
(:mod:`qjournal.namenode.ops`) and framed with :mod:`qjournal.protocol.segment`.

Theory of operation:

1. One ``random.Random(seed)`` drives every choice; the clock is ``start_ts_ms``
   plus a seeded step per op. Same seed and options, same bytes (invariant 1).
2. Segments hold ``roll_every_txns`` txids each: ``OP_START_LOG_SEGMENT`` first,
   ``OP_END_LOG_SEGMENT`` last, as the NameNode rolls them. Each node directory
   gets ``<node>/<jid>/current/edits_<start>-<end>`` (the JournalNode layout).
3. Damage is applied after the clean copies are written, each recorded in
   ``generator.json`` with its kind, node and segment: ``lagging`` (the last
   node misses the newest segments), ``bitflip`` (one bit of a record body on
   one copy), ``divergent`` (one copy with a different but well-checksummed
   record: two finalized copies that differ), ``gap`` (a segment missing on
   every node).
4. Images: at each requested txid, the Namespace is saved with
   :func:`qjournal.namenode.image.save_image` into ``<out>/namenode``.

Invariants:

1. Output is a function of (seed, options) only.
2. Without damage, every node holds byte-identical copies of every segment and
   txids run 1..txns without a hole.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
from dataclasses import asdict, dataclass, field

from qjournal.errors import QJournalError
from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.protocol import segment as seg
from qjournal.protocol.journal_layout import current_dir
from qjournal.util.fs import atomic_write

DAMAGE_KINDS = ("lagging", "bitflip", "divergent", "gap")

#: 2026-01-01T00:00:00Z in ms: generated histories start here unless told otherwise
DEFAULT_START_TS_MS = 1767225600000


@dataclass(frozen=True)
class GenOptions:
    """What to generate.

    Attributes:
        seed: the random seed (printed by tests, replayable).
        txns: total txids, segment markers included.
        out: output directory.
        nodes: JournalNode directories to write (``jn1``..``jnN``).
        jid: journal id.
        roll_every_txns: txids per segment (the last segment may be shorter).
        users: number of distinct users issuing ops.
        damage: kinds from :data:`DAMAGE_KINDS`.
        lagging_segments: how many newest segments the lagging node misses.
        image_txids: txids at which to save the NameNode's image (0 = empty namespace).
        namespace_id / cluster_id: identity written into the images.
        start_ts_ms: timestamp of the first op.
        mean_step_ms: mean time between ops.
    """

    seed: int
    txns: int
    out: str
    nodes: int = 3
    jid: str = "qjournal"
    roll_every_txns: int = 1000
    users: int = 24
    damage: tuple[str, ...] = ()
    lagging_segments: int = 2
    image_txids: tuple[int, ...] = ()
    namespace_id: int = 4242
    cluster_id: str = "CID-qjournal-gen"
    start_ts_ms: int = DEFAULT_START_TS_MS
    mean_step_ms: int = 1500


@dataclass
class GenResult:
    """What was generated (also written as ``<out>/generator.json``).

    Attributes:
        journal_dirs: one edits dir per node, in node order.
        name_dir: where the images are.
        last_txid: the last txid written.
        segments: ``[start, end]`` of every segment of the clean history.
        damage: one dict per injected damage (kind, node, segment_start, ...).
        images: txids of the saved images.
        last_inode_id: of the final namespace.
        num_inodes: of the final namespace.
    """

    journal_dirs: list[str]
    name_dir: str
    last_txid: int
    segments: list[list[int]]
    damage: list[dict] = field(default_factory=list)
    images: list[int] = field(default_factory=list)
    last_inode_id: int = 0
    num_inodes: int = 0


class _Chooser:
    """Random picks of live inodes in O(1) (stale ids are dropped lazily)."""

    def __init__(self, ns: Namespace, rng: random.Random) -> None:
        self.ns = ns
        self.rng = rng
        self.dirs: list[int] = [nn_ops.ROOT_INODE_ID]
        self.files: list[int] = []

    def _pick(self, pool: list[int], want_dir: bool) -> int | None:
        while pool:
            i = self.rng.randrange(len(pool))
            iid = pool[i]
            node = self.ns.inodes.get(iid)
            if node is not None and node.is_dir == want_dir:
                return iid
            pool[i] = pool[-1]
            pool.pop()
        return None

    def dir(self) -> int:
        return self._pick(self.dirs, True) or nn_ops.ROOT_INODE_ID

    def file(self) -> int | None:
        return self._pick(self.files, False)

    def added(self, op: nn_ops.EditOp) -> None:
        if isinstance(op, nn_ops.MkdirOp):
            self.dirs.append(op.inode)
        elif isinstance(op, nn_ops.CreateOp):
            self.files.append(op.inode)


class HistoryGenerator:
    """Produces valid ops one at a time from a seeded random walk over a real Namespace.

    Args:
        seed: the random seed.
        users: number of users.
        start_ts_ms / mean_step_ms: the synthetic clock.
    """

    #: (weight, action) — the namespace grows: creations outweigh deletions
    _ACTIONS = ((14, "mkdir"), (34, "create"), (4, "create_overwrite"), (9, "rename"),
                (4, "delete_file"), (1, "delete_dir"), (9, "chmod"), (7, "chown"),
                (9, "set_times"), (8, "set_replication"))

    def __init__(self, seed: int, users: int = 24, start_ts_ms: int = DEFAULT_START_TS_MS,
                 mean_step_ms: int = 1500) -> None:
        self.rng = random.Random(seed)
        self.ns = Namespace(permissions_enabled=False, root_mtime=0)
        self.users = [f"user{i:02d}" for i in range(max(1, users))]
        self.groups = ["analytics", "etl", "ml", "ops", "web"]
        self.ts = start_ts_ms
        self.mean_step_ms = mean_step_ms
        self.call_id = 0
        self.chooser = _Chooser(self.ns, self.rng)
        total = sum(w for w, _ in self._ACTIONS)
        self._cum = []
        acc = 0
        for w, a in self._ACTIONS:
            acc += w
            self._cum.append((acc / total, a))

    def _ctx(self) -> CallContext:
        self.ts += self.rng.randint(1, 2 * self.mean_step_ms)
        self.call_id += 1
        u = self.users[min(len(self.users) - 1, int(self.rng.paretovariate(1.2)) - 1)]
        cid = self.rng.getrandbits(128).to_bytes(16, "big")
        return CallContext(user=u, groups=(self.rng.choice(self.groups),), client_id=cid,
                           call_id=self.call_id, ts=self.ts)

    def marker(self, start: bool) -> nn_ops.EditOp:
        """A segment marker op at the current clock."""
        cls = nn_ops.StartLogSegmentOp if start else nn_ops.EndLogSegmentOp
        return cls("root", nn_ops.NO_CLIENT_ID, nn_ops.NO_CALL_ID, self.ts)

    def _name(self, prefix: str) -> str:
        return f"{prefix}{self.rng.randrange(100000):05d}"

    def next_op(self) -> nn_ops.EditOp:
        """Apply one random valid mutation to the namespace and return its op."""
        while True:
            r = self.rng.random()
            action = next(a for p, a in self._cum if r <= p)
            try:
                ops = self._do(action)
            except QJournalError:
                continue  # an expected refusal (name taken, ...): choose again
            if ops:
                for op in ops:
                    self.chooser.added(op)
                if len(ops) == 1:
                    return ops[0]
                raise AssertionError("one op per call expected")  # pragma: no cover

    def _do(self, action: str) -> list[nn_ops.EditOp]:
        ns, ch = self.ns, self.chooser
        ctx = self._ctx()
        if action == "mkdir":
            parent = ch.dir()
            # keep trees shallow-ish and bushy: prefer parents near the top
            if self.rng.random() < 0.3:
                parent = nn_ops.ROOT_INODE_ID if self.rng.random() < 0.3 else parent
            base = ns.path_of(parent).rstrip("/")
            return ns.mkdirs(ctx, f"{base}/{self._name('d')}", perm=self.rng.choice((0o755, 0o750, 0o700, 0o775)),
                             create_parent=False)
        if action in ("create", "create_overwrite"):
            if action == "create_overwrite":
                f = ch.file()
                if f is None:
                    return []
                path = ns.path_of(f)
            else:
                path = f"{ns.path_of(ch.dir()).rstrip('/')}/{self._name('f')}.dat"
            return ns.create(ctx, path, perm=self.rng.choice((0o644, 0o640, 0o600)),
                             overwrite=action == "create_overwrite",
                             replication=self.rng.choice((1, 2, 3, 3, 3)),
                             block_size=self.rng.choice((67108864, 134217728, 268435456)))
        if action == "rename":
            if self.rng.random() < 0.6:
                src = ch.file()
            else:
                src = ch.dir()
            if src is None or src == nn_ops.ROOT_INODE_ID:
                return []
            dst_dir = ns.path_of(ch.dir()).rstrip("/")
            suffix = ".dat" if not ns.inodes[src].is_dir else ""
            return ns.rename(ctx, ns.path_of(src), f"{dst_dir}/{self._name('r')}{suffix}")
        if action == "delete_file":
            f = ch.file()
            return [] if f is None else ns.delete(ctx, ns.path_of(f))
        if action == "delete_dir":
            d = ch.dir()
            # subtrees go too, but only small ones, so the namespace keeps growing
            if d == nn_ops.ROOT_INODE_ID or len(ns.inodes) < 200 or len(ns.inodes[d].children) > 8:
                return []
            return ns.delete(ctx, ns.path_of(d), recursive=True)
        target = ch.file() if self.rng.random() < 0.7 else ch.dir()
        if target is None:
            return []
        path = ns.path_of(target)
        if action == "chmod":
            return ns.set_permission(ctx, path, self.rng.choice((0o755, 0o700, 0o644, 0o600, 0o1777)))
        if action == "chown":
            owner = self.rng.choice(self.users) if self.rng.random() < 0.5 else None
            group = self.rng.choice(self.groups) if owner is None or self.rng.random() < 0.5 else None
            return ns.set_owner(ctx, path, owner, group)
        if action == "set_times":
            mtime = ctx.ts if self.rng.random() < 0.7 else -1
            atime = ctx.ts if mtime == -1 or self.rng.random() < 0.5 else -1
            return ns.set_times(ctx, path, mtime, atime)
        if ns.inodes[target].is_dir:
            return []
        return ns.set_replication(ctx, path, self.rng.choice((1, 2, 3, 5)))


def _save_image(name_dir: str, ns: Namespace, txid: int, opts: GenOptions) -> None:
    info = nn_image.ImageInfo(txid=txid, layout_version=seg.LAYOUT_VERSION,
                              namespace_id=opts.namespace_id, cluster_id=opts.cluster_id,
                              last_inode_id=ns.last_inode_id)
    nn_image.save_image(name_dir, ns.to_image_columns(), info)


def generate(opts: GenOptions) -> GenResult:
    """Generate a history and write it (module docstring).

    Args:
        opts: see :class:`GenOptions`.

    Returns:
        A :class:`GenResult`, also written to ``<out>/generator.json``.

    Raises:
        ValueError: unknown damage kind, fewer than 2 txids per segment, or a
            damage that needs more segments than the history has.
    """
    for d in opts.damage:
        if d not in DAMAGE_KINDS:
            raise ValueError(f"unknown damage kind {d!r} (known: {', '.join(DAMAGE_KINDS)})")
    if opts.roll_every_txns < 3:
        raise ValueError(f"roll_every_txns={opts.roll_every_txns}: a segment needs at least 3 txids")
    if opts.txns < 1:
        raise ValueError(f"txns={opts.txns}: at least one txid")
    gen = HistoryGenerator(opts.seed, opts.users, opts.start_ts_ms, opts.mean_step_ms)
    node_names = [f"jn{i + 1}" for i in range(opts.nodes)]
    journal_dirs = [os.path.join(opts.out, n) for n in node_names]
    currents = [current_dir(d, opts.jid) for d in journal_dirs]
    for c in currents:
        os.makedirs(c, exist_ok=True)
    name_dir = os.path.join(opts.out, "namenode")
    want_images = sorted(set(t for t in opts.image_txids if 0 <= t <= opts.txns))
    images: list[int] = []
    if want_images and want_images[0] == 0:
        _save_image(name_dir, gen.ns, 0, opts)
        images.append(0)
    pending_images = [t for t in want_images if t > 0]

    segments: list[list[int]] = []
    txid = 1
    while txid <= opts.txns:
        start = txid
        end = min(opts.txns, start + opts.roll_every_txns - 1)
        parts: list[bytes] = [seg.encode_header()]
        for t in range(start, end + 1):
            if t == start:
                op = gen.marker(True)
            elif t == end and end - start >= 1:
                op = gen.marker(False)
            else:
                op = gen.next_op()
            opcode, body = nn_ops.encode_op(op)
            parts.append(seg.encode_record(t, opcode, body))
            while pending_images and pending_images[0] == t:
                _save_image(name_dir, gen.ns, t, opts)
                images.append(pending_images.pop(0))
        data = b"".join(parts)
        name = seg.segment_file_name(start, end)
        for c in currents:
            with open(os.path.join(c, name), "wb") as f:
                f.write(data)
        segments.append([start, end])
        txid = end + 1

    damage = _inject(opts, node_names, currents, segments)
    result = GenResult(journal_dirs=journal_dirs, name_dir=name_dir, last_txid=opts.txns,
                       segments=segments, damage=damage, images=images,
                       last_inode_id=gen.ns.last_inode_id, num_inodes=len(gen.ns))
    atomic_write(os.path.join(opts.out, "generator.json"),
                 json.dumps({"options": asdict(opts), "result": asdict(result)}, indent=1).encode(),
                 sync=False)
    return result


def _inject(opts: GenOptions, node_names: list[str], currents: list[str],
            segments: list[list[int]]) -> list[dict]:
    """Apply the requested damage (module docstring, step 3); returns what was done."""
    rng = random.Random(opts.seed ^ 0x5EED)
    out: list[dict] = []
    n = len(segments)
    # Damage goes to distinct middle segments so that kinds do not mask each other.
    middle = list(range(1, max(1, n - max(1, opts.lagging_segments) - 1)))
    rng.shuffle(middle)
    for kind in opts.damage:
        if kind == "lagging":
            if n < opts.lagging_segments + 1 or len(currents) < 2:
                raise ValueError(f"lagging needs more than {opts.lagging_segments} segments and 2 nodes")
            for s, e in segments[-opts.lagging_segments:]:
                os.unlink(os.path.join(currents[-1], seg.segment_file_name(s, e)))
                out.append({"kind": "lagging", "node": node_names[-1], "segment_start": s,
                            "segment_end": e})
            continue
        if not middle:
            raise ValueError(f"damage {kind!r} needs more segments than the {n} generated")
        s, e = segments[middle.pop()]
        name = seg.segment_file_name(s, e)
        if kind == "gap":
            for c in currents:
                os.unlink(os.path.join(c, name))
            out.append({"kind": "gap", "node": None, "segment_start": s, "segment_end": e})
            continue
        node_i = 0 if kind == "bitflip" else min(1, len(currents) - 1)
        path = os.path.join(currents[node_i], name)
        with open(path, "rb") as f:
            data = bytearray(f.read())
        recs = list(seg.iter_records(bytes(data), where=path))
        victim = recs[rng.randrange(1, max(2, len(recs) - 1))]
        offset = _record_offset(recs, victim.txid)
        if kind == "bitflip":
            byte = offset + seg.REC_HEAD_SIZE + rng.randrange(max(1, len(victim.body)))
            data[byte] ^= 1 << rng.randrange(8)
            out.append({"kind": "bitflip", "node": node_names[node_i], "segment_start": s,
                        "segment_end": e, "txid": victim.txid, "byte": byte})
        else:
            op = nn_ops.decode_op(victim.opcode, victim.body, victim.txid)
            changed = nn_ops.encode_body(_perturb(op))
            if len(changed) != len(victim.body):
                changed = victim.body[:-1] + bytes([victim.body[-1] ^ 0x01])
            rec = seg.encode_record(victim.txid, victim.opcode, changed)
            data[offset:offset + len(rec)] = rec
            out.append({"kind": "divergent", "node": node_names[node_i], "segment_start": s,
                        "segment_end": e, "txid": victim.txid})
        with open(path, "wb") as f:
            f.write(bytes(data))
    return out


def _record_offset(recs: list[seg.EditRecord], txid: int) -> int:
    off = seg.HEADER_SIZE
    for r in recs:
        if r.txid == txid:
            return off
        off += seg.RECORD_OVERHEAD + len(r.body)
    raise AssertionError(f"txid {txid} not in segment")  # pragma: no cover


def _perturb(op: nn_ops.EditOp) -> nn_ops.EditOp:
    """The same op with a different ``ts`` of the same encoded size (a divergent copy)."""

    return dataclasses.replace(op, ts=op.ts + 1 if op.ts % 2 == 0 else op.ts - 1)


__all__ = ["GenOptions", "GenResult", "HistoryGenerator", "DAMAGE_KINDS", "generate",
           "DEFAULT_START_TS_MS"]
