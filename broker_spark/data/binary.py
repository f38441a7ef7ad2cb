"""Broker's native binary encoding of values (WIRE.md, "Values"): the public face.

The codec is split by job: :mod:`~broker_spark.data.binary_encode` writes values,
:mod:`~broker_spark.data.binary_decode` reads them under :class:`DecodeLimits`,
and :mod:`~broker_spark.data.binary_fields` handles the raw fields of store
commands (optionals, variants, bare timespans). Importers use this module.
"""

from __future__ import annotations

from broker_spark.data.binary_decode import DEFAULT_LIMITS, DecodeLimits, decode, decode_from
from broker_spark.data.binary_encode import encode, encode_into
from broker_spark.data.binary_fields import (
    encode_optional,
    encode_timespan_raw,
    encode_variant_header,
    read_optional,
    read_timespan_raw,
    read_variant_header,
)

__all__ = [
    "DEFAULT_LIMITS",
    "DecodeLimits",
    "decode",
    "decode_from",
    "encode",
    "encode_into",
    "encode_optional",
    "encode_timespan_raw",
    "encode_variant_header",
    "read_optional",
    "read_timespan_raw",
    "read_variant_header",
]
