"""The `pynatsd` Python Data Source: streaming read, batch and streaming write."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from pynatsd.spark.jetstream import JetStreamBatchReader, JetStreamStreamReader, StreamReadOptions
from pynatsd.spark.options import ReadOptions, WriteOptions
from pynatsd.spark.reader import NatsStreamReader
from pynatsd.spark.schema import JS_READ_SCHEMA, READ_SCHEMA, check_write_schema
from pynatsd.spark.writer import NatsArrowWriter, NatsStreamArrowWriter

NAME = "pynatsd"


class NatsDataSource(DataSource):
    """Options: url (comma-separated servers), subjects, queue, maxMessagesPerTrigger, bufferSize,
    bufferBytes, numPartitions, availableNowIdleMs, availableNowMaxMs, connectTimeoutMs, flushTimeoutMs,
    msgIdHeader; with `stream` (JetStream mode) also startSequence, startTime, latest, endSequence,
    fetchBatch, fetchTimeoutMs, maxPending. See README "Spark pipelines"."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _jetstream(self) -> bool:
        return bool(self.options.get("stream"))

    def schema(self) -> StructType:
        return JS_READ_SCHEMA if self._jetstream() else READ_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        if not self._jetstream():
            raise ValueError("pynatsd core NATS keeps no history: use spark.readStream, or option 'stream'")
        return JetStreamBatchReader(StreamReadOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._jetstream():
            return JetStreamStreamReader(StreamReadOptions.parse(self.options))
        return NatsStreamReader(ReadOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> NatsArrowWriter:
        check_write_schema(schema)
        return NatsArrowWriter(WriteOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> NatsStreamArrowWriter:
        check_write_schema(schema)
        return NatsStreamArrowWriter(WriteOptions.parse(self.options))
