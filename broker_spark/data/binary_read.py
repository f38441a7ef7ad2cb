"""Decoding a binary value: by a compiled reader when one fits, else by the reference.

The decoder comes in two parts that must not know each other both ways:

- :mod:`~broker_spark.data.binary_decode` is the reference. It reads any value
  under any :class:`~broker_spark.data.binary_decode.DecodeLimits`, defines
  every value and every error, and knows nothing of compiled readers.
- :mod:`~broker_spark.data.binary_decode_fast` compiles readers for the Zeek
  message layouts a stream repeats. It builds on the reference's helpers and
  caches, so it sits above it, and owns the readers by head
  (:data:`~broker_spark.data.binary_decode_fast.READERS`, and the last one used
  in :data:`~broker_spark.data.binary_decode_fast.LAST`).

Choosing between them needs both, so the choice sits above both, here: the
imports run one way (reference <- compiled <- this module), and the reference
stays readable and testable on its own. This :func:`decode` is the one
:mod:`~broker_spark.data.binary` exports.

Only :func:`decode` with the default limits tries a compiled reader: a value
nested in a message is read by whichever reader reads the message,
``decode_from`` (one value among others, as in store commands and log scans)
and custom limits always take the reference.
"""

from __future__ import annotations

from typing import Any

from broker_spark.data import binary_decode_fast
from broker_spark.data.binary_decode import DEFAULT_LIMITS, DecodeLimits
from broker_spark.data.binary_decode import reference_decode_bytes as _general
from broker_spark.data.binary_decode_fast import learn as _learn

__all__ = ["decode"]

# Bound by assignment, not ``import ... as``: CPython 3.11 compiles ``name.get(...)``
# on a name bound by an import as a module attribute, a bound method per call.
_READERS = binary_decode_fast.READERS
_LAST = binary_decode_fast.LAST


def decode(
    buf: bytes | bytearray | memoryview,
    limits: DecodeLimits = DEFAULT_LIMITS,
    *,
    offset: int = 0,
) -> Any:
    """Decode exactly one value that fills ``buf`` from ``offset`` to its end.

    Trailing bytes are an error. ``offset`` lets a caller decode the payload of
    an envelope body in place (``decode(msg.body, offset=msg.payload_offset)``).
    A Zeek message whose head was seen before goes through the reader compiled
    for its layout; whatever that reader declines, the reference decodes (and
    its values and errors are the result), and the compiled side learns from it.
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    key = fast = None
    if limits is DEFAULT_LIMITS and 0 <= offset < len(buf) - 24:
        # Perhaps a Zeek message ``(count, count, (name, ...))``: the bytes up to the
        # end of its name pick a reader compiled for its layout (binary_decode_fast,
        # which checks the rest of the head before it compiles one).
        last = _LAST[0]
        if buf.startswith(last[0], offset):  # the same kind as the last one (no key to hash)
            key, fast = last
        elif buf[offset + 22] == 5:  # a string where the name would be
            key = buf[offset : offset + 24 + buf[offset + 23]]
            fast = _READERS.get(key)
            if fast is not None:
                _LAST[0] = (key, fast)
        if fast is not None:
            try:
                return fast(buf, offset)
            except Exception:
                pass  # not the layout, or malformed: the reference decides
    value = _general(buf, limits, offset)
    if key is not None:
        _learn(key, buf, offset)
    return value
