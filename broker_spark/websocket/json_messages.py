"""The JSON texts of Zeek's WebSocket API (v1) beyond plain values: acks, errors, replies.

The value codec lives in :mod:`broker_spark.data.json_codec`; this module adds
what the two WebSocket roles need around it:

- the server's error message, with the ``input #N contained ...`` context
  Broker writes. Broker sends ``{"type","code","context"}``; Zeek 8's own
  server sends ``{"type","code","message"}``. We send both ``context`` and
  ``message`` (same text), so clients written for either one read it;
- the data message a client receives for a node message, encoded from the
  binary payload once and cached briefly, because the same message usually
  goes to every subscribed client;
- the client side's reading of what a server sends (ack, error or data).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from broker_spark.data.binary import decode
from broker_spark.data.json_codec import encode_data_message, encode_error, from_json_obj
from broker_spark.errors import EC, BrokerError, DecodeError

__all__ = [
    "JSON_PATH",
    "ServerReply",
    "error_text",
    "input_error",
    "parse_server_reply",
    "render_data_message",
    "subscriptions_text",
]

#: The one path of the v1 JSON API.
JSON_PATH = "/v1/messages/json"

#: Encoded data messages kept for reuse (per process; cleared when full), and
#: the largest payload worth keeping.
_CACHE_SIZE = 4096
_CACHE_MAX_PAYLOAD = 16384
_cache: dict[tuple[str, bytes], str] = {}


def error_text(code: EC | str, context: str) -> str:
    """An error message for a client: ``{"type":"error","code":...,"context":...,"message":...}``."""
    text = encode_error(code, context)
    return text[:-1] + ',"message":' + json.dumps(str(context)) + "}"


def input_error(n: int, exc: BrokerError | str) -> str:
    """The ``deserialization_failed`` error for a client's ``n``-th input, in Broker's words."""
    detail = str(exc)
    if detail.startswith("malformed JSON: "):
        context = f"input #{n} contained malformed JSON -> {detail[16:]}"
    else:
        if detail.startswith("invalid data: "):
            detail = detail[14:]
        context = f"input #{n} contained invalid data -> {detail}"
    return error_text(EC.DeserializationFailed, context)


def render_data_message(topic: str, payload: bytes) -> str:
    """The data message for a node message's topic and binary payload.

    Raises BrokerError (DecodeError, EncodeError) when the payload cannot be
    rendered as JSON (e.g. a peer sent bytes that are not Broker data).
    """
    key = (topic, payload)
    text = _cache.get(key)
    if text is None:
        text = encode_data_message(topic, decode(payload))
        if len(payload) > _CACHE_MAX_PAYLOAD:
            return text
        if len(_cache) >= _CACHE_SIZE:
            _cache.clear()
        _cache[key] = text
    return text


def subscriptions_text(topics: list[str]) -> str:
    """The client's first message: its topic prefixes as a JSON array."""
    return json.dumps(list(topics))


class ServerReply(NamedTuple):
    """One message a WebSocket server sent to us (the client role).

    ``kind`` is ``"ack"`` (``a`` = endpoint, ``b`` = version), ``"error"``
    (``a`` = code, ``b`` = context) or ``"data"`` (``a`` = topic, ``b`` = value).
    """

    kind: str
    a: Any
    b: Any


def _loads(text: str | bytes) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"malformed JSON: {exc}") from None


def parse_server_reply(text: str | bytes) -> ServerReply:
    """Classify and decode a server's message; DecodeError for anything else."""
    obj = _loads(text)
    if type(obj) is not dict:
        raise DecodeError(f"expected a JSON object from the server, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "data-message":
        topic = obj.get("topic")
        if type(topic) is not str or not topic:
            raise DecodeError("data message without a topic")
        return ServerReply("data", topic, from_json_obj(obj))
    if kind == "ack":
        endpoint = obj.get("endpoint")
        if type(endpoint) is not str or not endpoint:
            raise DecodeError("ack without an endpoint id")
        return ServerReply("ack", endpoint, str(obj.get("version", "")))
    if kind == "error":
        context = obj.get("context", obj.get("message", ""))
        return ServerReply("error", str(obj.get("code", "unspecified")), str(context))
    raise DecodeError(f"unknown message type {kind!r} from the server")
