"""Spark's Kafka sink columns in the ``tidalmq`` sink: ``value``, ``key``, ``headers`` (and ``topic``, the
same in both), so a Kafka job's write ports unchanged. RocketMQ's keys and properties are text: a binary
key and the headers' values are written as UTF-8 (other bytes fail, naming the column)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.types import ArrayType, BinaryType, DataType, StringType, StructType

# Spark's Kafka sink columns -> the column they are written as (Kafka's job writes key, value, topic).
KAFKA_COLUMNS: dict[str, tuple[str, str, tuple[type[DataType], ...]]] = {
    "value": ("body", "string or binary", (StringType, BinaryType)),
    "key": ("keys", "string or binary (UTF-8 text)", (StringType, BinaryType)),
    "headers": ("properties", "array<struct<key:string,value:binary>>", (ArrayType,)),
}


def is_kafka_header(dt: DataType) -> bool:
    return isinstance(dt, StructType) and [(f.name, type(f.dataType)) for f in dt.fields] == \
        [("key", StringType), ("value", BinaryType)]


def kafka_conversions(schema: StructType, columns: dict[str, str]) -> dict[str, str]:
    """The Kafka columns whose values need converting before they are written (column name -> what it
    becomes): a binary ``key`` into text, ``headers`` into a properties map."""
    types = {f.name: f.dataType for f in schema.fields}
    out: dict[str, str] = {}
    for native, name in columns.items():
        kafka = KAFKA_COLUMNS.get(name.lower())
        if kafka is None:
            continue
        if native == "keys" and isinstance(types[name], BinaryType):
            out[name] = "keys"
        elif native == "properties":
            out[name] = "properties"
    return out


def from_kafka(rb: Any, conversions: dict[str, str]) -> Any:
    """The Arrow batch with Kafka's binary ``key`` as UTF-8 text and ``headers`` as a map<string,string>
    (RocketMQ's keys and properties are text); bytes that are not UTF-8 fail, naming the column."""
    import pyarrow as pa

    arrays = list(rb.columns)
    for name, what in conversions.items():
        i = rb.schema.get_field_index(name)
        col = arrays[i]
        try:
            if what == "keys":
                arrays[i] = col.cast(pa.string())
            else:
                values = col.values
                if values.field("key").null_count:
                    raise ValueError(f"column {name!r} has a header without a key")
                arrays[i] = pa.MapArray.from_arrays(col.offsets, values.field("key"),
                                                    values.field("value").cast(pa.string()), mask=col.is_null())
        except pa.ArrowInvalid as e:
            raise ValueError(f"column {name!r} holds bytes that are not UTF-8 text, as RocketMQ's {what} "
                             f"are: {e}") from None
    return pa.RecordBatch.from_arrays(arrays, names=rb.schema.names)
