"""The checker: one entry point that judges a history by every rule its events allow.

Why one entry: every run of every tool (the simulator's journal and whole-cluster
configurations, the chaos harness on real processes, the clusters on hosts) is
judged by the same call, so a new rule is written once and judges them all. It is
pure and fed only the observed history (:mod:`qjournal.sim.history`).

What it applies:

* the quorum journal's rules (:mod:`qjournal.sim.journal_rules`): writers'
  acknowledgements, readers' records, the JournalNodes' answers, the final log and
  disks;
* the whole cluster's rules (:mod:`qjournal.sim.cluster_rules`): the clients'
  namespace operations and reads, the NameNodes' answers and final namespaces,
  the controllers, progress after the heal;
* the search for a linearization of the clients' operations
  (:mod:`qjournal.sim.linearizability`, a module of its own).

A rule whose events a history lacks finds nothing there: a journal run has no
namespace operation, a chaos run does not see the JournalNodes' side of the wire.

Invariants:

1. At most ``max_per_rule`` violations of one rule are reported; a rule set's
   violations come in its rules' order (then by their events), the journal's
   first, then the whole cluster's, then linearizability's.
"""

from __future__ import annotations

from typing import Callable, Iterable

from qjournal.sim.cluster_rules import CLUSTER_RULES, cluster_violations
from qjournal.sim.history import History, Violation
from qjournal.sim.journal_rules import JOURNAL_RULES, journal_violations
from qjournal.sim.linearizability import LIN_RULES, linearizability_violations

__all__ = ["check", "RULES"]

#: every rule's name, in report order (``read_lost`` is a journal rule and a whole-cluster one)
RULES = list(dict.fromkeys(JOURNAL_RULES + CLUSTER_RULES + LIN_RULES))


def _limited(found: Iterable[Violation], rules: list[str], max_per_rule: int) -> list[Violation]:
    """Invariant 1 for one rule set."""
    out: list[Violation] = []
    seen: dict[str, int] = {}
    for v in found:
        seen[v.rule] = seen.get(v.rule, 0) + 1
        if seen[v.rule] <= max_per_rule:
            out.append(v)
    order = {r: i for i, r in enumerate(rules)}
    return sorted(out, key=lambda v: (order[v.rule], v.seqs))


def check(history: History, *, max_per_rule: int = 5, linearizability: bool = True,
          clock: Callable[[], float] | None = None, budget_s: float | None = None) -> list[Violation]:
    """Judge ``history`` by every rule of the module docstring.

    Args:
        history: the events of one run.
        max_per_rule: report at most this many violations per rule (invariant 1).
        linearizability: also search for a linearization (off: the rules alone, e.g. a rule's
            table test).
        clock, budget_s: a wall-time budget of the search (:func:`check_linearizable`).

    Returns:
        The violations (empty = every rule held), in the order of invariant 1.
    """
    out = (_limited(journal_violations(history), JOURNAL_RULES, max_per_rule)
           + _limited(cluster_violations(history), CLUSTER_RULES, max_per_rule))
    if linearizability:
        out += linearizability_violations(history, clock=clock, budget_s=budget_s)
    return out
