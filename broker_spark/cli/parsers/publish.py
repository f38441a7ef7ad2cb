"""The flags of ``broker-spark publish``; what runs is :mod:`broker_spark.cli.publish`."""

from __future__ import annotations

from typing import Any

from broker_spark.cli.args import add_connect_arguments, positive_float


def register(sub: Any) -> None:
    p = sub.add_parser(
        "publish",
        help="publish values (JSON) from arguments or stdin lines",
        description="Publish each VALUE (or, without any, each line of stdin or --file) on "
        'TOPIC. Values are JSON: Zeek\'s WebSocket JSON ({"@data-type": "count", '
        '"data": 1}) or plain JSON (numbers, strings, arrays as vectors, objects as tables). '
        "Exits once the node has read every message.",
        epilog="examples:\n"
        "  broker-spark publish /demo/hello '\"hi\"' 42 '[1, 2.5, null]'\n"
        "  broker-spark publish /zeek/event --event ping '\"hello\"' 1\n"
        "  broker-spark publish zeek/intel --signature 'seen(host: addr, n: count)' "
        "'\"10.0.0.1\"' 3\n"
        "  seq 10000 | broker-spark publish /numbers --peer 10.0.0.1:9999",
    )
    p.add_argument("topic", metavar="TOPIC", help="topic to publish on, e.g. /zeek/events")
    p.add_argument("values", metavar="VALUE", nargs="*", help="JSON values (default: stdin)")
    p.add_argument(
        "--event",
        metavar="NAME",
        help="publish a Zeek event NAME whose arguments are the VALUEs "
        "(from stdin: one event per line, each line a JSON array of arguments)",
    )
    p.add_argument(
        "--signature",
        metavar="SIG",
        help="publish Zeek events of this signature, as Zeek script declares it "
        "('Intel::seen(indicator: string, host: addr, p: port, n: count)'); the VALUEs "
        "(or each stdin line: a JSON array, or an object by argument name) are its "
        "arguments, converted to the declared types",
    )
    p.add_argument(
        "--infer",
        action="store_true",
        help="read strings that look like ports (80/tcp), subnets, addresses, timestamps "
        "or timespans (1500ms) as those types",
    )
    p.add_argument(
        "--string", action="store_true", help="take each VALUE or line verbatim as a string"
    )
    p.add_argument("--file", metavar="FILE", help="read values from FILE instead of stdin")
    p.add_argument(
        "--skip-invalid",
        action="store_true",
        help="warn about and skip input lines that are not valid (default: stop there)",
    )
    p.add_argument(
        "--progress", action="store_true", help="show progress on stderr even when not a terminal"
    )
    gen = p.add_argument_group(
        "generating Zeek data",
        "Instead of reading values: publish the demo's synthetic Zeek connections at a steady "
        "rate, until --seconds or interrupted. conn: conn.log records as Zeek sends them (a "
        "LogCreate, then Batches of LogWrites; publish them on zeek/logs/Conn::LOG); "
        "conn-events: Zeek events conn(ts, uid, orig_h, resp_h, resp_p, service, orig_bytes, "
        "resp_bytes).",
    )
    gen.add_argument(
        "--generate", choices=("conn", "conn-events"), help="what to make (conn: log records)"
    )
    gen.add_argument(
        "--rate",
        type=positive_float,
        default=1000.0,
        help="records or events per second (default 1000)",
    )
    gen.add_argument(
        "--seconds", type=positive_float, help="stop after SECONDS (default: when interrupted)"
    )
    p.add_argument(
        "--await-subscriber",
        type=positive_float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS for a subscriber of TOPIC to be known; fail without one",
    )
    add_connect_arguments(p, websocket=True)
    p.set_defaults(run="publish:run")
