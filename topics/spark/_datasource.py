"""``TopicsDataSource``: the object Spark instantiates for ``format("topics")``.

Role: check the options (``_options``) and hand out the reader, stream reader and
writers. Spark creates it in a Python worker on the driver for every query it plans, so
it keeps nothing but the options.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

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
        partition_records: about how many seqs one task reads (default 1000000).
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

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        opts = parse_read_options(self.options)
        return read_schema(opts.on_gap, opts.data_schema, opts.failfast)

    def reader(self, schema: StructType) -> DataSourceReader:
        return TopicsBatchReader(parse_read_options(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return TopicsStreamReader(parse_read_options(self.options), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        _append_only(overwrite)
        return TopicsWriter(parse_write_options(self.options), schema)

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
    spark.dataSource.register(TopicsDataSource)
