"""The events a real Zeek sent, with their signatures, as Spark columns: for the typed writers.

Two recordings hold Zeek events with arguments of every type and the Zeek
scripts that declared them: ``zeek-events-all-types`` (63 events over a
Broker peering, each with network-timestamp metadata) and ``zeek-zmq-events``
(18 events over the ZeroMQ backend, plus two that Python sent and Zeek
accepted). :func:`holdout_events` and :func:`zmq_events` give each event's
signature (read from the recorded script: its type declarations and the
event's ``global NAME: event(...)`` line), topic and recorded payload.

:func:`as_columns` turns a recorded event's arguments back into what a Spark
user would have: a Spark schema of ordinary Spark types (BIGINT for counts,
DECIMAL(20,0) beyond BIGINT, STRING for addresses, ports, subnets, enums and
patterns, TIMESTAMP and INTERVAL DAY TO SECOND, ARRAY, MAP and STRUCT) and
the row, both as Spark takes it and as the Arrow batch Spark hands a writer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import pyarrow as pa
from recorded import VECTORS
from zeek_recordings import recording

from broker_spark.data.binary import decode
from broker_spark.data.types import INT64_MAX, Count, Enum, Port, timespan_ns, timestamp_ns
from broker_spark.zeek.script_types import (
    Basic,
    EnumType,
    EventSignature,
    RecordType,
    ScriptType,
    SetType,
    TableType,
    VectorType,
    parse_signature,
)


@dataclass(frozen=True)
class RecordedEvent:
    signature: EventSignature
    topic: str
    payload: bytes

    @property
    def args(self) -> tuple:
        return decode(self.payload)[2][1]

    @property
    def network_time(self) -> Any:
        content = decode(self.payload)[2]
        return content[2][0][1] if len(content) > 2 else None


_TYPES = re.compile(r"\btype \w+: (?:enum|record) \{.*?\};", re.DOTALL)
_EVENTS = re.compile(r"\bglobal (\w+): event\((.*?)\);", re.DOTALL)


def _signatures(script: str, module: str) -> dict[str, EventSignature]:
    """Every event the script declares, by full name, with the module's types declared."""
    body = script[script.index(f"module {module};") :]
    declarations = "\n".join(_TYPES.findall(body))
    out = {}
    for name, params in _EVENTS.findall(script):
        in_module = script.index(f"global {name}:") > script.index(f"module {module};")
        prefix = f"module {module};\n{declarations}\n" if in_module else ""
        sig = parse_signature(f"{prefix}global {name}: event({params});")
        out[sig.name] = sig
    return out


def _concrete_any(sig: EventSignature, args: tuple, declared: dict[str, Any]) -> EventSignature:
    """``any`` parameters replaced by the type the value has (a user writes that type)."""
    params = []
    for p, a in zip(sig.params, args, strict=True):
        if p.type == Basic("any"):
            if isinstance(a, Count):
                p = type(p)(p.name, Basic("count"))
            elif isinstance(a, tuple):
                p = type(p)(p.name, declared["Holdout::ev_record"].params[0].type)
            else:
                p = type(p)(p.name, Basic("string"))
        params.append(p)
    return EventSignature(sig.name, tuple(params))


@cache
def holdout_events() -> list[RecordedEvent]:
    """The 63 events of ``zeek-events-all-types``, in wire order."""
    folder = VECTORS / "zeek-events-all-types"
    sigs = _signatures((folder / "scripts" / "send-events.zeek").read_text(), "Holdout")
    out = []
    for topic, payload in recording("zeek-events-all-types").data:
        if topic != "zeek/event/holdout":
            continue
        name, args = decode(payload)[2][:2]
        out.append(RecordedEvent(_concrete_any(sigs[name], args, sigs), topic, payload))
    return out


@cache
def zmq_events() -> list[RecordedEvent]:
    """The 18 events Zeek published on ZeroMQ and the 2 Python sent that Zeek accepted."""
    folder = VECTORS / "zeek-zmq-events"
    sigs = _signatures((folder / "scripts" / "events.zeek").read_text(), "ZTest")
    out = []
    lines = (folder / "python" / "sub_received.jsonl").read_text().splitlines()
    sent = (folder / "python" / "sent.jsonl").read_text().splitlines()
    for line in lines + sent[:2]:
        frames = [bytes.fromhex(f) for f in json.loads(line)["frames"]]
        assert frames[2] == b"broker-bin-v1"
        name = decode(frames[3])[2][0]
        out.append(RecordedEvent(sigs[name], frames[0].decode(), frames[3]))
    return out


# --- recorded values as Spark columns ----------------------------------------------------------

_PROTO = {0: "unknown", 1: "tcp", 2: "udp", 3: "icmp"}
_PATTERN = re.compile(r"\^\?\((.*)\)\$\?\Z", re.DOTALL)


