"""Compressed sealed segments: the same bytes for every range, on real files, whatever a
crash or another process's view of the folder catches."""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker_spark.spool import compactor as compactor_module
from broker_spark.spool import compressed_segment
from broker_spark.spool.relay_client import SpoolClient
from broker_spark.spool.spool import DataLossError, Spool, SpoolCorruptError, SpoolError

T0 = 1_700_000_000_000_000_000


def rec(i: int, size: int) -> tuple[str, bytes, str, int]:
    """A record that compresses as logs do: repeated field names, varying values."""
    body = b"".join(b'{"ts":%d,"uid":"C%07d","proto":"tcp"}' % (i, i * 7) for _ in range(size))
    return (f"zeek/logs/{('conn', 'dns', 'http')[i % 3]}", body, "zeek", T0 + i * 1_000_000)


def fill(spool: Spool, n: int, size: int = 4, step: int = 37) -> None:
    for lo in range(0, n, step):
        spool.append_batch([rec(i, size) for i in range(lo, min(n, lo + step))])


def compact_all(spool: Spool) -> int:
    done = 0
    while spool.compact_next():
        done += 1
    return done


def names(path: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.endswith(suffix))


def test_sealed_segments_are_compressed_and_read_the_same(tmp_path: Path) -> None:
    plain_dir, packed_dir = tmp_path / "plain", tmp_path / "packed"
    with (
        Spool(plain_dir, segment_bytes=64 * 1024) as plain,
        Spool(packed_dir, segment_bytes=64 * 1024, compression="zstd") as packed,
    ):
        fill(plain, 3000)
        fill(packed, 3000)
        compact_all(packed)
        sealed = len(names(packed_dir, ".zlog"))
        assert sealed >= 3
        # the active segment stays as written; every sealed one is compressed, its .log gone
        assert len(names(packed_dir, ".log")) == 1
        assert len(names(packed_dir, ".index")) == 1
        assert packed.total_bytes < plain.total_bytes / 4
        assert packed.read_packed(0, 3000) == plain.read_packed(0, 3000)
        rng = random.Random(7)
        for _ in range(200):
            lo = rng.randrange(0, 3000)
            hi = rng.randrange(lo, 3001)
            assert packed.read_packed(lo, hi) == plain.read_packed(lo, hi)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=300),
    segment_kb=st.integers(2, 40),
    interval=st.integers(1, 64),
    codec=st.sampled_from(["zstd", "lz4"]),
    cuts=st.lists(st.tuples(st.integers(0, 299), st.integers(0, 299)), max_size=20),
)
def test_any_layout_reads_back_byte_for_byte(
    tmp_path_factory: pytest.TempPathFactory,
    sizes: list[int],
    segment_kb: int,
    interval: int,
    codec: str,
    cuts: list[tuple[int, int]],
) -> None:
    where = tmp_path_factory.mktemp("layout")
    records = [rec(i, size) for i, size in enumerate(sizes)]
    opts = {"segment_bytes": segment_kb * 1024, "index_interval": interval}
    with (
        Spool(where / "a", **opts) as plain,
        Spool(where / "b", compression=codec, **opts) as packed,
    ):
        for spool in (plain, packed):
            for lo in range(0, len(records), 17):
                spool.append_batch(records[lo : lo + 17])
        compact_all(packed)
        n = len(records)
        assert packed.read_packed(0, n) == plain.read_packed(0, n)
        for a, b in cuts:
            lo, hi = sorted((a % (n + 1), b % (n + 1)))
            assert packed.read_packed(lo, hi) == plain.read_packed(lo, hi)


def test_the_spools_thread_compresses_on_its_own_and_leaves_with_the_spool(tmp_path: Path) -> None:
    spool = Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd")
    try:
        fill(spool, 2000)
        deadline = time.monotonic() + 20
        while len(names(tmp_path, ".log")) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(names(tmp_path, ".log")) == 1
        assert len(names(tmp_path, ".zlog")) >= 3
        assert [r.offset for r in spool.read(0, 2000)] == list(range(2000))
    finally:
        spool.close()
    assert not [
        t for t in threading.enumerate() if t.name.startswith("broker-spark-spool-compress")
    ]


def test_no_thread_without_compression(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=32 * 1024) as spool:
        fill(spool, 2000)
        assert spool.compact_next() is False
        assert names(tmp_path, ".zlog") == []
        assert not [
            t for t in threading.enumerate() if t.name.startswith("broker-spark-spool-compress")
        ]


def test_reopened_with_or_without_compression_reads_the_same(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="lz4") as spool:
        fill(spool, 1500)
        compact_all(spool)
        before = spool.read_packed(0, 1500)
    with Spool(tmp_path, segment_bytes=32 * 1024) as spool:  # compression turned off
        assert spool.read_packed(0, 1500) == before
        fill_more = [rec(i, 4) for i in range(1500, 1600)]
        assert spool.append_batch(fill_more) == 1599
        assert [r.offset for r in spool.read(1490, 1600)] == list(range(1490, 1600))
    with Spool(tmp_path, readonly=True) as view:
        assert view.read_packed(0, 1500) == before


