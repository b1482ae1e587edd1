"""The `pynatsd` Python Data Source: streaming read, batch and streaming write."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader
from pyspark.sql.types import StructType

from pynatsd.spark.options import ReadOptions, WriteOptions
from pynatsd.spark.reader import NatsStreamReader
from pynatsd.spark.schema import READ_SCHEMA, check_write_schema
from pynatsd.spark.writer import NatsArrowWriter, NatsStreamArrowWriter

NAME = "pynatsd"


class NatsDataSource(DataSource):
    """Options: url (comma-separated servers), subjects, queue, maxMessagesPerTrigger, bufferSize,
    bufferBytes, numPartitions, availableNowIdleMs, availableNowMaxMs, connectTimeoutMs, flushTimeoutMs,
    msgIdHeader. See README "Spark pipelines"."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        raise ValueError("pynatsd is a live stream: use spark.readStream (core NATS keeps no history)")

    def streamReader(self, schema: StructType) -> NatsStreamReader:
        return NatsStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> NatsArrowWriter:
        check_write_schema(schema)
        return NatsArrowWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> NatsStreamArrowWriter:
        check_write_schema(schema)
        return NatsStreamArrowWriter(WriteOptions.parse(self.options))
