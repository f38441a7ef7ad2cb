"""The flags of ``broker-spark store``; what runs is :mod:`broker_spark.cli.store`."""

from __future__ import annotations

from typing import Any

from broker_spark.cli.args import add_connect_arguments, add_format_argument, positive_float


def register(sub: Any) -> None:
    p = sub.add_parser(
        "store",
        help="read and write a data store (get, put, erase, keys)",
        description="Work with data store NAME through a clone attached over --peer: the "
        "clone reaches the store's master wherever it runs. Keys and values are JSON as "
        "for publish (use -k to take the key as a plain string).",
        epilog="examples:\n"
        "  broker-spark store put counters -k hits 42\n"
        "  broker-spark store get counters -k hits --format plain\n"
        "  broker-spark store keys counters",
    )
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    specs = (
        ("get", "print the value of KEY", ("KEY",)),
        ("put", "set KEY to VALUE", ("KEY", "VALUE")),
        ("erase", "remove KEY", ("KEY",)),
        ("keys", "print every key, one per line", ()),
    )
    for name, text, positionals in specs:
        a = actions.add_parser(name, help=text, description=f"{text[0].upper()}{text[1:]}.")
        a.add_argument("name", metavar="NAME", help="the store's name")
        for positional in positionals:
            # "store_key": the TLS flag --key already owns the name "key".
            a.add_argument(
                f"store_{positional.lower()}", metavar=positional, help=f"the {positional} (JSON)"
            )
        if positionals:
            a.add_argument(
                "-k", "--string-key", action="store_true", help="take KEY verbatim as a string"
            )
            a.add_argument("--infer", action="store_true", help="infer types of strings")
        if name == "put":
            a.add_argument(
                "--expiry", type=positive_float, metavar="SECONDS", help="expire after SECONDS"
            )
        if name in ("get", "keys"):
            add_format_argument(a)
        a.add_argument(
            "--timeout",
            type=positive_float,
            default=10.0,
            metavar="SECONDS",
            help="how long to wait for the store's master (default 10)",
        )
        add_connect_arguments(a)
        a.set_defaults(run="store:run")
