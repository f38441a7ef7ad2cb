"""How a log's rows are laid out in columns, whatever engine holds them: names and roles.

Zeek flattens a log's records into dotted column names (``id.orig_h``); by default
(``columns=nested``) each dotted prefix gets its struct back, ``columns=flat`` keeps
Zeek's names (:func:`nest_columns`). A row carries metadata columns beside the log's own
(:data:`LOG_METADATA`, named by :func:`metadata_names` so that a log's own column of that
name keeps it), and a reader's output schema says which it holds and where
(:class:`LogColumns`, worked out from a Spark schema by
:func:`broker_spark.spark.zeek_schema.log_columns`). No pyspark here: the executors'
converters (:mod:`~broker_spark.columnar.log_converter`) run on what this module holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "COLUMN_LAYOUTS",
    "GENERIC_LOG_FIELDS",
    "LOG_METADATA",
    "MESSAGE",
    "OPTIONAL_METADATA",
    "RECORDS",
    "RELAY_METADATA",
    "ColumnNode",
    "LogColumns",
    "metadata_names",
    "nest_columns",
]

COLUMN_LAYOUTS = ("nested", "flat")

#: The columns a log row carries besides the log's own, in this order (and, read from relays,
#: ``relay``: the id of the relay whose spool the row's offset is in). ``offset`` is the
#: message's (a Batch holds hundreds of records), ``record`` the record's index among the
#: records of its log in that message: ``(offset, record)`` (and ``relay``) say where a
#: record is, whatever reads it and however often.
LOG_METADATA = ("_path", "topic", "sender", "received_at", "offset", "record")
RELAY_METADATA = "relay"
#: Metadata a schema may ask for by name, beside :data:`LOG_METADATA`: ``relay``, and the
#: log's columns in force for the record (``log_schema_id``, a short id on every row;
#: ``log_schema``, the columns as JSON on the first row of each id in a partition): what
#: turns a stream of ``_path``/``log`` rows into a typed table per log whose columns
#: follow Zeek (:mod:`~broker_spark.spark.zeek_tables`). And ``records`` (``_path``/``log``
#: rows only): asking for it makes each row hold a run of records of one log in one
#: message, ``log`` their JSON lines joined by newlines (as in Zeek's own JSON log files),
#: ``record`` the first's index and ``records`` how many (:data:`RECORDS`). And ``message``
#: (beside ``records``): a row per log of a message, holding the message's Broker bytes
#: instead of JSON lines (:data:`MESSAGE`).
OPTIONAL_METADATA = (RELAY_METADATA, "log_schema_id", "log_schema", "records", "message")
#: The role of the column that makes ``_path``/``log`` rows hold runs of records.
RECORDS = "records"
#: The role of the (binary) column that makes ``_path``/``log``/``records`` rows hold a
#: message's records of one log as the message's own bytes, ``log`` null: what the tables
#: writer decodes straight into typed columns (:mod:`~broker_spark.columnar.log_messages`).
MESSAGE = "message"

#: The columns of a stream of several logs (or one whose schema is not known at start).
GENERIC_LOG_FIELDS = ("_path", "log", "topic", "sender", "received_at", "offset", "record")


@dataclass(frozen=True)
class ColumnNode:
    """A top-level output column: a log column (``leaf``) or a struct of dotted members."""

    name: str
    leaf: str | None  # the Zeek column name, for a plain column
    children: tuple[ColumnNode, ...] = ()


def nest_columns(names: Sequence[str], layout: str) -> list[ColumnNode]:
    """Zeek's column names as top-level nodes: flat, or nested by dotted prefixes."""
    if layout == "flat":
        return [ColumnNode(n, n) for n in names]
    return _group(list(names), "")


def _group(names: list[str], prefix: str) -> list[ColumnNode]:
    out: list[ColumnNode] = []
    members: dict[str, list[str]] = {}
    plain = {n[len(prefix) :] for n in names if "." not in n[len(prefix) :]}
    for full in names:
        rest = full[len(prefix) :]
        head, dot, _ = rest.partition(".")
        if not dot or head in plain or not head:  # no prefix, or it collides with a column
            out.append(ColumnNode(rest, full))
            continue
        if head not in members:
            members[head] = []
            out.append(ColumnNode(head, None))
        members[head].append(full)
    return [
        node
        if node.leaf is not None
        else ColumnNode(node.name, None, tuple(_group(members[node.name], f"{prefix}{node.name}.")))
        for node in out
    ]


def metadata_names(
    log_names: Sequence[str], optional: Sequence[str] = OPTIONAL_METADATA
) -> dict[str, str]:
    """The name each metadata column takes beside these top-level log columns: its own,
    or with ``_`` before it when the log has a column of that name (MQTT's ``topic``);
    ``optional`` are the optional ones to name too."""
    taken = set(log_names)
    out = {}
    for meta in (*LOG_METADATA, *optional):
        name = meta
        while name in taken:
            name = "_" + name
        taken.add(name)
        out[meta] = name
    return out


@dataclass(frozen=True)
class LogColumns:
    """How a query's columns are filled: metadata by role, log columns by Zeek name.

    ``leaves`` are the Zeek column names the output holds (``id.orig_h``), found
    from flat names or from struct members; ``roles`` maps metadata roles
    (``topic``...) to output column names; ``generic`` is a ``_path``/``log`` output.
    """

    roles: dict[str, str]
    leaves: tuple[str, ...]
    generic: bool
