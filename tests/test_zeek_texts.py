"""The C accelerators (broker_spark.zeek.compiled): built where CI builds them, and bad input
raises a clear ValueError, never reads outside its buffers. What they make is held equal to
the numpy and Arrow code's by tests/test_zeek_columns.py, which runs every test both ways."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.zeek import compiled as accelerators
from broker_spark.zeek.text import addr_text

compiled = accelerators.zeek_texts
walker = accelerators.record_walk
needs_compiled = pytest.mark.skipif(
    not accelerators.built(), reason="the C accelerators were not built"
)


def _texts(arr: pa.Array) -> tuple:
    validity, offsets, data = arr.buffers()
    return (offsets, data, validity, arr.offset, len(arr), False)


def _lines(n: int, columns: list, objects: bool = True, nulls: bool = False) -> list[str]:
    offsets, data = compiled.join(n, columns, objects, nulls)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    ).to_pylist()


def test_the_accelerators_are_built_in_ci() -> None:
    """CI installs with a C compiler: the accelerators must be there, not silently skipped
    (setup.py marks them optional, so a broken build would only warn)."""
    if os.environ.get("CI") != "true":
        pytest.skip("only CI promises a C compiler")
    assert accelerators.built()


@needs_compiled
def test_every_kind_of_part_spells_its_rows() -> None:
    buf = np.frombuffer(bytes([10, 0, 0, 1]) + b"abc" + bytes(16), dtype=np.uint8)
    has = np.array([1, 1, 0], dtype=np.uint8)
    starts = np.array([0, 4, 0], dtype=np.int64)
    words = pa.array(["x", "y", "z"])
    columns = [
        (b'"i":', b"", b"", has, [(2, np.array([-12, 0, 5], dtype=np.int64))]),
        (b'"u":', b"", b"", has, [(3, np.array([2**64 - 1, 7, 5], dtype=np.uint64))]),
        (b'"a":', b'"', b'"', has, [(4, buf, starts, np.array([4, 3, 4], dtype=np.int64))]),
        (b'"t":', b'"', b'"', has, [(5, buf, starts, np.array([4, 3, 0], dtype=np.int64),
                                     _texts(words), np.array([2, -1, -1], dtype=np.int64))]),
        (b'"w":', b"", b"", np.array([0, 1, 0], dtype=np.uint8), [(0, _texts(words))]),
    ]  # fmt: skip
    assert _lines(3, columns) == [
        '{"i":-12,"u":18446744073709551615,"a":"10.0.0.1","t":"z"}',
        '{"i":0,"u":7,"a":"","t":"abc","w":y}',
        "{}",
    ]
    assert _lines(3, columns[4:], nulls=True) == ['{"w":null}', '{"w":y}', '{"w":null}']
    assert _lines(3, [(b"", b"[", b"]", has, [(1, _texts(words), np.array([1, -1, 0]))])],
                  objects=False, nulls=True) == ["[y]", "[]", "null"]  # fmt: skip


@needs_compiled
@pytest.mark.parametrize(
    "part, message",
    [
        ((1, None, np.array([0, 3], dtype=np.int64)), "outside its texts"),
        ((1, None, np.array([0, -1, 0], dtype=np.int64)[:1]), "an index holds 8 bytes, 16 needed"),
        ((5, "buf", np.array([0, 60], dtype=np.int64), np.array([1, 5], dtype=np.int64), None,
          np.array([-1, -1], dtype=np.int64)), "outside the record buffer"),
        ((4, "buf", np.array([0, 50], dtype=np.int64), np.array([4, 16], dtype=np.int64)),
         "outside the record buffer"),
        # a start and a length whose sum overflows: still outside, not a wrapped-around read
        ((5, "buf", np.array([0, 2**62], dtype=np.int64), np.array([1, 2**62], dtype=np.int64),
          None, np.array([-1, -1], dtype=np.int64)), "outside the record buffer"),
        ((0, None), "fewer texts than rows"),
        ((9, None), "no part of kind 9"),
    ],
)  # fmt: skip
def test_bad_parts_raise_and_read_nothing_outside(part, message) -> None:
    words = _texts(pa.array(["x", "y", "z"])) if part[0] != 0 else _texts(pa.array(["x"]))
    buf = np.zeros(64, dtype=np.uint8)
    part = tuple(words if p is None else buf if isinstance(p, str) else p for p in part)
    has = np.ones(2, dtype=np.uint8)
    with pytest.raises(ValueError, match=message):
        compiled.join(2, [(b'"k":', b"", b"", has, [part])], True, False)


@needs_compiled
def test_plain_flags_the_texts_that_need_escaping() -> None:
    buf = np.frombuffer(b'ok"q\\\x7f\x1fz', dtype=np.uint8)
    starts = np.arange(8, dtype=np.int64)
    lengths = np.ones(8, dtype=np.int64)
    has = np.array([1, 1, 1, 1, 1, 1, 1, 0], dtype=np.uint8)
    flags = compiled.plain(8, buf, starts, lengths, has)
    assert list(flags) == [1, 1, 0, 1, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="outside the record buffer"):
        compiled.plain(1, buf, np.array([7], dtype=np.int64), np.array([2], dtype=np.int64), has)


# words of an IPv6 address, zeros and 0xffff common: the runs and IPv4 tails Zeek spells apart
_words = st.lists(st.sampled_from([0, 0, 0, 1, 0xFFFF, 0x20, 0xABCD]), min_size=8, max_size=8)


@needs_compiled
@given(st.lists(st.one_of(_words.map(lambda w: b"".join(x.to_bytes(2, "big") for x in w)),
                          st.binary(min_size=16, max_size=16), st.binary(min_size=4, max_size=4)),
                min_size=1, max_size=20))  # fmt: skip
def test_addresses_are_spelt_as_zeek_writes_them(addresses) -> None:
    buf = np.frombuffer(b"".join(addresses), dtype=np.uint8)
    lengths = np.array([len(a) for a in addresses], dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    has = np.ones(len(addresses), dtype=np.uint8)
    got = _lines(len(addresses), [(b"", b"", b"", has, [(4, buf, starts, lengths)])], False)
    assert got == [addr_text(a) for a in addresses]


@needs_compiled
def test_texts_and_addresses_of_rows_become_arrow_strings() -> None:
    buf = np.frombuffer(b"ab\x01c" + bytes([192, 168, 0, 1]) + bytes(15) + b"\x01", np.uint8)
    starts = np.array([0, 2, 4, 8, 0], dtype=np.int64)
    lengths = np.array([2, 2, 4, 16, 9], dtype=np.int64)
    has = np.array([1, 1, 1, 1, 0], dtype=np.uint8)
    offsets, data, printable = compiled.texts(5, buf, starts, lengths, has)
    assert np.frombuffer(offsets, np.int64).tolist() == [0, 2, 4, 8, 24, 24]
    assert bytes(data)[:4] == b"ab\x01c"
    assert list(printable) == [1, 0, 0, 0, 1]
    offsets, data = compiled.addresses(5, buf, starts, lengths, has)
    got = pa.Array.from_buffers(pa.string(), 5, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    assert got.to_pylist() == ["", "", "192.168.0.1", "::1", ""]
    with pytest.raises(ValueError, match="outside the record buffer"):
        compiled.texts(1, buf, np.array([20], np.int64), np.array([9], np.int64), has)
    with pytest.raises(ValueError, match="outside the record buffer"):
        compiled.addresses(1, buf, np.array([20], np.int64), np.array([16], np.int64), has)
    with pytest.raises(ValueError, match="starts holds 8 bytes, 16 needed"):
        compiled.texts(2, buf, starts[:1], lengths, has)


@needs_compiled
def test_the_walk_takes_only_known_types_and_whole_buffers() -> None:
    starts, ends = np.zeros(1, np.int64), np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="VOID"):
        walker.walk(np.zeros(8, np.uint8), starts, ends, 4, True, [(0, 0)])
    with pytest.raises(ValueError, match="VOID"):
        walker.walk(np.zeros(8, np.uint8), starts, ends, 4, True, [(14, 0)])
    with pytest.raises(ValueError, match="differ in length"):
        walker.walk(np.zeros(8, np.uint8), starts, np.zeros(2, np.int64), 4, True, [(2, 0)])
    # a record reaching past the buffer's end does not fit, and nothing is read there
    ok, columns = walker.walk(np.zeros(8, np.uint8), starts, starts + 100, 4, True, [(2, 0)])
    assert list(ok) == [0] and list(columns[0][0]) == [0]