def _spark_type(t: ScriptType, values: list[Any]) -> Any:
    """A Spark type that holds ``values`` of Zeek type ``t``, as a user would pick it."""
    from pyspark.sql import types as T

    values = [v for v in values if v is not None]
    if isinstance(t, Basic):
        name = t.name
        if name == "count":
            big = any(v > INT64_MAX for v in values)
            return T.DecimalType(20, 0) if big else T.LongType()
        if name == "string":
            binary = any(isinstance(v, bytes) for v in values)
            return T.BinaryType() if binary else T.StringType()
        simple = {
            "int": T.LongType,
            "double": T.DoubleType,
            "bool": T.BooleanType,
            "time": T.TimestampType,
            "interval": T.DayTimeIntervalType,
        }
        return simple.get(name, T.StringType)()
    if isinstance(t, EnumType):
        return T.StringType()
    if isinstance(t, VectorType):
        return T.ArrayType(_spark_type(t.element, [x for v in values for x in v]))
    if isinstance(t, SetType):
        return T.ArrayType(_index_type(t.index, [x for v in values for x in v]))
    if isinstance(t, TableType):
        keys = [k for v in values for k in v]
        items = [x for v in values for x in v.values()]
        return T.MapType(_index_type(t.index, keys), _spark_type(t.value, items))
    assert isinstance(t, RecordType)
    return T.StructType(
        [
            T.StructField(f.name, _spark_type(f.type, [v[i] for v in values]))
            for i, f in enumerate(t.fields)
        ]
    )


def _index_type(index: tuple[ScriptType, ...], keys: list[Any]) -> Any:
    from pyspark.sql import types as T

    if len(index) == 1:
        return _spark_type(index[0], keys)
    return T.StructType(
        [T.StructField(f"k{i}", _spark_type(t, [k[i] for k in keys])) for i, t in enumerate(index)]
    )


def _value(v: Any, t: ScriptType, spark_type: Any, struct: Any) -> Any:
    """A recorded Broker value as a Spark (``struct=tuple``) or Arrow (``struct=dict``) value."""
    from pyspark.sql import types as T

    if v is None:
        return None
    if isinstance(t, Basic):
        if t.name == "count":
            return decimal.Decimal(int(v)) if isinstance(spark_type, T.DecimalType) else int(v)
        if t.name == "time":
            ns = timestamp_ns(v)
            assert ns % 1000 == 0, "Spark timestamps hold microseconds"
            epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
            return epoch + dt.timedelta(microseconds=ns // 1000)
        if t.name == "interval":
            return dt.timedelta(microseconds=timespan_ns(v) // 1000)
        if t.name == "string":
            binary = isinstance(spark_type, T.BinaryType)
            return (v.encode() if isinstance(v, str) else v) if binary else v
        if t.name in ("addr", "subnet"):
            return str(v)
        if t.name == "port":
            assert isinstance(v, Port)
            return f"{v.number()}/{_PROTO[v.type()]}"
        if t.name == "pattern":
            match = _PATTERN.match(v[0])
            assert match is not None
            return match.group(1)
        return v
    if isinstance(t, EnumType):
        assert isinstance(v, Enum)
        return v.name
    if isinstance(t, VectorType):
        return [_value(x, t.element, spark_type.elementType, struct) for x in v]
    if isinstance(t, SetType):
        element = spark_type.elementType
        return [_index_value(x, t.index, element, struct) for x in sorted(v, key=repr)]
    if isinstance(t, TableType):
        items = [
            (
                _index_value(k, t.index, spark_type.keyType, struct),
                _value(x, t.value, spark_type.valueType, struct),
            )
            for k, x in v.items()
        ]
        return items if struct is dict else dict(items)
    assert isinstance(t, RecordType)
    values = [
        _value(x, f.type, sf.dataType, struct)
        for x, f, sf in zip(v, t.fields, spark_type.fields, strict=True)
    ]
    if struct is dict:
        return {f.name: x for f, x in zip(t.fields, values, strict=True)}
    return tuple(values)


def _index_value(k: Any, index: tuple[ScriptType, ...], spark_type: Any, struct: Any) -> Any:
    if len(index) == 1:
        return _value(k, index[0], spark_type, struct)
    values = [
        _value(x, t, sf.dataType, struct)
        for x, t, sf in zip(k, index, spark_type.fields, strict=True)
    ]
    return {f"k{i}": x for i, x in enumerate(values)} if struct is dict else tuple(values)


def as_columns(
    event: RecordedEvent, *, with_time: bool = False
) -> tuple[Any, tuple, pa.RecordBatch]:
    """The event as Spark columns: a ``topic`` column and one per argument, as a Spark schema,
    a Spark row, and the Arrow batch Spark hands a writer for it; ``with_time`` adds the
    network timestamp as a DOUBLE column ``ts`` (Zeek's times are doubles)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    sig = event.signature
    args = event.args
    fields = [T.StructField("topic", T.StringType())]
    row: list[Any] = [event.topic]
    arrow_row: dict[str, Any] = {"topic": event.topic}
    for p, a in zip(sig.params, args, strict=True):
        st = _spark_type(p.type, [a])
        fields.append(T.StructField(p.name, st))
        row.append(_value(a, p.type, st, tuple))
        arrow_row[p.name] = _value(a, p.type, st, dict)
    if with_time:
        seconds = zeek_seconds(timestamp_ns(event.network_time))
        fields.append(T.StructField("ts", T.DoubleType()))
        row.append(seconds)
        arrow_row["ts"] = seconds
    schema = T.StructType(fields)
    try:
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # PySpark 4.0 takes no time zone (and needs none)
        arrow_schema = to_arrow_schema(schema)
    return schema, tuple(row), pa.RecordBatch.from_pylist([arrow_row], schema=arrow_schema)


def zeek_seconds(ns: int) -> float:
    """A double of seconds that Zeek converts to exactly ``ns`` nanoseconds (its times are
    doubles; the wire holds their product with 10**9, truncated)."""
    seconds = ns / 1e9
    for _ in range(64):
        got = int(seconds * 1e9)
        if got == ns:
            return seconds
        seconds = math.nextafter(seconds, math.inf if got < ns else -math.inf)
    raise AssertionError(f"no double of seconds gives {ns} ns")
