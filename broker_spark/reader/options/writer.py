"""The options of ``df.write``/``df.writeStream.format("broker")``, checked together.

Writers need ``peer`` or ``websocket`` (or ``zeromq.proxy``): a task publishes
through a peering it dials. ``listen`` is refused on writers (several tasks
would compete for one port on one machine, and a task cannot wait for someone
to peer with it). A store is reached through a clone, which needs a native
peering: ``store`` needs ``peer``. Rows become events (``signature``), a Zeek
log's records (``log``, its path from Spark's ``path`` or the stream id) or
plain data on ``topic``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker_spark.reader.options.connection import ConnectionOptions, parse_connection
from broker_spark.reader.options.text import (
    FORMATS,
    MODES,
    SHARED_OPTIONS,
    WRITER_OPTIONS,
    ZEEK_LOG_TOPIC,
    RawOptions,
)
from broker_spark.reader.options.values import BrokerOptionError, split_top_level
from broker_spark.zeek.script_types import SignatureError, parse_signature, parse_type
from broker_spark.zeek.types import ZeekType

if TYPE_CHECKING:
    from broker_spark.zeek.script_types import EventSignature

__all__ = ["WriterOptions", "default_log_path", "parse_writer_options"]


@dataclass(frozen=True)
class WriterOptions:
    """Options of ``df.write``/``df.writeStream.format("broker")``."""

    connection: ConnectionOptions = field(default_factory=ConnectionOptions)
    topic: str | None = None
    store: str | None = None
    format: str = "default"
    bad_records_topic: str | None = None
    log: str | None = None  # a Zeek log stream id (Spark::LOG): rows are published as its records
    log_path: str | None = None  # that log's path (option path; default from the stream id)
    zeek_types: tuple[tuple[str, str], ...] = ()  # column -> Zeek type (Zeek's spelling)
    signature: EventSignature | None = None  # rows are this event, its arguments by column name
    network_timestamp: str | None = None  # column whose time is the event's network timestamp
    mode: str = "FAILFAST"  # a bad row fails the task, or (PERMISSIVE) is counted and routed

    @property
    def permissive(self) -> bool:
        return self.mode == "PERMISSIVE"


_STREAM_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)+\Z")


def default_log_path(stream: str) -> str:
    """The path a log stream writes by default: the module, lower-cased (``Spark::LOG`` gives
    ``spark``; another id than ``LOG`` is appended: ``Spark::DNS_LOG`` gives ``spark_dns``)."""
    module, _, ident = stream.rpartition("::")
    path = module.replace("::", "_").lower()
    if ident != "LOG":
        path += "_" + ident.lower().removesuffix("_log")
    return path


def parse_writer_options(options: Mapping[str, Any]) -> WriterOptions:
    """Check and convert the options of a batch or streaming write."""
    log_path = None
    for key, value in options.items():  # Spark's own "path" names the log's path here
        if str(key).lower() == "path" and value is not None and str(value).strip():
            log_path = str(value).strip()
    raw = RawOptions(options, (*SHARED_OPTIONS, *WRITER_OPTIONS), "reading")
    conn = parse_connection(raw)
    topic = raw.nonempty("topic")
    store = raw.nonempty("store")
    fmt = raw.choice("format", FORMATS, "default")
    bad_records = raw.nonempty("badRecordsTopic")
    log_stream = raw.nonempty("log")
    zeek_types = _zeek_types(raw, logs=log_stream is not None)
    signature = _signature(raw)
    network_timestamp = raw.nonempty("networkTimestamp")
    mode = _writer_mode(raw, bad_records)
    if fmt == "zeek-logs":
        raise BrokerOptionError(
            "format", fmt, "is for reading; to write log records use option log"
        )
    if log_stream is not None:
        if not _STREAM_ID.match(log_stream):
            raise BrokerOptionError(
                "log", log_stream, "expected a Zeek log stream id such as Spark::LOG"
            )
        if store:
            raise BrokerOptionError("log", log_stream, f"contradicts store={store!r}")
        if fmt != "default":
            raise BrokerOptionError("format", fmt, "does not apply to log records (option log)")
        if log_path is None:
            log_path = default_log_path(log_stream)
        if topic is None:
            topic = ZEEK_LOG_TOPIC + log_stream
    if signature is not None:
        for other in ("log", "store", "zeekTypes"):
            if raw.get(other) is not None:
                raise BrokerOptionError(
                    "signature", raw.get("signature"), f"contradicts {other}={raw.get(other)!r}"
                )
    elif network_timestamp is not None:
        raise BrokerOptionError(
            "networkTimestamp", network_timestamp, "applies with option signature only"
        )
    if conn.listen is not None:
        raise BrokerOptionError(
            "listen", raw.get("listen"), "writers publish through peer or websocket, not listen"
        )
    if store and topic:
        raise BrokerOptionError(
            "store", store, f"contradicts topic={topic!r}: write one or the other"
        )
    if store and fmt != "default":
        raise BrokerOptionError("format", fmt, "applies to topics, not to store")
    if store and not conn.peers:
        raise BrokerOptionError(
            "peer", None, "is required with store: a clone attaches to the master through a peering"
        )
    if conn.zeromq.logs is not None:
        raise BrokerOptionError("zeromq.logs", conn.zeromq.logs, "is for reading Zeek's logs")
    if not (conn.peers or conn.websocket or conn.zeromq.xpub):
        raise BrokerOptionError(
            "peer/websocket",
            None,
            "one of them is required to publish (or zeromq.proxy, for a Zeek cluster on "
            "the ZeroMQ backend)",
        )
    return WriterOptions(
        connection=conn,
        topic=topic,
        store=store,
        format=fmt,
        bad_records_topic=bad_records,
        log=log_stream,
        log_path=log_path if log_stream is not None else None,
        zeek_types=zeek_types,
        signature=signature,
        network_timestamp=network_timestamp,
        mode=mode,
    )


def _writer_mode(raw: RawOptions, bad_records: str | None) -> str:
    """FAILFAST unless bad rows have somewhere to go (``badRecordsTopic``), as before modes."""
    default = "PERMISSIVE" if bad_records is not None else "FAILFAST"
    mode = raw.choice("mode", MODES, default)
    if mode == "FAILFAST" and bad_records is not None:
        raise BrokerOptionError(
            "mode", raw.get("mode"), f"FAILFAST contradicts badRecordsTopic={bad_records!r}"
        )
    return mode


def _signature(raw: RawOptions) -> EventSignature | None:
    text = raw.nonempty("signature")
    if text is None:
        return None
    try:
        return parse_signature(text)
    except SignatureError as exc:
        raise BrokerOptionError("signature", text, str(exc)) from None


def _zeek_types(raw: RawOptions, *, logs: bool) -> tuple[tuple[str, str], ...]:
    """``column:type,...`` in Zeek's spelling (``count``, ``addr``, ``set[addr, port]``,
    ``record { a: count; }``); a log's columns take log column types only."""
    value = raw.get("zeekTypes")
    if value is None:
        return ()
    out = []
    for item in split_top_level(value):
        if not item.strip():
            continue
        name, sep, spec = item.partition(":")
        if not sep or not name.strip():
            raise BrokerOptionError("zeekTypes", value, f"{item.strip()!r} is not column:type")
        try:
            ZeekType.parse(spec) if logs else parse_type(spec)
        except (ValueError, SignatureError) as exc:
            raise BrokerOptionError("zeekTypes", value, str(exc)) from None
        out.append((name.strip(), spec.strip()))
    return tuple(out)
