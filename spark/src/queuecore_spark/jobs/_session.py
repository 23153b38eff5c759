"""The SparkSession of a job: the master spark-submit gave, else ``--master``, else ``local[*]``."""

from __future__ import annotations

import os
import sys

from pyspark import SparkConf
from pyspark.sql import SparkSession

from .._source import QueueCoreDataSource


def session(app_name: str, master: str | None = None) -> SparkSession:
    # Spark's Python workers run this interpreter (the one with queuecore_spark installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).config("spark.sql.session.timeZone", "UTC")
    if master is not None:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):  # not under spark-submit
        builder = builder.master("local[*]").config("spark.driver.memory", "1g")
    spark = builder.getOrCreate()
    spark.dataSource.register(QueueCoreDataSource)
    return spark
