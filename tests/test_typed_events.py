"""Typed writes: Spark columns with a Zeek signature encode to the bytes a real Zeek sent.

The oracle is two recordings of a real Zeek (9.1.0-dev): every event of
``zeek-events-all-types`` (over Broker, with network-timestamp metadata)
and of ``zeek-zmq-events`` (the ZeroMQ backend's ``broker-bin-v1``
payloads, and the two events Python sent that Zeek accepted). Each event's
arguments are turned back into the Spark columns a user would have (BIGINT
counts, STRING addresses and ports, STRUCT records, MAP tables...: see
``typed_recordings``), handed to the writer's encoder as the Arrow batch
Spark makes of them, with the event's signature as the recorded Zeek script
declares it; the message must equal the recorded payload byte for byte.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from typed_recordings import RecordedEvent, as_columns, holdout_events, zmq_events

from broker_spark.columnar.record_batches import SchemaMappingError
from broker_spark.reader.options import BrokerOptionError, parse_writer_options
from broker_spark.spark.write.event_rows import SignatureRowEncoder
from broker_spark.spark.write.writers import BadRowError, make_encoder, publish_batches

pytestmark = pytest.mark.timeout(60)


def _options(signature: str, **extra: str) -> Any:
    return parse_writer_options({"peer": "127.0.0.1:9", "signature": signature, **extra})


def _encode(event: RecordedEvent, signature: str | None = None) -> list[tuple[str, bytes]]:
    with_time = event.network_time is not None
    _schema, _row, batch = as_columns(event, with_time=with_time)
    extra = {"networkTimestamp": "ts"} if with_time else {}
    options = _options(signature or str(event.signature), **extra)
    encoded = SignatureRowEncoder(batch.schema, options).encode(batch)
    assert encoded.bad == []
    return encoded.messages


@pytest.mark.parametrize(
    "event",
    holdout_events(),
    ids=[f"{i + 1}-{e.signature.name}" for i, e in enumerate(holdout_events())],
)
def test_every_recorded_broker_event_encodes_from_columns_to_its_bytes(
    event: RecordedEvent,
) -> None:
    assert _encode(event) == [(event.topic, event.payload)]


@pytest.mark.parametrize(
    "event", zmq_events(), ids=[f"{i + 1}-{e.signature.name}" for i, e in enumerate(zmq_events())]
)
def test_every_recorded_zeromq_event_encodes_from_columns_to_its_bytes(
    event: RecordedEvent,
) -> None:
    assert _encode(event) == [(event.topic, event.payload)]


def test_the_signature_as_the_script_writes_it() -> None:
    """The option takes the script's own text: module, export block, comments, global."""
    event = next(e for e in holdout_events() if e.signature.name == "Holdout::ev_multi")
    script = """
        module Holdout;
        export {
            type Color: enum { RED, GREEN, BLUE };
            type Inner: record { n: count; label: string &optional; };
            type Rec: record {
                i: int; s: string;
                maybe: addr &optional;     # left unset
                dflt: count &default=7;
                inner: Inner;
            };
        }
        global ev_multi: event(b: bool, i: int, c: count, d: double, t: time, iv: interval,
                               s: string, a: addr, sn: subnet, p: port, e: Color, r: Rec);
    """
    assert _encode(event, script) == [(event.topic, event.payload)]


def test_values_that_do_not_fit_are_bad_rows_with_the_reason() -> None:
    rows = pa.RecordBatch.from_pylist(
        [
            {"n": 1, "host": "10.0.0.1", "p": "80/tcp"},
            {"n": -1, "host": "10.0.0.2", "p": "80/tcp"},
            {"n": 2, "host": "10.0.0.300", "p": "80/tcp"},
            {"n": 3, "host": "10.0.0.3", "p": "80"},
            {"n": None, "host": "10.0.0.4", "p": "53/udp"},
        ]
    )
    options = _options("ev(n: count, host: addr, p: port)", topic="t")
    encoded = SignatureRowEncoder(rows.schema, options).encode(rows, first_row=10)
    assert len(encoded.messages) == 1
    reasons = {bad.position: bad.reason for bad in encoded.bad}
    assert sorted(reasons) == [11, 12, 13, 14]
    assert "argument n (count): -1 is negative" in reasons[11]
    assert "argument host (addr): '10.0.0.300' is not an addr" in reasons[12]
    assert "a port needs its protocol" not in reasons[13]
    assert "argument p (port): '80' is not a port" in reasons[13]
    assert reasons[14] == "argument n is null"


