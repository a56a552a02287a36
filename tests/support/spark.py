"""A local SparkSession for tests: loopback only, 2 cores, few shuffle partitions."""

from __future__ import annotations

import os
from typing import Any


def local_spark() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pipelines.group_history import spark_session
    from pipelines.simulate import worker_environment

    worker_environment()  # Python workers (pipelines.simulate) in this venv and checkout

    spark = spark_session("local[2]", app="groupcoord-tests")
    spark.sparkContext.setLogLevel("ERROR")
    return spark
