"""Fixtures of the pipeline tests: one SparkSession for the whole run, generated journals.

Why session scope: a cold SparkSession costs 5-20 s on this machine; every
Spark test shares one (built by ``qjournal.pipeline.session``, the only place
that builds it). Generated journals are seeded; the seed is printed so a
failure replays with the same history.
"""

from __future__ import annotations

import os

import pytest

#: seeds of the generated histories (printed; change to explore, keep to replay)
CLEAN_SEED = int(os.environ.get("QJ_PIPELINE_SEED", "20261123"))
DAMAGED_SEED = CLEAN_SEED + 1


@pytest.fixture(scope="session")
def spark():
    from qjournal.pipeline.session import SessionOptions, get_or_create

    session = get_or_create(SessionOptions(master="local[2]", app_name="qjournal-pipeline-tests",
                                           shuffle_partitions=2, driver_memory="1g"))
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def clean_history(tmp_path_factory):
    """A clean history: 1200 txids in 4 segments on 3 nodes, NameNode images at 0, 600, 1200."""
    from qjournal.pipeline.generate import GenOptions, generate

    out = str(tmp_path_factory.mktemp("clean-journal"))
    print(f"clean history seed={CLEAN_SEED}")
    return generate(GenOptions(seed=CLEAN_SEED, txns=1200, out=out, roll_every_txns=300,
                               image_txids=(0, 600, 1200)))


@pytest.fixture(scope="session")
def damaged_history(tmp_path_factory):
    """Every kind of damage: lagging node, bit flip, divergent finalized copy, gap."""
    from qjournal.pipeline.generate import GenOptions, generate

    out = str(tmp_path_factory.mktemp("damaged-journal"))
    print(f"damaged history seed={DAMAGED_SEED}")
    return generate(GenOptions(seed=DAMAGED_SEED, txns=700, out=out, roll_every_txns=100,
                               damage=("lagging", "bitflip", "divergent", "gap"),
                               lagging_segments=1))


@pytest.fixture(scope="session")
def clean_ingested(spark, clean_history, tmp_path_factory):
    """The clean history ingested in two steps (the first half, then everything)."""
    from qjournal.pipeline import ingest as ing

    layout = ing.OutputLayout(str(tmp_path_factory.mktemp("clean-out")))
    names = ing.node_names(clean_history.journal_dirs)
    copies = ing.discover_local(clean_history.journal_dirs, names=names)
    first = ing.ingest(spark, [c for c in copies if c.segment_start < 600], layout, names,
                       progress=ing.no_progress)
    second = ing.ingest(spark, copies, layout, names, progress=ing.no_progress)
    again = ing.ingest(spark, copies, layout, names, progress=ing.no_progress)
    return layout, (first, second, again)


@pytest.fixture(scope="session")
def damaged_ingested(spark, damaged_history, tmp_path_factory):
    from qjournal.pipeline import ingest as ing

    layout = ing.OutputLayout(str(tmp_path_factory.mktemp("damaged-out")))
    names = ing.node_names(damaged_history.journal_dirs)
    ing.ingest(spark, ing.discover_local(damaged_history.journal_dirs, names=names), layout, names,
               progress=ing.no_progress)
    return layout
