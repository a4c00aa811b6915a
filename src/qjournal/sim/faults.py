"""The fault model of the simulator: what can go wrong, how often, drawn from one seed.

Why a module: the fault model is the part of a simulation a reader must trust
first ("what did this run actually exercise?"). It lives in one place, every
probability is a named, configurable field, and every injected fault is
counted by kind so a soak run can report what it covered (docs/testing.md).

Kinds (each with its own probability in :class:`FaultConfig`):

Network, per frame, through the in-memory network's fault hook
(``hook(src, dst, frame) -> delays``):

* ``drop``: the frame is lost.
* ``delay``: the frame arrives late (up to ``max_delay_ms``).
* ``reorder``: a small random extra delay, so consecutive frames may swap.
* ``duplicate``: the frame arrives twice (the second copy later).

A run keeps TCP's per-connection order with probability ``tcp_fifo`` (drawn
once per run): delays then stretch so that no frame overtakes an earlier one of
the same connection, and reordering happens only between connections. The
other runs model an RPC layer without that guarantee (retries, reconnects), so
the JournalNode's IPC-serial gate is exercised too.

Cluster, per director step (see :mod:`qjournal.sim.workload`):

* ``partition``: cut a random pair of nodes (JournalNode or writer) apart.
* ``isolate_old_writer``: when a new writer takes over, cut the old one off
  from a majority of JournalNodes while it keeps trying to write.
* ``takeover_at_segment_start``: right after a writer started a segment, cut
  it from a majority and start a new writer: the old writer's first batch of
  that segment reaches a minority only (seed 000 §2.10.5, §2.10.6).
* ``heal``: remove every partition.
* ``jn_crash``: power-cut a JournalNode now (unsynced bytes lost or torn).
* ``jn_crash_point``: arm a storage crash point on a JournalNode (between a
  write and its fsync, before/after the paxos persist, before a rename or a
  directory fsync), so it dies inside the next such step.
* ``jn_restart``: restart a crashed JournalNode (it rescans its disk).
* ``disk_full``: shrink a JournalNode's disk to just above its current use
  (writes fail with ENOSPC, possibly leaving a partial record); ``disk_free``
  gives the space back.
* ``writer_takeover``: a new writer (a new ``QuorumJournalManager``) starts:
  it fences the old one, recovers, and writes.
* ``writer_crash``: the current writer stops dead (no finalize, no close).
* ``read``: a reader reads every finalized segment.
* ``jn_sync``: one JournalNode runs a JournalNodeSyncer round (the real
  :class:`~qjournal.journalnode.syncer.JournalSyncer`) against its peers, in the
  background, under the same network faults.

The whole cluster's kinds (:class:`HAFaults`, relative weights of the director's
choice at each step; see :mod:`qjournal.sim.ha_workload`; most heal by
themselves after a drawn while): ``nn_crash``, ``nn_pause``, ``zkfc_crash``,
``zkfc_pause``, ``pair_pause`` (a NameNode and its ZKFC), ``zk_crash``,
``zk_partition`` (a ZKFC cut from ZooKeeper), ``session_expire``,
``nn_jn_partition``, ``client_nn_partition``, ``nn_nn_partition``, ``disk_full``
(a NameNode's edits disk: it reports unhealthy), ``jn_crash`` (restarted later),
and ``nothing``.

Both configurations also fail the JournalNodes' simulated disks (:data:`DISK_KINDS`, the
failures libfiu injects on real hosts; :meth:`qjournal.sim.disk.SimFS.fail`), each a
probability per director step drawn by a generator of the run's own
(:mod:`qjournal.sim.seeded_run`): ``fsync_eio`` (an fsync or fdatasync of a file fails
with EIO; the bytes it covered may be dropped from the page cache's dirty set, so a later
fsync that succeeds does not write them), ``fsync_dir_eio`` (a directory's fsync fails with
EIO), ``write_enospc`` and ``write_eio`` (a write fails after writing some of its bytes,
or a preallocation fails), ``read_eio`` (a read fails); the whole cluster's table
adds ``nn_fsync_eio`` (a NameNode's local edits fail an fsync or fdatasync with EIO).

Both tables are :class:`FaultWeights`: parsed from ``kind=w,...`` (``none``
switches every kind off), switched off kind by kind (the minimiser), and named
in a replay command by what differs from the defaults. :func:`choose` is the one
draw of every fault schedule (the simulator's, the chaos harness's, the hosts'
nemesis): a kind by relative weight.

Invariants:

1. Every decision draws from the ``random.Random`` passed in (the loop's; the disk
   failures' own generator), in call order, so a seed replays the same faults.
2. A config with every probability 0 injects nothing (the fault-free baseline).
3. :func:`choose` draws exactly one ``rng.random()``, whatever the weights.
"""

from __future__ import annotations

import dataclasses
import errno
import random
from dataclasses import dataclass
from typing import ClassVar, Sequence, TypeVar

