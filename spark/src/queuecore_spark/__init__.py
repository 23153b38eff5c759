"""QueueCore for Apache Spark: the ``queuecore`` PySpark data source.

from queuecore_spark import QueueCoreDataSource
spark.dataSource.register(QueueCoreDataSource)
df = spark.read.format("queuecore").option("topic", "orders").load()
"""

from ._http import QueueCoreError
from ._source import SCHEMA, QueueCoreDataSource

__all__ = ["SCHEMA", "QueueCoreDataSource", "QueueCoreError"]
__version__ = "0.1.0"
