"""Encoding a binary value: by a compiled writer when one fits, else by the reference.

The encoder comes in two parts that must not know each other both ways:

- :mod:`~broker_spark.data.binary_encode` is the reference. It writes any
  value, defines the bytes and every error, and knows nothing of compiled
  writers.
- :mod:`~broker_spark.data.binary_encode_fast` compiles writers for the Zeek
  message layouts a stream repeats. It builds on the reference's helpers and
  memos, so it sits above it, and owns the writers by message name
  (:data:`~broker_spark.data.binary_encode_fast.WRITERS`).

Choosing between them needs both, so the choice sits above both, here: the
imports run one way (reference <- compiled <- this module), and the reference
stays readable and testable on its own. This :func:`encode` is the one
:mod:`~broker_spark.data.binary` exports.

Only :func:`encode` of a whole value tries a compiled writer: the values
nested in a message are written by whichever writer writes the message, and
``encode_into`` (a value appended to a larger buffer, as in store commands)
always takes the reference.
"""

from __future__ import annotations

from typing import Any

from broker_spark.data import binary_encode_fast
from broker_spark.data.binary_encode import reference_encode as _general
from broker_spark.data.binary_encode_fast import learn as _learn

__all__ = ["encode"]

# Bound by assignment, not ``import ... as``: CPython 3.11 compiles ``name.get(...)``
# on a name bound by an import as a module attribute, a bound method per call.
_WRITERS = binary_encode_fast.WRITERS


def encode(value: Any) -> bytes:
    """Encode one value (any Python value of Broker's mapping) to bytes.

    Raises ``ValueError`` (an :class:`~broker_spark.errors.EncodeError`) for
    values out of range and ``TypeError`` for values that have no Broker type,
    naming the value. A Zeek message whose name was seen before goes through
    the writer compiled for its layout; whatever that writer declines, the
    reference encodes (its bytes and errors are the result), and the compiled
    side learns from it.
    """
    key = None
    if type(value) is tuple and len(value) == 3:
        # A Zeek message: its name picks a compiled writer for its layout (binary_encode_fast).
        body = value[2]
        if type(body) is tuple and body and type(body[0]) is str:
            key = body[0]
            fast = _WRITERS.get(key)
            if fast is not None:
                try:
                    return fast(value)
                except Exception:
                    pass  # not the layout, or out of range: the reference decides
    data = _general(value)
    if key is not None:
        _learn(key, value)
    return data
