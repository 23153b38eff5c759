"""Operator jobs on Spark: ``archive`` (topics → Parquet) and ``usage`` (metering → rollup tables).

Run them with the console script ``queuecore-spark archive|usage …`` (``local[*]`` unless ``--master``) or
with ``spark-submit --master … <site-packages>/queuecore_spark/jobs/cli.py archive|usage …`` on any cluster.
"""
