"""``qjournal pipeline ingest|audit|checkpoint|report|all``: the Spark pipeline from the main CLI.

Why here: every role has its subcommand module; the pipeline's arguments and
runner live in :mod:`qjournal.pipeline.run` so that ``spark-submit`` and
``python -m qjournal.pipeline`` take exactly the same arguments.
"""

from __future__ import annotations

from qjournal.pipeline.run import add_arguments, run


def register(subparsers) -> None:
    """Add the ``pipeline`` subcommand."""

    p = subparsers.add_parser("pipeline", description="Decode JournalNode segments with Spark, audit the "
                                          "replicas, build a checkpoint image and a report.")
    add_arguments(p)
    p.set_defaults(func=run)
