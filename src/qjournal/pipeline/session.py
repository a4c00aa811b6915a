"""The one place that builds the SparkSession for the qjournal pipeline.

Why one module: every entry point (``qjournal pipeline``, ``python -m
qjournal.pipeline``, ``spark-submit``, the tests and the benchmark) must start
Spark the same way, or the Python workers run another interpreter than the
driver (and cannot import the decoder), the JVM floods the terminal with INFO
lines, and a two-core machine spends its time shuffling 200 empty partitions.

What it settles:

1. ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` are the running interpreter
   (``sys.executable``), so workers import the installed ``qjournal`` package.
2. log4j2 reads ``log4j2.properties`` shipped beside this module (errors only).
3. ``spark.sql.shuffle.partitions`` is sized to the machine (2 x cores, at
   least 2) unless the caller gives a number.
4. Parquet partition overwrite is dynamic, so an incremental ingest replaces
   only the partitions it rewrites.
5. The web UI is off unless asked for (tests and benchmarks never need it).
6. Adaptive query execution is off and file listing stays on the driver up to
   4096 paths: on two local cores the pipeline's plans are many small jobs,
   and AQE's re-planning per stage and a listing job per read cost more
   than they save (measured: a checkpoint of 3000 edits took about 30 % less
   time with AQE off).

When the process already runs inside ``spark-submit`` (a SparkContext exists),
``get_or_create`` reuses it and only applies the SQL settings.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import resources

#: default master when the caller gives none (``--master``)
DEFAULT_MASTER = "local[*]"


def log4j2_config_path() -> str:
    """Path of the quiet log4j2 configuration shipped in this package.

    Returns:
        An absolute file path.
    """
    return str(resources.files("qjournal.pipeline").joinpath("log4j2.properties"))


def default_shuffle_partitions(master: str) -> int:
    """Shuffle partitions for a master URL: twice the local cores, at least 2.

    Args:
        master: ``local``, ``local[N]``, ``local[*]`` or a cluster URL.

    Returns:
        The partition count (for a cluster master, twice the local core count).
    """
    cores = os.cpu_count() or 2
    if master.startswith("local["):
        spec = master[len("local["):].split(",")[0].rstrip("]")
        if spec.isdigit():
            cores = int(spec)
    elif master == "local":
        cores = 1
    return max(2, 2 * cores)


@dataclass(frozen=True)
class SessionOptions:
    """How to build the session.

    Attributes:
        master: Spark master URL.
        app_name: application name shown by Spark.
        shuffle_partitions: None = :func:`default_shuffle_partitions`.
        ui_enabled: start the Spark web UI.
        driver_memory: JVM heap for the driver (local mode runs everything there).
        extra_conf: further ``spark.*`` settings, applied last.
    """

    master: str = DEFAULT_MASTER
    app_name: str = "qjournal-pipeline"
    shuffle_partitions: int | None = None
    ui_enabled: bool = False
    driver_memory: str = "2g"
    extra_conf: dict[str, str] = field(default_factory=dict)


def get_or_create(options: SessionOptions | None = None):
    """Build (or reuse) the SparkSession with the settings above.

    Args:
        options: see :class:`SessionOptions`; defaults when None.

    Returns:
        A ``pyspark.sql.SparkSession``.
    """
    opts = options or SessionOptions()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # pandas-on-Spark / Arrow warn noisily about this on every session otherwise.
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    from pyspark.sql import SparkSession

    log_conf = log4j2_config_path()
    java_opts = f"-Dlog4j2.configurationFile=file:{log_conf} -Dlog4j.configurationFile=file:{log_conf}"
    shuffle = opts.shuffle_partitions or default_shuffle_partitions(opts.master)
    builder = (
        SparkSession.builder.master(opts.master)
        .appName(opts.app_name)
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", java_opts)
        .config("spark.driver.memory", opts.driver_memory)
        .config("spark.ui.enabled", "true" if opts.ui_enabled else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle))
        .config("spark.default.parallelism", str(shuffle))
        .config("spark.sql.sources.partitionOverwriteMode", "dynamic")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.sources.parallelPartitionDiscovery.threshold", "4096")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    )
    for key in sorted(opts.extra_conf):
        builder = builder.config(key, opts.extra_conf[key])
    spark = builder.getOrCreate()
    # Settings that also apply to a session reused under spark-submit.
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle))
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.sparkContext.setLogLevel("ERROR")
    return spark
