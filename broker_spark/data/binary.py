"""Broker's native binary encoding of values (WIRE.md, "Values"): the public face.

The codec is split by job: :mod:`~broker_spark.data.binary_encode` writes values,
:mod:`~broker_spark.data.binary_decode` reads them under :class:`DecodeLimits`
(the two reference codecs), :mod:`~broker_spark.data.binary_encode_fast` and
:mod:`~broker_spark.data.binary_decode_fast` compile writers and readers for the
layouts a stream repeats, :mod:`~broker_spark.data.binary_write` and
:mod:`~broker_spark.data.binary_read` choose between compiled and reference for
:func:`encode` and :func:`decode`, and :mod:`~broker_spark.data.binary_fields`
handles the raw fields of store commands (optionals, variants, bare timespans).
Importers use this module.
"""

from __future__ import annotations

from broker_spark.data.binary_decode import DEFAULT_LIMITS, DecodeLimits, decode_from
from broker_spark.data.binary_encode import encode_into
from broker_spark.data.binary_fields import (
    encode_optional,
    encode_timespan_raw,
    encode_variant_header,
    read_optional,
    read_timespan_raw,
    read_variant_header,
)
from broker_spark.data.binary_read import decode
from broker_spark.data.binary_write import encode

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
