"""The SparkSession the pipelines build (group history, the simulation sweep)."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession


def spark_session(
    master: str | None = None, app: str = "group-history", conf: dict[str, str] | None = None
) -> SparkSession:
    """A session; ``master`` None keeps what spark-submit configured (else ``local[2]``).
    ``conf``: more settings (e.g. ``spark.driver.memory`` for large local runs)."""
    builder = SparkSession.builder.appName(app)
    if master is not None or "SPARK_HOME" not in os.environ:
        builder = builder.master(master or "local[2]")
    if (master or "").startswith("local") or "SPARK_HOME" not in os.environ:
        builder = (
            builder.config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
        )
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
