"""The optional C accelerators of the bulk decoding of Zeek's log records.

``setup.py`` builds them where a C compiler is (they are ``optional`` there); every install
without one runs the numpy and Arrow code they stand in for, which the tests hold them
equal to (both ways, byte for byte):

- :data:`record_walk` walks the records (``columns.decode_block``), a record at a time;
- :data:`zeek_texts` joins JSON lines (``json_columns``) and spells texts and addresses as
  Arrow strings (``arrow_columns``).

Each is None where it was not built, or when the environment variable
``BROKER_SPARK_COMPILED`` is ``0``. Users of them read the attribute at each call, so
:func:`turned_off` switches them off for a test or a benchmark.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType

__all__ = ["built", "record_walk", "turned_off", "zeek_texts"]

record_walk: ModuleType | None
zeek_texts: ModuleType | None
try:
    from broker_spark.zeek import _record_walk as record_walk
except ImportError:  # pragma: no cover - an install without a C compiler
    record_walk = None
try:
    from broker_spark.zeek import _zeek_texts as zeek_texts
except ImportError:  # pragma: no cover - an install without a C compiler
    zeek_texts = None
if os.environ.get("BROKER_SPARK_COMPILED", "1") == "0":
    record_walk = zeek_texts = None


def built() -> bool:
    """Whether both accelerators are in use."""
    return record_walk is not None and zeek_texts is not None


@contextlib.contextmanager
def turned_off() -> Iterator[None]:
    """Both accelerators off inside the block (the pure fallback runs), as before after."""
    global record_walk, zeek_texts
    saved = record_walk, zeek_texts
    record_walk = zeek_texts = None
    try:
        yield
    finally:
        record_walk, zeek_texts = saved