def test_what_a_crash_during_compression_leaves_is_resolved_on_open(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=32 * 1024) as spool:
        fill(spool, 1500)
        before = spool.read_packed(0, 1500)
    bases = [int(n[:20]) for n in names(tmp_path, ".log")]
    # a crash after the rename, before the .log was removed: both are there (the .zlog
    # taken from a spool of the same records)
    with Spool(tmp_path / "copy", segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 1500)
        compact_all(spool)
    first = compressed_segment.compressed_path(str(tmp_path / "copy"), bases[0])
    os.replace(first, compressed_segment.compressed_path(str(tmp_path), bases[0]))
    # and a crash while writing the next: a torn .zlog.tmp
    torn = compressed_segment.compressed_path(str(tmp_path), bases[1]) + ".tmp"
    Path(torn).write_bytes(b"BSPZ\x01\x01 torn")
    with Spool(tmp_path, segment_bytes=32 * 1024) as spool:
        assert not os.path.exists(torn)
        assert not os.path.exists(tmp_path / f"{bases[0]:020d}.log")
        assert not os.path.exists(tmp_path / f"{bases[0]:020d}.index")
        assert os.path.exists(tmp_path / f"{bases[1]:020d}.log")
        assert spool.read_packed(0, 1500) == before


def test_a_view_opened_before_compression_reads_after_it(tmp_path: Path) -> None:
    """An executor's read-only view lists ``.log`` files the writer then compresses."""
    with Spool(tmp_path, segment_bytes=32 * 1024) as writer:
        fill(writer, 1500)
    ranges = [(0, 1500), (3, 700), (699, 701), (1200, 1500)]
    with Spool(tmp_path, readonly=True) as view:
        before = {r: view.read_packed(*r) for r in ranges}
        with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as writer:
            compact_all(writer)
            assert len(names(tmp_path, ".zlog")) >= 2
            assert {r: view.read_packed(*r) for r in ranges} == before
        view.refresh()
        assert {r: view.read_packed(*r) for r in ranges} == before


def test_retention_drops_compressed_segments_by_age_and_size(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 1500)
        compact_all(spool)
        sealed = names(tmp_path, ".zlog")
        assert len(sealed) >= 2
        spool.retention_ms = 1  # every sealed segment's last record is older than that
        start = spool.enforce_retention(T0 // 1_000_000 + 10_000)
        assert names(tmp_path, ".zlog") == []
        assert start > 0 and spool.start_offset() == start
        with pytest.raises(DataLossError):
            spool.read_packed(0, 1)
    with Spool(tmp_path / "size", segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 3000)
        compact_all(spool)
        total = spool.total_bytes
        assert total == sum(
            p.stat().st_size for p in (tmp_path / "size").iterdir() if p.suffix in (".zlog", ".log")
        )
        spool.retention_bytes = total - 1
        oldest = names(tmp_path / "size", ".zlog")[0]
        assert spool.enforce_retention(T0 // 1_000_000) > 0
        assert spool.total_bytes <= total - 1
        assert oldest not in names(tmp_path / "size", ".zlog")


def test_a_damaged_block_is_an_error_naming_the_file_and_the_rest_reads(tmp_path: Path) -> None:
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 1500)
        compact_all(spool)
        first = tmp_path / names(tmp_path, ".zlog")[0]
        data = bytearray(first.read_bytes())
        data[60] ^= 0xFF  # inside the first block's compressed bytes
        first.write_bytes(bytes(data))
    with Spool(tmp_path, segment_bytes=32 * 1024) as spool:
        with pytest.raises(SpoolCorruptError, match=first.name):
            spool.read_packed(0, 5)
        last = spool.end_offset()
        assert [r.offset for r in spool.read(last - 50, last)] == list(range(last - 50, last))


def test_a_damaged_header_costs_that_files_offsets_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay that runs for years starts on a spool with a damaged file: its reads fail
    naming it, every other range reads, retention drops it in its turn."""
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 1500)
        compact_all(spool)
        before = spool.read_packed(700, 1500)
    first = tmp_path / names(tmp_path, ".zlog")[0]
    first.write_bytes(b"something else entirely" + first.read_bytes()[24:])
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as spool:
        assert "not a compressed segment" in caplog.text
        with pytest.raises(SpoolCorruptError, match=first.name):
            spool.read_packed(0, 5)
        assert spool.read_packed(700, 1500) == before
        spool.retention_ms = 1
        spool.enforce_retention(T0 // 1_000_000 + 10_000)
        assert not first.exists()


def test_a_failed_compression_leaves_the_segment_as_written_and_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault injected (a full disk while writing the compressed file): said so."""
    import broker_spark.spool.spool as spool_module

    real = spool_module.write_compressed
    calls = []

    def full_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(spool_module, "write_compressed", full_once)
    monkeypatch.setattr(compactor_module, "RETRY_AFTER", 0.05)
    with Spool(tmp_path, segment_bytes=32 * 1024, compression="zstd") as spool:
        fill(spool, 1500)
        deadline = time.monotonic() + 20
        while len(names(tmp_path, ".log")) > 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls) >= 2
        assert len(names(tmp_path, ".log")) == 1
        assert [r.offset for r in spool.read(0, 1500)] == list(range(1500))


