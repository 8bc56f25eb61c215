"""``TopicsDataSource``: the object Spark instantiates for ``format("topics")``.

Role: check the options (``_options``) and hand out the reader, stream reader and
writers. Spark creates it in a Python worker on the driver for every query it plans, so
it keeps nothing but the options, and what ``register`` learnt from the session.

Rules:
1. That Python worker has no SparkSession to ask, so ``register`` reads the session's
   default parallelism and registers a subclass that carries it (``parallelism``); Spark
   ships the registered class to the planner pickled by value, attribute included. The
   readers derive their default partition size from it (``_plan`` rule 5).
2. Every entry point is ``@message_first`` (``_errors``): a user-facing error reaches the
   user with its message, not after a traceback of the data source's internals.
"""

from __future__ import annotations

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from ._errors import message_first
from ._options import OptionError, parse_read_options, parse_write_options
from ._read import TopicsBatchReader, TopicsStreamReader
from ._rows import read_schema
from ._write import TopicsStreamWriter, TopicsWriter

__all__ = ["SOURCE_NAME", "TopicsDataSource", "register"]

SOURCE_NAME = "topics"


class TopicsDataSource(DataSource):
    """Read and write topics from Spark: ``spark.read.format("topics")``.

    Options (all strings; see docs/SPARK.md):
        path | url: a data directory (read-only ``topics.Reader``; writes open the engine)
            or a topics-server ``http://host:port``; ``api_key`` for a server with keys.
        topic | topic_prefix: one name or a comma list, or every topic under a prefix.
        from_seq, to_seq: read seqs ``> from_seq`` and ``<= to_seq``; keywords
            ``earliest``/``latest`` (``to_seq``: ``latest``) or a JSON map of topic -> either.
        starting_ts, ending_ts: the same bounds by commit time (ms, ISO 8601 with a zone,
            or a map), in place of from_seq / to_seq.
        where: a predicate (the diff's JSON ``where``) applied before records reach Spark.
        partition_records: about how many seqs one task reads (default: the read's size
            over spark.default.parallelism, between 100000 and 1000000).
        on_gap: ``fail`` (default) raises on a tombstone; ``emit`` adds a ``gap`` row.
        max_records_per_trigger: streaming admission limit (0 = no limit).
        data_schema: DDL of typed data fields ("sku string, qty bigint") returned in place
            of ``data``; mode: PERMISSIVE (``_corrupt_record``) or FAILFAST for records
            that do not fit. A user schema (``.schema(...)``) prunes columns, and any
            field in it that is not a record column is a typed data field too.
        batch_records, write_id, create, config, node, lock_timeout_s, ledger_topic:
            writes.

    Example::

        topics.spark.register(spark)
        df = spark.read.format("topics").option("path", "./data").option("topic", "orders").load()
    """

    #: spark.default.parallelism of the registering session; 0 if unknown (rule 1)
    parallelism = 0

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    @message_first
    def schema(self) -> str:
        opts = parse_read_options(self.options)
        return read_schema(opts.on_gap, opts.data_schema, opts.failfast)

    @message_first
    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicsBatchReader(parse_read_options(self.options), schema, self.parallelism)

    @message_first
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TopicsStreamReader(parse_read_options(self.options), schema, self.parallelism)

    @message_first
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return TopicsWriter(parse_write_options(self.options), schema)

    @message_first
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        _append_only(overwrite)
        return TopicsStreamWriter(parse_write_options(self.options), schema)


def _append_only(overwrite: bool) -> None:
    if overwrite:
        raise OptionError(
            "topics are append-only logs: write with mode('append') "
            "(outputMode('append') for streams); delete records with the engine or DELETE API"
        )


def register(spark: SparkSession) -> None:
    """Register the ``topics`` data source with a SparkSession.

    Spark starts Python workers with ``PYSPARK_PYTHON`` (default ``python3``): point it at
    the interpreter that has ``topics`` and ``pyarrow`` installed before the session starts.

    Example::

        spark = SparkSession.builder.master("local[2]").getOrCreate()
        topics.spark.register(spark)
        spark.read.format("topics").option("url", "http://127.0.0.1:4000") \\
            .option("topic", "orders").load().show()
    """
    bound = type(
        "TopicsDataSourceOfSession",
        (TopicsDataSource,),
        {"parallelism": default_parallelism(spark), "__module__": __name__},
    )
    spark.dataSource.register(bound)


def default_parallelism(spark: SparkSession) -> int:
    """``spark.default.parallelism`` if set, else the context's default (the cores of a
    local master, the executors' cores on a cluster); 0 where neither can be read (a Spark
    Connect session has no SparkContext)."""
    conf = spark.conf.get("spark.default.parallelism", None)
    if conf:
        return int(conf)
    try:
        return int(spark.sparkContext.defaultParallelism)
    except PySparkException:  # Spark Connect: no SparkContext on the client
        return 0
