"""A Zeek log reader's converter as plain data, so that a relay can decode for a task.

A task of a relay reader (``format=zeek-logs``) may hand the relay its converter instead
of decoding the records itself (docs/architecture.md, "Where Zeek's log records are
decoded"): the relay next to Zeek decodes each range once, in groups of thousands of
records (the cheapest way), and the task reads Arrow IPC. The relay must then build the
very converter the task would have: this module turns a
:class:`~broker_spark.columnar.log_converter.LogConverter` into a msgpack-able map
(:func:`converter_spec`) and back (:func:`converter_from_spec`), and names the Zeek log
schemas a range starts with by a digest (:func:`schemas_digest`), so that a relay
whose history differs from the reader's serves the records instead, and the task decodes
them as before. Rows decoded either way are equal, byte for byte.

Arrow IPC is the rows' form on the wire (:func:`rows_ipc`, :func:`rows_from_ipc`):
reading it back costs a task 0.03 µs a record where decoding costs 1.5 to 4.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from broker_spark.columnar.log_columns import MESSAGE, LogColumns
from broker_spark.columnar.log_converter import LogConverter
from broker_spark.columnar.log_metadata import schema_texts
from broker_spark.zeek.log_schema import LogSchema

__all__ = [
    "CONVERTER_SPEC_VERSION",
    "COUNTERS",
    "ConverterSpecError",
    "converter_from_spec",
    "converter_spec",
    "counters",
    "decodes",
    "rows_from_ipc",
    "rows_ipc",
    "schemas_digest",
]

#: The version of the map below: a relay builds converters of versions it knows only, and
#: serves the records to a reader that sends a newer one.
CONVERTER_SPEC_VERSION = 1

#: The counters a converter keeps, sent beside the rows a relay decoded.
COUNTERS = ("misfits", "undecodable", "unnamed", "others")

#: Codecs a relay may compress decoded rows with (Arrow IPC's own buffer compression).
ROWS_CODECS = ("lz4",)


class ConverterSpecError(ValueError):
    """A converter map that this version cannot build (malformed, or of a newer version)."""


def decodes(converter: Any) -> bool:
    """Whether a relay decoding for ``converter`` spares its task work: a converter of Zeek's
    logs, except one whose rows hold the messages' own bytes (the tables writer's input:
    nothing is decoded there, and the rows are the bytes the relay would send anyway)."""
    if not isinstance(converter, LogConverter):
        return False
    columns = converter.columns
    return not (columns.generic and MESSAGE in columns.roles)


def converter_spec(converter: LogConverter) -> dict[str, Any]:
    """``converter`` as plain data: the Arrow schema of its rows (IPC bytes), its columns, mode,
    logs, the known schema and the Zeek version whose standard logs it falls back on. The
    schemas it has learned are not part of it: a relay takes those of the range's start
    from its own history, checked by :func:`schemas_digest`."""
    columns = converter.columns
    return {
        "version": CONVERTER_SPEC_VERSION,
        "schema": converter.schema.serialize().to_pybytes(),
        "roles": dict(columns.roles),
        "leaves": list(columns.leaves),
        "generic": columns.generic,
        "mode": "FAILFAST" if converter.strict else "PERMISSIVE",
        "logs": list(converter.paths) if converter.paths is not None else None,
        "known": converter.known.to_json() if converter.known is not None else None,
        "zeek_version": converter.zeek_version,
    }


def converter_from_spec(
    spec: Any, schemas: Sequence[tuple[tuple[str, str, str], LogSchema]] = ()
) -> LogConverter:
    """The converter ``spec`` describes, starting from ``schemas`` (the log schemas in force
    at the range's first offset); :class:`ConverterSpecError` naming what is wrong."""
    if not isinstance(spec, dict):
        raise ConverterSpecError(f"a converter must be a map, got {type(spec).__name__}")
    version = spec.get("version")
    if version != CONVERTER_SPEC_VERSION:
        raise ConverterSpecError(
            f"converter version {version!r} (this relay builds {CONVERTER_SPEC_VERSION})"
        )
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(_field(spec, "schema", bytes)))
        roles = _field(spec, "roles", dict)
        leaves = _field(spec, "leaves", list)
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in roles.items()):
            raise ConverterSpecError("'roles' must map names to names")
        if not all(isinstance(leaf, str) for leaf in leaves):
            raise ConverterSpecError("'leaves' must be column names")
        columns = LogColumns(dict(roles), tuple(leaves), bool(_field(spec, "generic", bool)))
        mode = _field(spec, "mode", str)
        logs = spec.get("logs")
        if logs is not None and not (
            isinstance(logs, list) and all(isinstance(p, str) for p in logs)
        ):
            raise ConverterSpecError(f"'logs' must be log paths, got {logs!r}")
        known = spec.get("known")
        return LogConverter(
            schema,
            columns,
            mode,
            logs or None,
            LogSchema.from_json(known) if known is not None else None,
            schemas,
            zeek_version=_field(spec, "zeek_version", str),
        )
    except ConverterSpecError:
        raise
    except (pa.ArrowException, KeyError, TypeError, ValueError) as exc:
        raise ConverterSpecError(f"a converter that cannot be built: {exc}") from None


def _field(spec: dict[str, Any], name: str, kind: type) -> Any:
    value = spec.get(name)
    if not isinstance(value, kind):
        raise ConverterSpecError(f"converter field {name!r} must be a {kind.__name__}")
    return value


def schemas_digest(schemas: Sequence[tuple[tuple[str, str, str], LogSchema]]) -> str:
    """A digest of the log schemas a range starts with (their full JSON, enum names
    included): a relay decodes a task's range only with the very schemas the task has."""
    text = json.dumps(
        sorted([list(key), schema_texts(schema)[1]] for key, schema in schemas),
        separators=(",", ":"),
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def counters(converter: LogConverter) -> dict[str, int]:
    """What ``converter`` has counted so far (misfits, undecodable payloads...)."""
    return {name: int(getattr(converter, name)) for name in COUNTERS}


def rows_ipc(batch: pa.RecordBatch, codec: str | None = None) -> bytes:
    """``batch`` as an Arrow IPC stream (``codec``: its buffers compressed, lz4)."""
    options = pa.ipc.IpcWriteOptions(compression=codec)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def rows_from_ipc(data: bytes) -> list[pa.RecordBatch]:
    """The record batches of an Arrow IPC stream (:func:`rows_ipc`)."""
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return list(reader)
