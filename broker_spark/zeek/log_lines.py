"""Received messages to Zeek's JSON log lines: what ``broker-spark logs`` prints.

:class:`LogLines` takes messages as they arrive (payload bytes and sender),
finds their records (:class:`~broker_spark.zeek.log_scan.LogScanner`), keeps
the schemas their LogCreates declare, and returns every record as the line
Zeek's JSON writer would write, with its log path, in arrival order. Many
records of a log are rendered column by column, a few one at a time (below
:data:`BULK_MIN` the bulk path's fixed cost is larger than the work).

A record whose LogCreate was not seen is named by Zeek's standard schema of
its log when its values have that layout, else its keys are its positions
(``_1``, ``_2``...); both count as :attr:`LogLines.unnamed`. A record that
does not decode is left out and counted in :attr:`LogLines.undecodable`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from broker_spark.errors import DecodeError, EncodeError
from broker_spark.zeek.columns import _PAD, Block, decode_block
from broker_spark.zeek.json_columns import render_block
from broker_spark.zeek.json_log import LineRenderer
from broker_spark.zeek.log_scan import LogGroup, LogScanner
from broker_spark.zeek.log_schema import LogSchema, SchemaRegistry, standard_schema
from broker_spark.zeek.record import decode_values, encode_record

__all__ = ["BULK_MIN", "LogLines", "group_lines"]

#: Records of one log below which lines are rendered one at a time.
BULK_MIN = 32
#: Records rendered together in bulk, about: each chunk costs a fixed amount of Python
#: work per column, while a chunk's bytes should stay in the caches. Measured with
#: ``bench/zeek_logs.py``'s conn records: 10,000 a chunk renders 10% faster than 4,096,
#: 16,384 is already slower when a call holds many chunks.
CHUNK = 10_000


def group_lines(
    buf: np.ndarray,
    data: bytes,
    group: LogGroup,
    schema: LogSchema | None,
    timestamps: str = "epoch",
    include_unset: bool = False,
) -> tuple[pa.Array, list[int], int]:
    """The lines of a group's records as a string array (null for one that does not
    decode), the positions of those that did not decode, and how many were named by
    position (no schema fits them)."""
    chunks: list[pa.Array] = []
    broken: list[int] = []
    positional = 0
    renderers: dict[int, LineRenderer] = {}
    count = len(group.starts)
    names = list(schema.names) if schema is not None else []
    size = -(-count // max(1, round(count / CHUNK)))  # equal chunks: no small remainder
    for lo in range(0, count, size or 1):
        hi = min(lo + size, count)
        ok = np.zeros(hi - lo, dtype=bool)
        lines: pa.Array | None = None
        if schema is not None and hi - lo >= BULK_MIN:
            block = Block(
                buf,
                np.asarray(group.starts[lo:hi], dtype=np.int64),
                np.asarray(group.ends[lo:hi], dtype=np.int64),
                group.fields,
            )
            decoded = decode_block(block, schema.types)
            ok = decoded.ok
            if ok.any():
                lines = render_block(decoded, names, timestamps, include_unset)
        bad = np.flatnonzero(~ok)
        texts: list[str | None] = []
        for i in bad:
            raw = group.record(data, lo + int(i))
            try:
                values = decode_values(raw)
            except DecodeError:
                broken.append(lo + int(i))
                texts.append(None)
                continue
            if schema is not None and len(values) == len(names) and _fits(values, schema):
                key = 0
                use = names
                types = schema.types
            else:
                positional += 1
                key = len(values) + 1
                use = [f"_{k + 1}" for k in range(len(values))]
                types = None
            renderer = renderers.get(key)
            if renderer is None:
                renderer = renderers[key] = LineRenderer(use, timestamps, include_unset, types)
            texts.append(renderer.render(values))
        if lines is None:
            chunks.append(pa.array(texts, pa.string()))
        elif len(bad):
            mask = np.zeros(hi - lo, dtype=bool)
            mask[bad] = True
            chunks.append(pc.replace_with_mask(lines, pa.array(mask), pa.array(texts, pa.string())))
        else:
            chunks.append(lines)
    if not chunks:
        return pa.array([], pa.string()), broken, positional
    joined = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    return joined, broken, positional


def _fits(values: list, schema: LogSchema) -> bool:
    """Whether decoded values could be records of ``schema`` (by their Python types)."""

    try:
        encode_record(values, schema.fields)
    except EncodeError:
        return False
    return True


class LogLines:
    """Zeek JSON log lines of received messages; keeps schemas across calls.

    ``paths`` keeps those logs only; ``timestamps`` and ``include_unset`` are
    Zeek's ``LogAscii::json_timestamps`` and ``json_include_unset_fields``.
    """

    def __init__(
        self,
        paths: Collection[str] | None = None,
        timestamps: str = "epoch",
        include_unset: bool = False,
        registry: SchemaRegistry | None = None,
    ) -> None:
        self.scanner = LogScanner(registry or SchemaRegistry(), paths)
        self.timestamps = timestamps
        self.include_unset = include_unset
        self.unnamed = 0
        self.undecodable = 0

    @property
    def registry(self) -> SchemaRegistry:
        return self.scanner.registry

    def _parts(
        self, messages: Sequence[tuple[bytes, str]]
    ) -> list[tuple[np.ndarray, str, pa.Array]]:
        """Each log's lines (with the arrival order of its records) in ``messages``."""
        data = b"".join(payload for payload, _ in messages) + bytes(_PAD)  # room past the end
        scanner = self.scanner
        before = scanner.undecodable
        ends = np.cumsum([len(payload) for payload, _ in messages]).tolist()
        starts = [0, *ends[:-1]]
        scanner.scan_all(data, starts, ends, [sender for _, sender in messages])
        self.undecodable += scanner.undecodable - before
        groups = scanner.take_groups()
        if not groups:
            return []
        buf = np.frombuffer(data, dtype=np.uint8)
        parts: list[tuple[np.ndarray, str, pa.Array]] = []
        for group in groups:
            schema = group.schema
            if schema is None:
                self.unnamed += len(group.starts)
                schema = standard_schema(group.path)
            texts, broken, _positional = group_lines(
                buf, data, group, schema, self.timestamps, self.include_unset
            )
            self.undecodable += len(broken)
            parts.append((group.order(), group.path, texts))
        return parts

    def lines(self, messages: Sequence[tuple[bytes, str]]) -> list[tuple[str, str]]:
        """``(path, line)`` of every record in ``messages`` (``(payload, sender)`` pairs),
        in the order they arrived."""
        parts = self._parts(messages)
        if not parts:  # none of the logs asked for (or no log records at all) in this run
            return []
        if len(parts) == 1:  # one log: already in arrival order
            _order, path, texts = parts[0]
            return [(path, text) for text in texts.to_pylist() if text is not None]
        order = np.argsort(np.concatenate([p[0] for p in parts]), kind="stable")
        paths = [p[1] for p in parts for _ in range(len(p[2]))]
        texts = [t for p in parts for t in p[2].to_pylist()]
        return [(paths[i], texts[i]) for i in order.tolist() if texts[i] is not None]
