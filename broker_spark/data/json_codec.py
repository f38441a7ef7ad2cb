"""Zeek's WebSocket JSON format (Broker's "JSON API v1") for Broker values and messages: the public face.

Every value is an object ``{"@data-type": T, "data": D}``; a data message adds
``"type": "data-message"`` and ``"topic"`` in front. The same text is what Zeek's
WebSocket clients exchange and what Spark's ``data`` column holds. The codec is
split by direction: :mod:`~broker_spark.data.json_encode` writes it and
:mod:`~broker_spark.data.json_decode` reads it (each documents the choices it
makes where Broker's format is silent or lossy). Importers use this module.
"""

from __future__ import annotations

from broker_spark.data.json_decode import (
    MAX_TEXT_SIZE,
    ClientDataMessage,
    decode_client_message,
    decode_subscriptions,
    from_json_obj,
    loads_value,
)
from broker_spark.data.json_encode import (
    dumps_value,
    encode_ack,
    encode_data_message,
    encode_error,
    to_json_obj,
)

__all__ = [
    "MAX_TEXT_SIZE",
    "ClientDataMessage",
    "decode_client_message",
    "decode_subscriptions",
    "dumps_value",
    "encode_ack",
    "encode_data_message",
    "encode_error",
    "from_json_obj",
    "loads_value",
    "to_json_obj",
]