def test_an_unknown_compression_is_refused() -> None:
    with pytest.raises(SpoolError, match="compression must be one of zstd, lz4, none"):
        Spool("/nonexistent/never-made", compression="gzip")


def test_a_relay_node_compresses_by_default_and_serves_every_batch(spawn, tmp_path: Path) -> None:
    """A real relay process fed Zeek's recorded ZeroMQ batches by a PUSH socket: its filled
    files become ``.zlog`` by default, a reader over the relay gets every batch as sent,
    and the status says the compression."""
    from spark_fixtures import wait_for
    from test_relay_sources import push_socket, spooled, start_relay, status
    from zeek_recordings import ZMQ_LOGS, zmq_messages

    messages = zmq_messages(ZMQ_LOGS)
    count = 40 * len(messages)  # about 4 MiB as written
    node, said = start_relay(
        spawn, tmp_path / "spool", "--spool-segment", "256k", "--relay-compression", "always"
    )
    ctx, push = push_socket(said["zeromq"])
    try:
        for i in range(count):
            push.send_multipart(messages[i % len(messages)])
        got = spooled(said["relay"], count)  # decompressed by the reader's session
        host, port = said["relay"].rsplit(":", 1)
        with SpoolClient.tcp(host, int(port), None) as client:
            assert client.hello("follow", "test")["compression"] == "zstd"
        assert [p for _t, p, _s in got] == [messages[i % len(messages)][3] for i in range(count)]
        st = wait_for(
            lambda: (s := status(said["relay"]))["bytes"] < 4 * 256 * 1024 and s, 30, "compressed"
        )
        assert st["compression"] == "zstd"
        # A stop leaves a file the thread has not reached as written: wait until it has
        # reached every file filled, so what the stop leaves does not depend on its pace.
        wait_for(
            lambda: sum(p.suffix == ".log" for p in (tmp_path / "spool").iterdir()) == 1,
            60,
            "every filled file compressed",
        )
    finally:
        push.close(0)
        ctx.term()
    assert node.signal() == 0
    files = sorted(p.name for p in (tmp_path / "spool").iterdir())
    assert sum(n.endswith(".zlog") for n in files) >= 10
    assert sum(n.endswith(".log") for n in files) == 1  # the one being written
    with Spool(tmp_path / "spool", readonly=True) as view:  # reopened: every batch, in order
        assert [r.payload for r in view.read(0, count)] == [p for _t, p, _s in got]


def test_the_settings_name_the_same_compressions() -> None:
    from broker_spark.node import settings as node_config
    from broker_spark.spool import relay_server

    assert node_config.COMPRESSIONS == compressed_segment.COMPRESSIONS
    assert node_config.RELAY_COMPRESSIONS == relay_server.WIRE_COMPRESSION


@pytest.mark.parametrize("mode", ["always", "auto"])
def test_a_relay_compresses_on_the_wire_for_readers_elsewhere(tmp_path: Path, mode: str) -> None:
    """A real relay over TCP: ``always`` compresses for a reader that offers zstd (as ``auto``
    does for one on another machine), ``auto`` sends records as written over loopback; the
    reader gets the same records either way, and an older reader (no offer) too."""
    from test_spark_relay import Relay

    relay = Relay(tmp_path / "relay")
    try:
        relay.node.server.wire_compression = mode
        relay.publish(0, 2000)
        expected = relay.node.service.spool.read_packed(0, 2000)
        with SpoolClient.tcp("127.0.0.1", relay.port, None) as client:
            welcome = client.hello("follow", "test")
            assert welcome.get("compression") == ("zstd" if mode == "always" else None)
            assert client.fetch(0, 2000, 30) == expected
        with SpoolClient.tcp("127.0.0.1", relay.port, None) as older:
            assert "compression" not in older.hello("follow", "old", compression=[])
            assert older.fetch(0, 2000, 30) == expected
        assert relay.node.server.served_bytes == 2 * len(expected)
    finally:
        relay.close()


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        (("127.0.0.1", 5000), True),
        (("::1", 5000, 0, 0), True),
        (("::ffff:127.0.0.1", 5000, 0, 0), True),  # a dual-stack listener's IPv4 peer
        (("10.1.2.3", 5000), False),
        (("::ffff:10.1.2.3", 5000, 0, 0), False),
        (("fe80::1%eth0", 5000, 0, 2), False),
        ("/run/relay.sock", True),  # not an IP connection
    ],
)
def test_auto_compresses_for_peers_that_are_not_on_loopback(peer: object, loopback: bool) -> None:
    from broker_spark.spool import relay_server

    class Peer:  # what asyncio's writer says of its peer: the address only
        def get_extra_info(self, name: str) -> object:
            return peer if name == "peername" else None

    assert relay_server._on_loopback(Peer()) is loopback
