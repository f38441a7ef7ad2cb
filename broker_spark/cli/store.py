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

from broker_spark.cli.client_endpoint import Client
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.cli.values import parse_value, render_value
from broker_spark.errors import EC, StoreError

__all__ = ["run"]

log = logging.getLogger("broker_spark.cli")


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