def test_columns_are_checked_against_the_signature_when_the_write_starts() -> None:
    schema = pa.schema([("n", pa.int64()), ("host", pa.string()), ("extra", pa.string())])
    with pytest.raises(SchemaMappingError, match=r"no column p \(the columns are n, host, extra\)"):
        make_encoder(schema, _options("ev(n: count, host: addr, p: port)", topic="t"))
    schema = pa.schema([("n", pa.int64()), ("host", pa.bool_()), ("extra", pa.string())])
    with pytest.raises(SchemaMappingError, match="a bool column cannot hold Zeek type addr"):
        make_encoder(schema, _options("ev(n: count, host: addr, extra: string)", topic="t"))
    schema = pa.schema([("n", pa.int64()), ("extra", pa.string())])
    with pytest.raises(SchemaMappingError, match="column extra is no argument of ev"):
        make_encoder(schema, _options("ev(n: count)", topic="t"))
    record = pa.schema([("r", pa.struct([("a", pa.int64()), ("zz", pa.string())]))])
    with pytest.raises(SchemaMappingError, match="struct field zz is not a field of"):
        make_encoder(
            record, _options("ev(r: record { a: count; b: string &optional; })", topic="t")
        )
    record = pa.schema([("r", pa.struct([("b", pa.string())]))])
    with pytest.raises(SchemaMappingError, match="has no field a, which the record needs"):
        make_encoder(
            record, _options("ev(r: record { a: count; b: string &optional; })", topic="t")
        )


def test_signature_option_errors_name_what_is_wrong() -> None:
    with pytest.raises(BrokerOptionError, match=r"option signature=.*unknown type 'Rec'"):
        _options("ev(r: Rec)")
    with pytest.raises(BrokerOptionError, match="expected ':' at column 6"):
        _options("ev(n count)")
    with pytest.raises(BrokerOptionError, match="contradicts log"):
        _options("ev(n: count)", log="Spark::LOG")
    with pytest.raises(BrokerOptionError, match="networkTimestamp.*applies with option signature"):
        parse_writer_options({"peer": "h:1", "topic": "t", "networkTimestamp": "ts"})
    with pytest.raises(BrokerOptionError, match="FAILFAST contradicts badRecordsTopic"):
        _options("ev(n: count)", badRecordsTopic="bad", mode="FAILFAST")


def test_bad_rows_follow_mode_and_bad_records_topic() -> None:
    """FAILFAST fails the task naming the row; PERMISSIVE counts and skips, or routes."""
    rows = pa.RecordBatch.from_pylist([{"n": 1}, {"n": -5}, {"n": 2}])
    failfast = _options("ev(n: count)", topic="t")
    with pytest.raises(BadRowError, match=r"row 1: argument n \(count\): -5 is negative"):
        publish_batches(iter([rows]), make_encoder(rows.schema, failfast), failfast)


def test_zeek_types_give_value_columns_their_types() -> None:
    """Without an event, ``zeekTypes`` types the columns of the published vector."""
    from broker_spark.data.binary import decode
    from broker_spark.data.types import Count, Port

    rows = pa.RecordBatch.from_pylist([{"n": 5, "host": "10.0.0.1", "p": "22/tcp", "x": 1.5}])
    options = parse_writer_options(
        {"peer": "h:1", "topic": "t", "zeekTypes": "n:count,host:addr,p:port"}
    )
    encoded = make_encoder(rows.schema, options).encode(rows)
    (value,) = [decode(p) for _t, p in encoded.messages]
    assert value == (Count(5), __import__("ipaddress").ip_address("10.0.0.1"), Port(22, 1), 1.5)
    assert type(value[0]) is Count
