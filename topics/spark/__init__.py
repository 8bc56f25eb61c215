"""topics.spark: topics as a Spark (4.x) Python data source, and helpers for Spark jobs.

``register(spark)`` adds the ``topics`` format::

    import topics.spark
    topics.spark.register(spark)

    orders = (spark.read.format("topics")
              .option("path", "./data")          # or .option("url", "http://127.0.0.1:4000")
              .option("topic", "orders")
              .load())                           # topic, seq, ts, ts_ms, node, tag, data, meta

    (stats.select(F.to_json(F.struct("window", "n")).alias("data"))
          .write.format("topics").mode("append")
          .option("url", "http://127.0.0.1:4000").option("topic", "order_stats").save())

The same format streams (``spark.readStream`` / ``writeStream``) with exact per-topic seq
offsets. :class:`ReaderHandle` opens a ``topics.Reader`` lazily, once per executor
process, for lookups inside UDFs and ``mapPartitions``. docs/SPARK.md has every option,
the gap-row shape and the delivery guarantees.

Importing this package needs ``pyspark`` and ``pyarrow`` (``pip install 'topics[spark]'``).
"""

from __future__ import annotations

from ._datasource import SOURCE_NAME as SOURCE_NAME
from ._datasource import TopicsDataSource as TopicsDataSource
from ._datasource import register as register
from ._handle import ReaderHandle as ReaderHandle
from ._options import OptionError as OptionError
from ._rows import BASE_FIELDS as BASE_FIELDS
from ._rows import CORRUPT as CORRUPT
from ._rows import GAP_FIELD as GAP_FIELD
from ._rows import BadRecordError as BadRecordError
from ._rows import GapError as GapError
from ._rows import read_schema as read_schema
from ._write import LEDGER_TOPIC as LEDGER_TOPIC
from ._write import TopicsCommitMessage as TopicsCommitMessage

# The errors a user meets name their public home ("topics.spark.GapError: ..."), not the
# private module that raises them: PySpark shows the class path before the message.
for _error in (OptionError, GapError, BadRecordError):
    _error.__module__ = __name__
del _error

__all__ = [
    "BASE_FIELDS",
    "GAP_FIELD",
    "LEDGER_TOPIC",
    "SOURCE_NAME",
    "BadRecordError",
    "CORRUPT",
    "GapError",
    "OptionError",
    "ReaderHandle",
    "TopicsCommitMessage",
    "TopicsDataSource",
    "read_schema",
    "register",
]
