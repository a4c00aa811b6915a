"""Deterministic simulation of the quorum journal and the correctness checker.

Why a package of its own: the correctness requirements of PRODUCT.md (seed 000
§1.3.2) must hold under *any* failure of a minority, and no example-based test
can enumerate those. This package runs the real JournalNode rules and the real
quorum client on a virtual-time event loop (:mod:`.loop`) with a simulated disk
(:mod:`.disk`) and a faulty in-memory network (:mod:`.faults`), drives writers,
takeovers and readers (:mod:`.workload`, :mod:`.journalnodes`), and judges the
observed history with a checker that knows only the rules (:mod:`.checker`,
:mod:`.history`). One seed replays a whole run. The real-process harness that
feeds the same checker is :mod:`qjournal.chaos`. See docs/testing.md.
"""
