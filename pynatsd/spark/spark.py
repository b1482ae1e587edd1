"""A small, fast local SparkSession for the example, the tests and the benchmarks (loopback only)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from pynatsd.spark.source import NatsDataSource

REPO_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the `pynatsd` package


def local_session(
    app: str = "pynatsd", master: str = "local[2]", shuffle_partitions: int = 2
) -> SparkSession:
    """Start (or reuse) a local session with the `pynatsd` source registered.

    Python workers are started by the JVM and inherit PYTHONPATH, so the repository goes there for them to
    import `pynatsd`. On a cluster, ship the package with --py-files or install it instead.
    """
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *paths])
    # Keep Spark's own sockets on loopback (it otherwise picks the first non-loopback interface).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Workers must run the same interpreter (and virtualenv) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(NatsDataSource)
    return spark
