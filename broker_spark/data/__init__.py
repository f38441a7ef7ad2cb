"""Broker's data model and its codecs (binary, msgpack records, Zeek JSON, Arrow)."""

from broker_spark.data.types import (
    Count,
    DataType,
    Enum,
    FrozenTable,
    Port,
    Timespan,
    Timestamp,
    sort_key,
    timespan_ns,
    timestamp_ns,
    type_of,
)
from broker_spark.data.value import Data, freeze, from_py, render

__all__ = [
    "Count",
    "Data",
    "DataType",
    "Enum",
    "FrozenTable",
    "Port",
    "Timespan",
    "Timestamp",
    "freeze",
    "from_py",
    "render",
    "sort_key",
    "timespan_ns",
    "timestamp_ns",
    "type_of",
]
