"""Operator jobs on Spark: ``archive`` (topics → Parquet) and ``usage`` (metering → rollup tables).

Run them with the console script ``queuecore-spark archive|usage …`` (``local[*]`` unless ``--master``) or
with ``spark-submit`` on any cluster: ``spark-submit --master … -m``-less, pointing at ``jobs/cli.py``.
"""