__all__ = ["FaultWeights", "FaultConfig", "HAFaults", "NetworkFaults", "NETWORK_KINDS", "CLUSTER_KINDS", "DISK_KINDS",
           "choose"]

NETWORK_KINDS = ["drop", "delay", "reorder", "duplicate"]
CLUSTER_KINDS = ["partition", "isolate_old_writer", "takeover_at_segment_start", "heal", "jn_crash", "jn_crash_point",
                 "jn_restart", "disk_full", "disk_free", "writer_takeover", "writer_crash", "read", "jn_sync"]
#: the simulated disk's failures (module docstring): kind -> (the SimFS operation, the errno it fails with)
DISK_KINDS: dict[str, tuple[str, int]] = {
    "fsync_eio": ("fsync", errno.EIO),
    "fsync_dir_eio": ("fsync_dir", errno.EIO),
    "write_enospc": ("write", errno.ENOSPC),
    "write_eio": ("write", errno.EIO),
    "read_eio": ("read", errno.EIO),
}
#: the journal's kinds that are probabilities at an event (a takeover, a segment start), not director steps
_AT_EVENT_KINDS = ("isolate_old_writer", "takeover_at_segment_start")

W = TypeVar("W", bound="FaultWeights")


def choose(rng: random.Random, weights: Sequence[tuple[str, float]]) -> str:
    """A kind drawn by relative weight (invariant 3); a weight of 0 is never drawn.

    Args:
        rng: the schedule's generator.
        weights: ``(kind, weight)`` in a fixed order.
    """
    x = rng.random() * sum(w for _, w in weights)
    for kind, w in weights:
        if x < w:
            return kind
        x -= w
    return weights[-1][0]


@dataclass(frozen=True)
class FaultWeights:
    """A configuration's fault table: a float field per fault kind (0 switches it off), and its knobs."""

    #: the fields that are fault kinds (``none`` and the minimiser switch them off)
    KINDS: ClassVar[tuple[str, ...]] = ()
    #: the fields that must be probabilities in [0, 1]
    PROBABILITIES: ClassVar[frozenset[str]] = frozenset()

    def without(self: W, *kinds: str) -> W:
        """A copy with the given kinds switched off (used to minimise a failing run)."""
        return dataclasses.replace(self, **{k: 0.0 for k in kinds})

    def enabled_kinds(self) -> list[str]:
        """Kinds with a non-zero weight, in a fixed order."""
        return [k for k in self.KINDS if getattr(self, k) > 0]

    def changed(self) -> list[str]:
        """``field=value`` of every field that differs from the defaults (a replay command's ``--faults``)."""
        base = type(self)()
        return [f"{f.name}={getattr(self, f.name)}" for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(base, f.name)]

    def director_weights(self) -> list[tuple[str, float]]:
        """The director's choices at a step, by weight (:func:`choose`)."""
        raise NotImplementedError

    @classmethod
    def parse(cls: type[W], spec: str | None) -> W:
        """Build from ``kind=w,kind=w`` (unnamed fields keep their default; ``none`` = every kind off).

        Raises:
            ValueError: unknown field, not a number, or a probability outside [0, 1] (message names it).
        """
        base = cls()
        if not spec:
            return base
        if spec.strip() == "none":
            return base.without(*cls.KINDS)
        kw: dict[str, float] = {}
        names = {f.name for f in dataclasses.fields(cls)}
        for part in spec.split(","):
            if not part.strip():
                continue
            k, _, v = part.partition("=")
            k = k.strip()
            if k not in names:
                raise ValueError(f"--faults: unknown fault kind {k!r} (known: {sorted(names)})")
            try:
                p = float(v)
            except ValueError:
                raise ValueError(f"--faults: {k}={v!r} is not a number") from None
            if k in cls.PROBABILITIES and not 0 <= p <= 1:
                raise ValueError(f"--faults: {k}={p} is not a probability in [0, 1]")
            kw[k] = p
        return dataclasses.replace(base, **kw)


