"""Record streams of one layout read in place (``strided``) give what unpacking gives."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark import zeek
from broker_spark.columnar.record_batches import RecordConverter, unpack_columns
from broker_spark.columnar.strided import strided_records
from broker_spark.data.binary import encode
from broker_spark.data.msgpack_records import Record, pack_records
from broker_spark.data.types import Count
from broker_spark.errors import DecodeError, EncodeError
from broker_spark.spool import record_packing
from broker_spark.spool.segment import Segment
from broker_spark.spool.spool import DEFAULT_INDEX_INTERVAL, Spool
from tests.strategies import broker_values
from tests.test_spark_shapes import variants

NS = 1_700_000_000_123_456_789
SENDER = "f2b6e0a2-4b1c-4a49-9bd6-5d5c3f3b2a11"
TYPED = pa.schema([pa.field("topic", pa.string()), pa.field("n", pa.int64())])
METADATA = pa.schema(
    [pa.field("offset", pa.int64()), pa.field("received_at", pa.timestamp("us", tz="UTC"))]
)


def stream(payloads: list[bytes], first: int = 1_000_000, topics: list[str] | None = None) -> bytes:
    return pack_records(
        Record(topics[i] if topics else "zeek/t", p, SENDER, NS + i * 1000, first + i)
        for i, p in enumerate(payloads)
    )


def unpacked(conv: RecordConverter, packed: bytes, count: int) -> pa.RecordBatch:
    """The unpacking path's batch, the reference."""
    return conv._convert_columns(*unpack_columns(packed, count))


def same_both_ways(packed: bytes, count: int, **kw: Any) -> pa.RecordBatch:
    got_conv, ref_conv = RecordConverter(**kw), RecordConverter(**kw)
    got = got_conv.convert_packed(packed, count)
    want = unpacked(ref_conv, packed, count)
    assert got.schema == want.schema
    assert got.to_pydict() == want.to_pydict()
    assert (got_conv.misfits, got_conv.undecodable) == (ref_conv.misfits, ref_conv.undecodable)
    return got


def event(i: int, uid: str = "CHhAvVGS1DHFjwGM9") -> bytes:
    return encode(zeek.Event("conn_seen", Count(i), uid).as_data())


@pytest.mark.parametrize("fmt", ["default", "zeek"])
def test_events_of_one_layout_are_read_in_place(fmt: str) -> None:
    payloads = [event(10**9 + i * 7919) for i in range(300)]
    packed = stream(payloads)
    assert strided_records(packed, len(payloads)) is not None
    batch = same_both_ways(packed, len(payloads), fmt=fmt)
    assert batch.column("offset").to_pylist() == list(range(1_000_000, 1_000_300))
    assert batch.column("sender").to_pylist() == [SENDER] * 300
    assert batch.column("received_at")[1].value == (NS + 1000) // 1000


def test_typed_schema_and_varied_holes_and_topics() -> None:
    rnd = random.Random(7)
    payloads = [event(i, "".join(rnd.choice("abcXYZ") for _ in range(17))) for i in range(200)]
    topics = [rnd.choice(["zeek/a/x", "zeek/b/y"]) for _ in payloads]  # one length
    packed = stream(payloads, topics=topics)
    assert strided_records(packed, len(payloads)) is not None
    same_both_ways(packed, len(payloads))
    same_both_ways(packed, len(payloads), schema=TYPED)
    same_both_ways(packed, len(payloads), schema=METADATA)


def test_shapes_that_differ_within_one_length_fall_back() -> None:
    a = encode(zeek.Event("aaaa", Count(1)).as_data())
    b = encode((Count(2), "x" * (len(a) - 13)))  # same length, another layout
    assert len(a) == len(b)
    payloads = [a, b] * 40
    same_both_ways(stream(payloads), len(payloads), fmt="zeek")


def test_fields_the_reference_rejects_fall_back_and_are_counted() -> None:
    base = encode(("x", 1.5, Count(3)))
    payloads = variants(base, 64, random.Random(3))
    payloads[5] = payloads[5][:-9] + b"\x07" + payloads[5][-8:]  # not a count tag any more
    same_both_ways(stream(payloads), len(payloads))


