"""qjournal.pipeline: the Spark (PySpark) pipeline over the edit log.

Why a package: JournalNode segments are decoded on Spark (``decode``, ``ingest``), checked
across replicas (``audit``), folded into a new checkpoint image the NameNode can load
(``checkpoint``) and summarised (``report``); ``session`` is the one place that builds the
SparkSession, ``fetch`` reads segments over HTTP, ``generate`` writes synthetic journals for
tests and benchmarks, and ``run`` chains the stages for ``qjournal pipeline``.
"""
