"""Every option of the ``broker`` data source: its name, its default and what it means.

This is the one place an option is described: :mod:`~broker_spark.reader.options.text`
takes the option names from here (an option missing here is unknown to the reader and
the writers), and ``docs/reference/spark-options.md`` is generated from here
(``make reference``; ``tests/test_reference.py`` fails when the two differ). A
meaning is Markdown; ``docs/NAME.md`` in it becomes a link in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READER", "SHARED", "WRITER", "Option"]


@dataclass(frozen=True)
class Option:
    """What the reference says of one option."""

    default: str
    meaning: str


#: Connecting: the options of readers and writers alike.
SHARED: dict[str, Option] = {
    "listen": Option(
        "none",
        "`host:port` where the reader's endpoint listens for Broker peers (a Zeek node peers "
        "here). Readers only. An address other hosts reach (`0.0.0.0`, `:9999`, a LAN "
        "address) needs mutual TLS (`ssl.*`) or `allowAnonymous`.",
    ),
    "peer": Option(
        "none",
        "`host:port[,host:port...]`: Broker endpoints to peer with (retrying). A reader needs "
        "one of `listen`, `peer`, `websocket`, `relay`, `zeromq.logs`, `zeromq.proxy`; a "
        "writer `peer`, `websocket` or `zeromq.proxy`.",
    ),
    "websocket": Option(
        "none",
        "`ws://host:port[/path]` or `wss://...`: a Zeek WebSocket API server (path "
        "`/v1/messages/json` by default) instead of native peering. A reader subscribes "
        "there to `topics`; a writer subscribes to nothing and publishes on any topic, paced "
        "so the server's 32-message queue is never overrun (docs/how-to/websocket-events.md).",
    ),
    "ssl.disable": Option("`false`", "plain TCP instead of TLS (Broker's `disable_ssl`)."),
    "ssl.certificate": Option(
        "none",
        "this side's certificate (PEM); with `ssl.key`, switches to mutual TLS. Every "
        "process that opens an endpoint reads it on its own machine (docs/deploy.md).",
    ),
    "ssl.key": Option("none", "this side's private key (PEM), for `ssl.certificate`."),
    "ssl.cafile": Option(
        "none", "the CA that verifies peers (this or `ssl.capath` is required with a certificate)."
    ),
    "ssl.capath": Option("none", "a directory of CA certificates, instead of `ssl.cafile`."),
    "ssl.passphrase": Option(
        "none",
        "the key's passphrase (never echoed in errors; on Databricks, "
        "`dbutils.secrets.get(...)` as the value).",
    ),
    "zeromq.logs": Option(
        "none",
        "`format=zeek-logs` on a Zeek cluster with the ZeroMQ backend (Zeek 8.1+): bind a "
        "PULL socket here (`tcp://0.0.0.0:5557`) and be the cluster's logger, which Zeek's "
        "nodes PUSH their log batches to; same columns, options, schemas and spool as logs "
        "over Broker. Alone: no `listen`, `peer`, `websocket` or `zeromq.proxy` with it. "
        "See docs/zeek.md.",
    ),
    "zeromq.proxy": Option(
        "none",
        "join a Zeek cluster on the ZeroMQ backend through its proxy (events, readers and "
        "writers): the proxy's host (Zeek's own ports 5555 and 5556), or "
        "`tcp://h:27760,tcp://h:27761` (zeekctl's ports).",
    ),
    "zeromq.connectXsubEndpoint": Option(
        "none",
        "with `zeromq.connectXpubEndpoint`, the same as `zeromq.proxy` as two options, named "
        "after Zeek's `connect_xsub_endpoint`: the proxy's XPUB, which our XSUB connects to.",
    ),
    "zeromq.connectXpubEndpoint": Option(
        "none",
        "named after Zeek's `connect_xpub_endpoint`: the proxy's XSUB, which our XPUB connects to.",
    ),
    "zeromq.curveServerPublicKey": Option(
        "none",
        "CURVE (Zeek 8.2+), a Z85 key as Zeek's `generate_keypair()` makes it, named after "
        "`curve_server_publickey`: the proxy's sockets are checked against it.",
    ),
    "zeromq.curveServerSecretKey": Option(
        "none",
        "named after `curve_server_secretkey`: the logger's PULL (`zeromq.logs`) is a CURVE "
        "server with it. Never echoed.",
    ),
    "zeromq.curveClientPublicKey": Option(
        "none",
        "the cluster's shared client key pair (`curve_client_publickey`): the only client "
        "the PULL lets in, and our XSUB/XPUB's public key.",
    ),
    "zeromq.curveClientSecretKey": Option(
        "none",
        "the client key pair's secret key (`curve_client_secretkey`), for joining the proxy. "
        "Never echoed. Without any `zeromq.curve*` option, Zeek's "
        "`ZEEK_CLUSTER_BACKEND_ZEROMQ_CURVE_*` environment variables apply (never both, as "
        "in Zeek).",
    ),
}

#: Reading: ``spark.readStream.format("broker")`` (``spark.read`` for stores).
READER: dict[str, Option] = {
    "allowAnonymous": Option(
        "`false`",
        "`true`: a `listen` or `zeromq.logs` that other hosts reach may take peers or "
        "senders that do not authenticate (a default Zeek peers with anonymous TLS); "
        "otherwise such a reader needs mutual TLS, or CURVE for `zeromq.logs`, and fails "
        "with an error saying so (docs/security.md).",
    ),
    "topics": Option(
        "required, or `store`",
        "comma-separated topic prefixes to subscribe to. Streams only. With "
        "`format=zeek-logs` the default is `zeek/logs/`.",
    ),
    "store": Option(
        "none",
        "read the data store of that name through a clone attached over `peer`: `spark.read` "
        "gives its contents as a table, `spark.readStream` every change (insert, update, "
        "erase, expire). Columns `key`, `value` (Zeek JSON), `op`, `expiry`, `ts`, `offset`.",
    ),
    "startingOffsets": Option(
        "`latest`",
        "`latest` (what arrives once the query's endpoint subscribes, including what a peer "
        "sends the moment it sees the subscription) or `earliest` (all that the spool still "
        "retains) for a query without a checkpoint.",
    ),
    "maxRecordsPerTrigger": Option(
        "unlimited", "the most records one micro-batch takes (for Zeek's logs: messages)."
    ),
    "maxRecordsPerPartition": Option("`100000`", "the most records one partition carries."),
    "minPartitions": Option(
        "none",
        "as Spark's Kafka source: a micro-batch of at least that many records is split into "
        "at least that many partitions. Without it, a batch is split into whole waves of "
        "tasks for the parallelism `register(spark)` recorded (the driver's cores if it did "
        "not), while each partition keeps 4,096 records or more (docs/deploy.md).",
    ),
    "failOnDataLoss": Option(
        "`true`",
        "fail when records a checkpoint expects were already deleted by retention; `false` "
        "skips them with a warning.",
    ),
    "spoolPath": Option(
        "a private temporary directory",
        "where received messages are kept durably (within the retention limits below). With "
        "it, a **receiver process** of its own owns the endpoint and the spool and outlives "
        "the query (a restart, a crash, a killed driver): nothing sent while no query runs "
        "is lost, and the query resumes from its checkpoint. See docs/relay.md.",
    ),
    "spool.segmentBytes": Option("`64m`", "size of one spool segment file."),
    "spool.retentionBytes": Option(
        "`1g`",
        "the most spool bytes kept: beyond it the oldest whole segments are dropped, read by "
        "the query or not (a query that falls that far behind meets `failOnDataLoss`); `-1`: "
        "no limit. Size it from a measured bytes-per-record figure (docs/performance.md).",
    ),
    "spool.retentionMs": Option(
        "7 days",
        "how long records are kept after they arrived, by whole segments (`-1`: no limit).",
    ),
    "spool.fsync": Option("`false`", "sync every appended batch to disk."),
    "format": Option(
        "`default`",
        "`default`: columns `topic`, `data` (Zeek JSON text), `sender`, `received_at`, "
        "`offset`; `zeek` adds `event` and `args`. A user schema (`.schema(...)`) maps a "
        "value's (or an event's) elements onto typed columns by position. `zeek-logs`: "
        "Zeek's log records as rows (docs/zeek.md); `topics` then defaults to `zeek/logs/`.",
    ),
    "mode": Option(
        "`PERMISSIVE`",
        "`PERMISSIVE`: a value that does not fit the schema gives nulls (counted); "
        "`FAILFAST`: the query fails naming the offset and column.",
    ),
    "partitionData": Option(
        "`auto`",
        "`auto`: inline until a task shows it runs in the driver's JVM (local mode, a "
        "single-node cluster), then the tasks read the reader's spool themselves (no records "
        "shipped); `inline`: a partition carries its records' bytes (works on any cluster; "
        "with `relay`, the driver fetches them); `spool`: a partition names a range of "
        "`spoolPath`, which every executor must be able to read.",
    ),
    "logs": Option(
        "all",
        "`format=zeek-logs`: the log paths to keep (`conn,dns`). Exactly one gives that "
        "log's typed columns; otherwise `_path`, `log` (Zeek's JSON line).",
    ),
    "columns": Option(
        "`nested`",
        "`format=zeek-logs`: `nested` gives each dotted Zeek prefix its struct (`id.orig_h` "
        "is `orig_h` in struct `id`); `flat` keeps Zeek's names (`` `id.orig_h` ``).",
    ),
    "schemaWait": Option(
        "`2`",
        "`format=zeek-logs` with one log: seconds `load()` peers (or listens) to learn the "
        "columns a Zeek declares for it (`0`: Zeek's standard columns, or the spool's from an "
        "earlier run).",
    ),
    "zeekVersion": Option(
        "`9.1`",
        "`format=zeek-logs`: whose standard logs' columns are used for a log that no "
        "LogCreate, ZeroMQ header or spool has described: `9.1` (the newest), `9.0`, or "
        "`8.0` (the long-term-support release; `8.0.10` reads as `8.0`).",
    ),
    "relay": Option(
        "none",
        "`host:port` of a relay (`broker-spark node --spool DIR --subscribe PREFIX...`), or "
        "several, comma-separated (`h1:9998,h2:9998`: one stream over a Zeek cluster's "
        "loggers), to replay from and follow, instead of `listen`/`peer`/`websocket` (TLS by "
        "the `ssl.*` options, as a peering, for every relay). Offsets are the relays' and "
        "kept per relay (keyed by its id, as Kafka's per partition), so a checkpoint "
        "survives restarts of the query and of the relays; a `relay` column names the relay "
        "each row came from; `maxRecordsPerTrigger` is shared among the relays; a relay that "
        "cannot be reached never stops the others. Tasks fetch their ranges from the relays "
        "(`partitionData=inline`: the driver does). See docs/relay.md.",
    ),
    "relayDecode": Option(
        "`true`",
        "with `relay` and `format=zeek-logs`: each task hands the relay its columns and is "
        "sent its rows decoded (Arrow), so Spark's cores decode nothing (a relay decodes for "
        "`relay_decoders` tasks at once; the others, and every task of an older relay, decode "
        "the records they fetch, to the same rows); `false`: the tasks always decode.",
    ),
    "deferredRows": Option(
        "none",
        "the schema (Spark's JSON, `StructType.json()`) of rows read by the task that "
        "consumes the stream: `load()` then gives a row per partition (`partition`, binary) "
        "and `broker_spark.spark.read_deferred` (a `mapInArrow` function) reads it there, so "
        "the rows cross Spark's JVM once instead of twice. What `write_zeek_tables` reads; "
        "the rows hold the partition's connection settings, as Spark's task does.",
    ),
    "receiver": Option(
        "`true`",
        "with `spoolPath`: receive in a receiver process (`false`: in the query's own "
        "driver-side process, which stops with it).",
    ),
    "receiver.idleTimeout": Option(
        "`1h`",
        "a receiver with no query attached stops after this long (`90s`, `30m`, "
        "`500ms`...); `broker-spark receiver stop SPOOLPATH` stops it at once.",
    ),
}

#: Writing: ``df.write.format("broker")``, ``df.writeStream.format("broker")``.
WRITER: dict[str, Option] = {
    "topic": Option(
        "a `topic` column",
        "the topic to publish to; wins over a `topic` column (as Spark's Kafka sink).",
    ),
    "store": Option(
        "none",
        "each row is a `put` of `key`, `value` (and optional `expiry` seconds) into the data "
        'store of that name, through a clone attached over `peer`; `mode("overwrite")` '
        "clears the store first.",
    ),
    "format": Option(
        "`default`",
        "the value of each row: a `data` column of Zeek JSON text if there is one; with "
        "`zeek`, a Zeek event named by an `event` column whose arguments are the other "
        "columns; otherwise all other columns as one vector.",
    ),
    "badRecordsTopic": Option(
        "none",
        "publish rows that cannot become messages, or that a Zeek's WebSocket API refused, "
        "there (the vector `(topic, data, reason)`) instead of failing the task.",
    ),
    "log": Option(
        "none",
        "a Zeek log stream id (`Spark::LOG`): the rows are published as that log's records "
        "(a LogCreate, then Batches of up to 400 LogWrites, as Zeek sends them), on "
        "`zeek/logs/<log>` unless `topic` says otherwise; `path` (default: the module, "
        "lower-cased) is the log's path.",
    ),
    "zeekTypes": Option(
        "none",
        "Zeek types of columns Spark has no type for, `column:type,...` in Zeek's spelling "
        "(`n:count,host:addr,p:port,net:subnet,d:interval,e:enum,tags:set[string]`): with "
        "`log`, of the log's columns; with `store`, of `key` and `value`; otherwise of the "
        "published vector's (or, with `format=zeek`, the event's) columns.",
    ),
    "signature": Option(
        "none",
        "a Zeek event as Zeek script declares it (`Intel::seen(indicator: string, host: "
        "addr, p: port, n: count)`; named records and enums declared before it): each row is "
        "that event, its arguments from the columns of the same names, each made the Zeek "
        "type declared (docs/how-to/websocket-events.md).",
    ),
    "networkTimestamp": Option(
        "none",
        "with `signature`: a column (TIMESTAMP, or Zeek's DOUBLE epoch seconds) that becomes "
        "the event's network-timestamp metadata, as `EventMetadata::add_network_timestamp` "
        "sends it.",
    ),
    "mode": Option(
        "`FAILFAST`; `PERMISSIVE` with `badRecordsTopic`",
        "`FAILFAST`: a bad row (a value that does not fit its type, a row Zeek refused) "
        "fails the task, naming the row and the reason; `PERMISSIVE`: bad rows are counted "
        "(in the task's log) and skipped, or sent to `badRecordsTopic`.",
    ),
}
