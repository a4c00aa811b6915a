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

7. The master given to ``spark-submit`` is never overridden: under
   ``spark-submit`` (its gateway is in the environment) no master is set
   unless the caller names one; elsewhere the default is ``local[*]``.
8. Executors get the driver's ``qjournal`` code when asked (``ship_code``;
   by default for every master that is not ``local``): the package is zipped
   once per process and added with ``SparkContext.addPyFile``, so workers
   without ``qjournal`` installed (or with another version) run the driver's.
   Its dependencies (pyarrow, aiohttp, msgpack, crc32c) must be installed there.
9. The ``qjournal`` data source (:mod:`qjournal.pipeline.source`) is registered.

When the process already runs inside ``spark-submit`` (a SparkContext exists),
``get_or_create`` reuses it and only applies the SQL settings.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import resources

from qjournal.pipeline.source import register as register_source

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
        master: Spark master URL (None: spark-submit's, else ``local[*]``).
        app_name: application name shown by Spark.
        shuffle_partitions: None = :func:`default_shuffle_partitions`.
        ui_enabled: start the Spark web UI.
        driver_memory: JVM heap for the driver (local mode runs everything there).
        extra_conf: further ``spark.*`` settings, applied last.
        ship_code: add the ``qjournal`` package to the executors (None: unless the master is local).
    """

    master: str | None = DEFAULT_MASTER
    app_name: str = "qjournal-pipeline"
    shuffle_partitions: int | None = None
    ui_enabled: bool = False
    driver_memory: str = "2g"
    extra_conf: dict[str, str] = field(default_factory=dict)
    ship_code: bool | None = None


def under_spark_submit() -> bool:
    """Whether this process is a driver started by ``spark-submit`` (its JVM gateway is given)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``."""
    return master == "local" or master.startswith("local[")


_CODE_ZIP: str | None = None


def code_zip() -> str:
    """A zip of the running ``qjournal`` package (made once per process), for ``addPyFile``."""
    global _CODE_ZIP
    if _CODE_ZIP is None or not os.path.exists(_CODE_ZIP):
        pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../qjournal
        fd, path = tempfile.mkstemp(prefix="qjournal-code-", suffix=".zip")
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for base, dirs, files in os.walk(pkg):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".pyc", ".pyo")):
                        continue
                    full = os.path.join(base, name)
                    z.write(full, os.path.relpath(full, os.path.dirname(pkg)))
        _CODE_ZIP = path
        atexit.register(_remove_quietly, path)
    return _CODE_ZIP


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


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
    master = opts.master
    if master is None and not under_spark_submit():
        master = os.environ.get("MASTER") or DEFAULT_MASTER
    shuffle = opts.shuffle_partitions or default_shuffle_partitions(master or "")
    builder = SparkSession.builder
    if master is not None:
        builder = builder.master(master)
    builder = (
        builder
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
    ship = opts.ship_code
    if ship is None:
        ship = not is_local_master(spark.sparkContext.master)
    if ship:
        spark.sparkContext.addPyFile(code_zip())
    register_source(spark)
    return spark
