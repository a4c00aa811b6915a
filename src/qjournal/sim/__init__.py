"""Deterministic simulation, the correctness checker and the real-process chaos harness.

Why a package of its own: the correctness requirements of PRODUCT.md (seed 000
§1.3.2) must hold under *any* failure of a minority, and no example-based test
can enumerate those. This package runs the real JournalNode rules and the real
quorum client on a virtual-time event loop (:mod:`.loop`) with a simulated disk
(:mod:`.disk`) and a faulty in-memory network (:mod:`.faults`), drives writers,
takeovers and readers (:mod:`.workload`, :mod:`.cluster`), and judges the
observed history with a checker that knows only the rules (:mod:`.checker`,
:mod:`.history`). :mod:`.chaos` (with :mod:`.proxy`) runs the shipped programs
as real processes under a seeded fault schedule and feeds the same checker.
See docs/testing.md.
"""