def test_records_of_other_layouts_with_the_same_total_length_are_unpacked() -> None:
    # Two records whose topic and payload lengths trade bytes: equal strides, other layouts.
    packed = pack_records(
        [
            Record("ab", encode("xxxx"), SENDER, NS, 1_000_000),
            Record("abcd", encode("xx"), SENDER, NS, 1_000_001),
        ]
    )
    assert len(packed) % 2 == 0
    assert strided_records(packed, 2) is None
    same_both_ways(packed, 2)


def test_integers_of_other_widths_and_small_offsets_are_unpacked() -> None:
    payloads = [event(i) for i in range(200)]
    packed = stream(payloads, first=0)  # fixints, then one-byte offsets
    assert strided_records(packed, 200) is None
    same_both_ways(packed, 200)


def test_text_that_is_not_utf8_fails_as_before() -> None:
    good = stream([event(1), event(2)])
    at = good.index(b"zeek/t")
    bad = good[:at] + b"\xff" + good[at + 1 :]
    assert strided_records(bad, 2) is not None  # the layout is fine: the texts are not
    with pytest.raises(DecodeError):
        RecordConverter().convert_packed(bad, 2)


def test_a_count_that_does_not_fit_the_stream_fails_as_before() -> None:
    packed = stream([event(1), event(2), event(3)])
    with pytest.raises(DecodeError):
        RecordConverter().convert_packed(packed, 2)
    with pytest.raises(DecodeError):
        RecordConverter().convert_packed(packed + packed[:5], 3)


@settings(max_examples=40, deadline=None)
@given(value=broker_values(max_depth=3, max_size=4), seed=st.integers(0, 2**32))
def test_generated_values_read_in_place_equal_unpacked(value: Any, seed: int) -> None:
    try:
        payload = encode(value)
    except Exception:
        return
    payloads = variants(payload, 40, random.Random(seed), want_event=True)
    packed = stream(payloads)
    for fmt in ("default", "zeek"):
        same_both_ways(packed, len(payloads), fmt=fmt)


# --- the spool packs batches of one layout in one go -------------------------------------------


def spool_at(path: Any, base: int, **kw: Any) -> Spool:
    Segment.create(str(path), base, interval=DEFAULT_INDEX_INTERVAL, fsync=False).close()
    return Spool(path, **kw)


def test_a_batch_of_one_layout_spools_the_same_bytes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    found: list[Any] = []

    def spy(packed: bytes, count: int | None) -> Any:
        found.append(strided_records(packed, count))
        return found[-1]

    monkeypatch.setattr(record_packing, "strided_records", spy)
    batch = [("zeek/t", event(i), SENDER, NS + i) for i in range(1000)]
    with spool_at(tmp_path, 5_000_000, segment_bytes=40_000) as spool:  # rolls mid-batch
        assert spool.append_batch(batch) == 5_000_999
        assert found and found[0] is not None  # packed in one go
        want = pack_records(Record(*r, 5_000_000 + i) for i, r in enumerate(batch))
        assert spool.read_packed(5_000_000, 5_001_000) == want
        assert [r.offset for r in spool.read(5_000_500, 5_000_700)] == list(
            range(5_000_500, 5_000_700)
        )
    with Spool(tmp_path) as again:  # the index written matches the log
        assert again.read_packed(5_000_130, 5_000_300) == pack_records(
            Record(*batch[i], 5_000_000 + i) for i in range(130, 300)
        )


@pytest.mark.parametrize(
    "bad",
    [
        (b"zeek/t", event(1), SENDER, NS),  # the topic as bytes
        ("zeek/t", event(1), SENDER, True),  # a bool for a time
        ("zeek/t", "x" * len(event(1)), SENDER, NS),  # the payload as str
        ("zeek/t", event(1), SENDER),  # a field short
    ],
)
def test_a_bad_record_among_records_of_one_layout_changes_nothing(tmp_path: Any, bad: Any) -> None:
    batch: list[Any] = [("zeek/t", event(i), SENDER, NS) for i in range(300)]
    batch[150] = bad
    with spool_at(tmp_path, 5_000_000) as spool:
        with pytest.raises(EncodeError):
            spool.append_batch(batch)
        assert spool.end_offset() == 5_000_000


def test_payloads_that_are_not_bytes_but_pack_as_bin_are_kept(tmp_path: Any) -> None:
    batch = [("zeek/t", bytearray(event(i)), SENDER, NS) for i in range(40)]
    with spool_at(tmp_path, 5_000_000) as spool:
        spool.append_batch(batch)
        got = spool.read(5_000_000, 5_000_040)
    assert [r.payload for r in got] == [event(i) for i in range(40)]