@dataclass(frozen=True)
class FaultConfig(FaultWeights):
    """The journal's fault table: probabilities of every kind (module docstring), plus latency shape.

    Network probabilities apply per frame; cluster probabilities are relative
    weights of the director's action at each step (the rest of the weight
    ``write_weight`` is "let the writer write").
    """

    KINDS: ClassVar[tuple[str, ...]] = tuple(NETWORK_KINDS + CLUSTER_KINDS + list(DISK_KINDS))
    PROBABILITIES: ClassVar[frozenset[str]] = frozenset(NETWORK_KINDS + CLUSTER_KINDS + list(DISK_KINDS) + ["tcp_fifo"])

    drop: float = 0.02
    delay: float = 0.05
    reorder: float = 0.05
    duplicate: float = 0.02
    base_latency_ms: float = 0.5
    max_delay_ms: float = 3000.0
    #: probability that a run's network keeps TCP's order within a connection
    #: (``MemoryNetwork(fifo=True)``): reorder then only happens across
    #: connections; otherwise frames of one connection may overtake each other
    #: and duplicates may arrive out of order (an RPC layer that retries)
    tcp_fifo: float = 0.5
    partition: float = 0.04
    isolate_old_writer: float = 0.5  # probability, at each takeover
    takeover_at_segment_start: float = 0.05  # probability, each time a writer starts a segment
    heal: float = 0.06
    jn_crash: float = 0.04
    jn_crash_point: float = 0.04
    jn_restart: float = 0.08
    disk_full: float = 0.02
    disk_free: float = 0.04
    writer_takeover: float = 0.06
    writer_crash: float = 0.02
    read: float = 0.05
    jn_sync: float = 0.05
    write_weight: float = 0.5
    #: disk failures: probabilities per director step (module docstring)
    fsync_eio: float = 0.01
    fsync_dir_eio: float = 0.005
    write_enospc: float = 0.01
    write_eio: float = 0.005
    read_eio: float = 0.005

    def director_weights(self) -> list[tuple[str, float]]:
        """Every step kind by its weight, then ``write`` (let the writers write) by ``write_weight``."""
        return [(k, getattr(self, k)) for k in CLUSTER_KINDS if k not in _AT_EVENT_KINDS] + \
            [("write", self.write_weight)]


@dataclass(frozen=True)
class HAFaults(FaultWeights):
    """The whole cluster's fault table: relative weights of the director's choices (module docstring)."""

    KINDS: ClassVar[tuple[str, ...]] = (
        "nn_crash", "nn_pause", "zkfc_crash", "zkfc_pause", "pair_pause", "zk_crash", "zk_partition",
        "session_expire", "nn_jn_partition", "client_nn_partition", "nn_nn_partition", "disk_full", "jn_crash",
        *DISK_KINDS, "nn_fsync_eio")
    #: the disk failures: probabilities per director step, not director weights
    PROBABILITIES: ClassVar[frozenset[str]] = frozenset([*DISK_KINDS, "nn_fsync_eio"])

    nn_crash: float = 1.0
    nn_pause: float = 1.0
    zkfc_crash: float = 0.5
    zkfc_pause: float = 0.7
    pair_pause: float = 0.7          # a NameNode and its ZKFC together (the stuck-controller case)
    zk_crash: float = 0.4
    zk_partition: float = 0.6        # a ZKFC cut from ZooKeeper
    session_expire: float = 0.4
    nn_jn_partition: float = 0.6     # a NameNode cut from the JournalNodes
    client_nn_partition: float = 0.4
    nn_nn_partition: float = 0.3
    disk_full: float = 0.4           # a NameNode's edits disk full: it reports unhealthy
    jn_crash: float = 0.4
    nothing: float = 1.0
    #: the JournalNodes' disk failures: probabilities per director step, not director weights (module docstring)
    fsync_eio: float = 0.03
    fsync_dir_eio: float = 0.015
    write_enospc: float = 0.02
    write_eio: float = 0.01
    read_eio: float = 0.01
    #: a NameNode's local edits: its next (or one of its next 3) fsync/fdatasync fails with EIO
    nn_fsync_eio: float = 0.03

    def director_weights(self) -> list[tuple[str, float]]:
        """Every director kind with a weight, ``nothing`` included, in field order."""
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                if getattr(self, f.name) > 0 and f.name not in self.PROBABILITIES]


class NetworkFaults:
    """The in-memory network's fault hook: per-frame drop, delay, reorder, duplicate.

    Args:
        config: the probabilities.
        rng: the run's random generator (invariant 1).
        observer: optional ``observer(src, dst, frame)`` called for every frame
            before the decision (the simulator decodes responses there).

    Attributes:
        counts: frames affected, by kind.
        enabled: False delivers every frame with base latency (the final,
            fault-free phase of a run).
    """

    def __init__(self, config: FaultConfig, rng: random.Random, observer=None) -> None:
        self.config = config
        self.rng = rng
        self.observer = observer
        self.counts: dict[str, int] = {k: 0 for k in NETWORK_KINDS}
        self.enabled = True

    def __call__(self, src: str, dst: str, frame: bytes) -> list[float]:
        if self.observer is not None:
            self.observer(src, dst, frame)
        c = self.config
        rng = self.rng
        base = c.base_latency_ms / 1000.0 * (0.5 + rng.random())
        if not self.enabled:
            return [base]
        if c.drop and rng.random() < c.drop:
            self.counts["drop"] += 1
            return []
        delay = base
        if c.delay and rng.random() < c.delay:
            self.counts["delay"] += 1
            delay += rng.random() * c.max_delay_ms / 1000.0
        if c.reorder and rng.random() < c.reorder:
            self.counts["reorder"] += 1
            delay += rng.random() * 5 * c.base_latency_ms / 1000.0
        if c.duplicate and rng.random() < c.duplicate:
            self.counts["duplicate"] += 1
            return [delay, delay + rng.random() * c.max_delay_ms / 1000.0]
        return [delay]
