"""Schemas shared by the reader and the writers."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# What a streaming read yields: one row per message, in arrival order (`seq` is the position in the stream).
READ_SCHEMA = StructType(
    [
        StructField("subject", StringType(), False),
        StructField("reply", StringType(), True),
        StructField("headers", MapType(StringType(), StringType(), True), True),
        StructField("payload", BinaryType(), True),
        StructField("received_at", TimestampType(), False),
        StructField("seq", LongType(), False),
    ]
)

# Spark validates returned Arrow batches against exactly this schema, so derive it rather than restate it.
READ_ARROW_SCHEMA: pa.Schema = to_arrow_schema(READ_SCHEMA, timezone="UTC")

# A JetStream read adds the stream's name; `seq` is then the stream sequence.
JS_READ_SCHEMA = StructType([*READ_SCHEMA.fields, StructField("stream", StringType(), False)])
JS_READ_ARROW_SCHEMA: pa.Schema = to_arrow_schema(JS_READ_SCHEMA, timezone="UTC")

# Columns a written DataFrame may have; others are ignored.
WRITE_REQUIRED = ("subject", "payload")
WRITE_OPTIONAL = ("headers", "reply")


def check_write_schema(schema: StructType) -> None:
    """Fail early (on the driver) when a DataFrame cannot be published."""
    names = set(schema.fieldNames())
    missing = [c for c in WRITE_REQUIRED if c not in names]
    if missing:
        raise ValueError(f"pynatsd writer needs columns {list(WRITE_REQUIRED)}; missing {missing}")
    types = {f.name: f.dataType for f in schema.fields}
    if not isinstance(types["subject"], StringType):
        raise ValueError("pynatsd writer: column 'subject' must be a string")
    if not isinstance(types["payload"], BinaryType | StringType):
        raise ValueError("pynatsd writer: column 'payload' must be binary or string")
    if "reply" in types and not isinstance(types["reply"], StringType):
        raise ValueError("pynatsd writer: column 'reply' must be a string")
    if "headers" in types:
        h = types["headers"]
        if not (
            isinstance(h, MapType)
            and isinstance(h.keyType, StringType)
            and isinstance(h.valueType, StringType)
        ):
            raise ValueError("pynatsd writer: column 'headers' must be map<string,string>")
