"""``broker-spark store get|put|erase|keys NAME ...``: a data store on a running node.

The command peers with the node given by ``--peer`` and attaches a clone of
store NAME: the clone finds the store's master wherever it is in the network
(on that node or behind it), reads from its replica and sends writes to the
master. Reads wait for the clone's first snapshot; writes wait until the
master acknowledged them (``await_idle``), so a ``put`` is stored when the
command returns. Keys and values are JSON as for ``publish``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from broker_spark.cli.args import add_connect_arguments, add_format_argument, positive_float
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.values import parse_value, render_value

__all__ = ["register", "run"]

log = logging.getLogger("broker_spark.cli")


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
        a.set_defaults(run=run)


def _key_and_value(args: argparse.Namespace) -> tuple[Any, Any]:
    key = value = None
    if getattr(args, "store_key", None) is not None:
        if args.string_key:
            key = args.store_key
        else:
            try:
                key = parse_value(args.store_key, args.infer)
            except ValueError as exc:
                raise UsageError(f"KEY: {exc} (use -k to take it as a string)") from None
    if getattr(args, "store_value", None) is not None:
        try:
            value = parse_value(args.store_value, args.infer)
        except ValueError as exc:
            raise UsageError(f"VALUE: {exc}") from None
    return key, value


def run(args: argparse.Namespace) -> int:
    from broker_spark.cli.client_endpoint import Client

    key, value = _key_and_value(args)
    with Client(args) as client:
        client.connect()
        store = client.endpoint.attach_clone(args.name, max_get_delay=args.timeout)
        if args.action in ("put", "erase"):
            if args.action == "put":
                store.put(key, value, args.expiry)
            else:
                store.erase(key)
            if not store.await_idle(args.timeout):
                raise CliError(
                    f"no master of store {args.name!r} confirmed the {args.action} within "
                    f"{args.timeout:g} s (is there one behind {client.target}?)"
                )
            log.info("%s done on store %s", args.action, args.name)
            client.finish()
            return 0
        lines = _read(args, store, key)
    if lines:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    return 0


def _read(args: argparse.Namespace, store: Any, key: Any) -> list[str]:
    from broker_spark.errors import EC, StoreError

    try:
        if args.action == "keys":
            return sorted(render_value(k, args.format) for k in store.keys())
        found = store.get(key)
        if found is None and not store.exists(key):
            raise CliError(f"store {args.name!r} has no key {render_value(key, 'plain')}")
        return [render_value(found, args.format)]
    except StoreError as exc:
        if exc.code == EC.StaleData:
            raise CliError(
                f"no master of store {args.name!r} answered within {args.timeout:g} s"
            ) from None
        raise
