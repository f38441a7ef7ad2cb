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
from broker_spark.data.value import Data, RawData, freeze, from_py, render
from broker_spark.data.views import Set, Table, Vector

__all__ = [
    "Count",
    "Data",
    "DataType",
    "Enum",
    "FrozenTable",
    "Port",
    "RawData",
    "Set",
    "Table",
    "Timespan",
    "Timestamp",
    "Vector",
    "freeze",
    "from_py",
    "render",
    "sort_key",
    "timespan_ns",
    "timestamp_ns",
    "type_of",
]
