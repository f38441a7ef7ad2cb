"""Zeek's messages on top of Broker data: events, logs, identifier updates and batches.

``broker_spark.zeek`` is what Broker's Python ``broker.zeek`` offers (events),
plus Zeek's logs: the LogCreate and LogWrite messages, the record codec of
their ``serial_data`` (shared with Zeek's ZeroMQ log batches), log schemas,
and Zeek's own JSON log lines.
"""

from broker_spark.zeek.json_log import LineRenderer, render_line, render_value
from broker_spark.zeek.log_schema import (
    STANDARD_SCHEMAS_ZEEK_VERSION,
    LogField,
    LogSchema,
    SchemaRegistry,
    standard_paths,
    standard_schema,
    standard_schemas,
)
from broker_spark.zeek.logs import (
    DEFAULT_WRITER,
    Batch,
    IdentifierUpdate,
    LogCreate,
    LogWrite,
    WriterInfo,
    as_message,
    iter_log_messages,
)
from broker_spark.zeek.message import (
    PROTOCOL_VERSION,
    Event,
    Message,
    MessageType,
    MetadataType,
    SafeEvent,
    event_name_and_args,
    is_event,
    message_type,
)
from broker_spark.zeek.record import decode_values, encode_record
from broker_spark.zeek.types import TypeTag, ZeekInterval, ZeekSet, ZeekTime, ZeekType

__all__ = [
    "DEFAULT_WRITER",
    "PROTOCOL_VERSION",
    "STANDARD_SCHEMAS_ZEEK_VERSION",
    "Batch",
    "Event",
    "IdentifierUpdate",
    "LineRenderer",
    "LogCreate",
    "LogField",
    "LogSchema",
    "LogWrite",
    "Message",
    "MessageType",
    "MetadataType",
    "SafeEvent",
    "SchemaRegistry",
    "TypeTag",
    "WriterInfo",
    "ZeekInterval",
    "ZeekSet",
    "ZeekTime",
    "ZeekType",
    "as_message",
    "decode_values",
    "encode_record",
    "event_name_and_args",
    "is_event",
    "iter_log_messages",
    "message_type",
    "render_line",
    "render_value",
    "standard_paths",
    "standard_schema",
    "standard_schemas",
]
