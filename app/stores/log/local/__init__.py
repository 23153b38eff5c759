"""The local log engine: segment files on this machine, fsync-durable (see ``engine``)."""

from app.stores.log.local.config import LocalLogConfig, LogConfig
from app.stores.log.local.engine import LocalLogEngine
from app.stores.log.local.index import CorruptIndexError
from app.stores.log.local.partition_log import OffsetOutOfRange
from app.stores.log.local.records import CorruptRecordError

__all__ = [
    "CorruptIndexError",
    "CorruptRecordError",
    "LocalLogConfig",
    "LocalLogEngine",
    "LogConfig",
    "OffsetOutOfRange",
]
