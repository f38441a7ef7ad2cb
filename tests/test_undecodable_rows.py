"""What a relay kept undecodable is a row of ``format=zeek-logs`` (generic), not a hole.

The reader's own converter, given a real Zeek's batches with kept undecodable
records among them (as a relay's spool holds them: another serializer's
message, a sender's bad frames), yields every good record as before and one
``broker-spark:undecodable`` row per kept message, whose ``log`` holds its
source, reason, sender and frames; ``mode=FAILFAST`` fails on it, naming the
offset; a typed query counts it.
"""

from __future__ import annotations

import base64
import json

import pytest
from zeek_recordings import ZMQ_LOGS, zmq_messages

from broker_spark.columnar.log_converter import UNDECODABLE_PATH, LogConverter
from broker_spark.columnar.record_batches import RecordConversionError
from broker_spark.spark.source import arrow_schema_of
from broker_spark.spark.zeek_schema import generic_log_schema, log_columns, zeek_log_schema
from broker_spark.zeek.log_batch import read_header
from broker_spark.zeek.log_schema import standard_schema
from broker_spark.zeek.undecodable import UNDECODABLE_TOPIC, pack_undecodable

MESSAGES = zmq_messages(ZMQ_LOGS)


def _spool_records(bad_at: dict[int, list[bytes]]) -> tuple[list, ...]:
    """The recording as spool record columns, with kept undecodable messages inserted."""
    rows = []
    for i, frames in enumerate(MESSAGES):
        if i in bad_at:
            kept = pack_undecodable("zeromq-logs", "serializer 'v2'", bad_at[i])
            rows.append((UNDECODABLE_TOPIC, kept, "newer-zeek"))
        rows.append(("zeek/logs/" + read_header(frames[3]).stream, frames[3], "zeek-1"))
    n = len(rows)
    return (
        [r[0] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        [1_700_000_000_000_000_000 + i for i in range(n)],
        list(range(n)),
    )


def _generic(mode: str = "PERMISSIVE") -> LogConverter:
    schema = generic_log_schema()
    return LogConverter(arrow_schema_of(schema), log_columns(schema, ()), mode)


def test_kept_messages_are_undecodable_rows_beside_every_good_record() -> None:
    renamed = [b"log-write", b"newer-zeek", b"zeek-bin-serializer-v2", MESSAGES[0][3]]
    cut = [b"log-write", b"broken", b"zeek-bin-serializer"]
    records = _spool_records({3: renamed, 10: cut})
    rows = _generic().convert(*records).to_pylist()
    plain = _generic().convert(*_spool_records({})).to_pylist()
    good = [r for r in rows if r["_path"] != UNDECODABLE_PATH]
    bad = [r for r in rows if r["_path"] == UNDECODABLE_PATH]
    assert [r["log"] for r in good] == [r["log"] for r in plain]  # nothing else changes
    assert [r["offset"] for r in bad] == [3, 11]  # where they lie in the spool
    first = json.loads(bad[0]["log"])
    assert first["source"] == "zeromq-logs" and first["reason"] == "serializer 'v2'"
    assert [base64.b64decode(f) for f in first["frames"]] == renamed
    assert bad[0]["topic"] == UNDECODABLE_TOPIC and bad[0]["sender"] == "newer-zeek"
    assert [base64.b64decode(f) for f in json.loads(bad[1]["log"])["frames"]] == cut


def test_failfast_fails_on_a_kept_message_and_a_typed_query_counts_it() -> None:
    records = _spool_records({5: [b"junk"]})
    with pytest.raises(RecordConversionError, match="offset 5"):
        _generic("FAILFAST").convert(*records)
    schema = zeek_log_schema("conn")
    conn = standard_schema("conn")
    typed = LogConverter(
        arrow_schema_of(schema), log_columns(schema, conn.names), paths=["conn"], known=conn
    )
    typed.convert(*records)
    assert typed.undecodable == 1


def test_rows_of_messages_bytes_show_kept_messages_too() -> None:
    """What ``write_zeek_tables`` reads (a row per log of each message, holding its bytes):
    a kept message is a row of its own, ``message`` null and ``log`` its JSON object, so the
    writer can put it in its quarantine; every message's row is as without it."""
    from broker_spark.spark.zeek_tables import table_input_schema

    schema = table_input_schema(runs=True, messages=True)

    def rows(bad_at: dict[int, list[bytes]]) -> list[dict]:
        converter = LogConverter(arrow_schema_of(schema), log_columns(schema, ()))
        return converter.convert(*_spool_records(bad_at)).to_pylist()

    got = rows({4: [b"log-write", b"x", b"zeek-bin-serializer-v2", b"?"]})
    plain = rows({})
    bad = [r for r in got if r["_path"] == UNDECODABLE_PATH]
    good = [r for r in got if r["_path"] != UNDECODABLE_PATH]
    assert len(bad) == 1 and bad[0]["message"] is None and bad[0]["records"] == 1
    assert bad[0]["offset"] == 4 and json.loads(bad[0]["log"])["reason"] == "serializer 'v2'"
    assert bad[0]["log_schema_id"] is None
    strip = ("offset", "received_at")  # the kept record moves the later ones by one
    assert [{k: v for k, v in r.items() if k not in strip} for r in good] == [
        {k: v for k, v in r.items() if k not in strip} for r in plain
    ]
    assert all(r["message"] is not None and r["log"] is None for r in good)
