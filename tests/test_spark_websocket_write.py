"""Writers over ``websocket`` to a Zeek-like server: paced, Zeek's errors handled, drops fail.

The server is ``zeek_ws_server`` (a fault-injecting test double of Zeek's
WebSocket API: a 32-message queue per client that drops a client it finds
full, Zeek's errors in Zeek's words, handlers declared as signatures). The
writer's task code (``publish_batches``) runs here directly for the error
paths; one write goes through a real SparkSession.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import spark_fixtures
from zeek_ws_server import ZeekLikeServer

from broker_spark.data.types import Count, Port
from broker_spark.errors import DeliveryError
from broker_spark.reader.options import parse_writer_options
from broker_spark.spark.write.writers import make_encoder, publish_batches
from broker_spark.websocket.verdicts import ServerRejectedError

spark = spark_fixtures.spark

pytestmark = pytest.mark.timeout(120)

SEEN = "Site::seen(n: count, host: addr, p: port)"


def _options(server: ZeekLikeServer, **extra: str) -> Any:
    return parse_writer_options({"websocket": server.url, "topic": "zeek/site", **extra})


def _rows(n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "n": list(range(n)),
            "host": [f"10.0.{i // 256 % 256}.{i % 256}" for i in range(n)],
            "p": ["80/tcp"] * n,
        }
    )


def _write(options: Any, batches: list[pa.RecordBatch]) -> Any:
    encoder = make_encoder(batches[0].schema, options)
    return publish_batches(iter(batches), encoder, options)


@pytest.mark.spark
def test_a_spark_write_of_typed_events_reaches_a_slow_zeek_whole(spark: Any) -> None:
    """2000 rows in two tasks, to a server that spends 0.2 ms per message: none dropped."""
    with ZeekLikeServer((SEEN,), work=0.0002) as server:
        df = spark.createDataFrame(
            [(i, f"10.0.{i // 256}.{i % 256}", "22/tcp") for i in range(2000)],
            "n BIGINT, host STRING, p STRING",
        ).repartition(2)
        (
            df.write.format("broker")
            .mode("append")
            .option("websocket", server.url)
            .option("topic", "zeek/site")
            .option("signature", SEEN)
            .save()
        )
        assert server.dropped == 0
        assert server.most_queued <= 32
        assert sorted(int(a[2][0]) for a in server.accepted) == list(range(2000))
        topic, name, args = server.accepted[0]
        assert (topic, name, type(args[0]), args[2]) == (
            "zeek/site",
            "Site::seen",
            Count,
            Port(22, 1),
        )


def test_zeek_s_rejection_fails_the_task_with_zeek_s_words() -> None:
    """Zeek declares ``host`` an addr; the write says string: Zeek refuses every event."""
    with ZeekLikeServer((SEEN,)) as server:
        options = _options(server, signature="Site::seen(n: count, host: string, p: port)")
        with pytest.raises(ServerRejectedError) as failure:
            _write(options, [_rows(20)])
        message = str(failure.value)
        assert f"{server.url}/v1/messages/json rejected a message of this task" in message
        assert "deserialization_failed: failed to create Zeek event" in message


def test_rejected_rows_are_counted_and_routed_under_permissive() -> None:
    """Rows Zeek refuses (an event it has no handler for) go to badRecordsTopic, exactly."""
    with ZeekLikeServer((SEEN,), accept_non_events=True) as server:
        options = _options(server, format="zeek", badRecordsTopic="bad/rows")
        names = ["Site::seen", "Site::nosuch", "Site::seen", "Site::nosuch", "Site::seen"]
        rows = pa.RecordBatch.from_pydict(
            {
                "event": names,
                "n": pa.array([1, 2, 3, 4, 5], pa.uint64()),
                "host": ["10.0.0.1"] * 5,
                "p": ["80/tcp"] * 5,
            }
        )
        options = parse_writer_options(
            {
                "websocket": server.url,
                "topic": "zeek/site",
                "format": "zeek",
                "badRecordsTopic": "bad/rows",
                "zeekTypes": "host:addr,p:port",
            }
        )
        result = _write(options, [rows])
        assert (result.published, result.bad_rows) == (5, 2)  # 3 events, 2 bad records
        assert [int(a[2][0]) for a in server.accepted] == [1, 3, 5]
        routed = [value for topic, value in server.other if topic == "bad/rows"]
        assert [r[0] for r in routed] == ["zeek/site", "zeek/site"]
        assert all("failed to create Zeek event" in r[2] for r in routed)
        assert '"Site::nosuch"' in routed[0][1]
        # Without badRecordsTopic, PERMISSIVE counts them and goes on.
        options = parse_writer_options(
            {
                "websocket": server.url,
                "topic": "zeek/site",
                "format": "zeek",
                "mode": "PERMISSIVE",
                "zeekTypes": "host:addr,p:port",
            }
        )
        result = _write(options, [rows])
        assert (result.published, result.bad_rows) == (3, 2)


def test_a_dropped_connection_fails_the_task() -> None:
    with ZeekLikeServer((SEEN,), drop_after=100) as server:
        options = _options(server, signature=SEEN)
        with pytest.raises(DeliveryError, match="ended before the ack|was lost"):
            _write(options, [_rows(300)] * 3)
        assert server.dropped == 1
