"""The options of the ``broker`` data source, by who reads them.

* :mod:`.catalog`: every option's name, default and meaning (the reference's source);
* :mod:`.text`: the option mapping Spark hands over (names, lists, durations);
* :mod:`.values`: sizes, addresses and :class:`BrokerOptionError`;
* :mod:`.connection`: what readers and writers share (peers, TLS, the WebSocket API);
* :mod:`.zeromq`: joining a Zeek cluster on the ZeroMQ backend;
* :mod:`.reader`: the readers' options (:func:`parse_reader_options`);
* :mod:`.writer`: the writers' options (:func:`parse_writer_options`).

Every name callers use is importable from the package itself
(``from broker_spark.reader.options import parse_reader_options``).
"""

from broker_spark.reader.options.connection import ConnectionOptions
from broker_spark.reader.options.reader import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    DEFAULT_RETENTION_BYTES,
    DEFAULT_RETENTION_MS,
    DEFAULT_SEGMENT_BYTES,
    ReaderOptions,
    SpoolOptions,
    parse_reader_options,
)
from broker_spark.reader.options.values import (
    DEFAULT_WEBSOCKET_PATH,
    BrokerOptionError,
    HostPort,
    WebSocketTarget,
    parse_host_port,
)
from broker_spark.reader.options.writer import WriterOptions, default_log_path, parse_writer_options
from broker_spark.reader.options.zeromq import ZeroMQOptions, parse_zeromq_proxy

__all__ = [
    "DEFAULT_MAX_RECORDS_PER_PARTITION",
    "DEFAULT_RETENTION_BYTES",
    "DEFAULT_RETENTION_MS",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_WEBSOCKET_PATH",
    "BrokerOptionError",
    "ConnectionOptions",
    "HostPort",
    "ReaderOptions",
    "SpoolOptions",
    "WebSocketTarget",
    "WriterOptions",
    "ZeroMQOptions",
    "default_log_path",
    "parse_host_port",
    "parse_reader_options",
    "parse_writer_options",
    "parse_zeromq_proxy",
]
