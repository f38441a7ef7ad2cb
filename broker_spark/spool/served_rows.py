"""What a relay decodes for a reader of Zeek's logs: its ranges, as the reader's rows.

A task of a relay reader may send its converter (:mod:`~broker_spark.columnar.converter_spec`)
and be answered with Arrow IPC instead of records (docs/relay.md, docs/architecture.md,
"Where Zeek's log records are decoded"). One :class:`RangeRows` per such connection builds
the reader's converter for each FOLLOW, from the log schemas this relay's history holds at
the FOLLOW's first offset, when they are the ones the reader has (their digests match), and
decodes each group of records the connection sends. Decoding runs off the relay's event
loop, on a small pool of threads the server owns, so other readers are served meanwhile.
"""

from __future__ import annotations

from typing import Any

from broker_spark.columnar.converter_spec import (
    converter_from_spec,
    counters,
    rows_ipc,
    schemas_digest,
)
from broker_spark.columnar.log_converter import LogConverter

__all__ = ["RangeRows"]


class RangeRows:
    """The converter of one reader, rebuilt for each FOLLOW; ``relay_id`` fills its rows'
    ``relay`` column, as the reader's task would. Raises
    :class:`~broker_spark.columnar.converter_spec.ConverterSpecError` when the reader's
    converter cannot be built here."""

    def __init__(self, spec: dict[str, Any], relay_id: str, codec: str | None = None) -> None:
        self.spec = spec
        self.relay_id = relay_id
        self.codec = codec  # of the rows' IPC buffers (None: uncompressed)
        converter_from_spec(spec)  # a converter this relay cannot build fails at HELLO
        self._converter: LogConverter | None = None

    def begin(self, schemas: list, digest: str | None) -> bool:
        """Start a FOLLOW whose first offset has ``schemas`` in force here (this relay's
        history): whether its rows are served (the reader's ``digest`` of the schemas it
        has matches), else it is served records and decodes them itself."""
        self._converter = None
        if digest is None or digest != schemas_digest(schemas):
            return False
        converter = converter_from_spec(self.spec, schemas)
        converter.relay = self.relay_id
        self._converter = converter
        return True

    def decode(self, records: bytes, count: int) -> tuple[bytes, int, dict[str, int]]:
        """The rows of ``count`` records (a record stream, the FOLLOW's next ones) as an Arrow
        IPC stream, how many, and what the converter counted in them (misfits, undecodable
        payloads...). Raises what the converter raises (``mode=FAILFAST``)."""
        converter = self._converter
        if converter is None:
            raise RuntimeError("decode before a FOLLOW answered with rows")
        before = counters(converter)
        batch = converter.convert_packed(records, count)
        after = counters(converter)
        counted = {
            name: after[name] - before[name] for name in after if after[name] != before[name]
        }
        return rows_ipc(batch, self.codec), batch.num_rows, counted
