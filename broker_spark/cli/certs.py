"""``broker-spark certs --out DIR``: a CA and one signed certificate per node, for mutual TLS.

Writes ``ca.pem`` and ``ca.key`` (kept to sign more nodes later), and for each
node ``NAME.pem`` and ``NAME.key`` (keys readable by the owner only). Each
node certificate names the node, ``localhost``, ``127.0.0.1`` and ``::1``
(plus ``--host`` names) as subject alternative names; Broker itself checks
the chain, not the names, but other TLS tools look at them. Existing files are
never overwritten without ``--force``; when every file is there already the
command does nothing, so a container can run it at every start.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from broker_spark.certs import make_ca, make_node_cert, write_pem
from broker_spark.cli.errors import CliError, UsageError
from broker_spark.config import TLSSettings

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:

    if len(set(args.nodes)) != len(args.nodes):
        raise UsageError("--nodes lists a name twice")
    if args.days < 1:
        raise UsageError("--days must be 1 or more")
    out = Path(args.out)
    files = [out / "ca.pem", out / "ca.key"]
    for node in args.nodes:
        files += [out / f"{node}.pem", out / f"{node}.key"]
    existing = [f for f in files if f.exists()]
    if existing and not args.force:
        if len(existing) == len(files):
            print(f"certificates already in {out} (--force replaces them)")
            _print_usage(out, args.nodes)
            return 0
        raise CliError(
            f"{existing[0]} exists but other files are missing; use --force to make a new set"
        )
    out.mkdir(parents=True, exist_ok=True)
    if not os.access(out, os.W_OK):
        raise CliError(f"cannot write to {out}")
    ca = make_ca()
    written = [write_pem(out / "ca.pem", ca.cert_pem), write_pem(out / "ca.key", ca.key_pem)]
    hosts = tuple(dict.fromkeys(["localhost", "127.0.0.1", "::1", *args.host]))
    for node in args.nodes:
        pair = make_node_cert(ca, common_name=node, hosts=(node, *hosts), days=args.days)
        written.append(write_pem(out / f"{node}.pem", pair.cert_pem))
        written.append(write_pem(out / f"{node}.key", pair.key_pem))
    for path in written:
        print(f"wrote {path}")
    _print_usage(out, args.nodes)
    return 0


def _print_usage(out: Path, nodes: list[str]) -> None:
    """Per node: its flags, its node configuration's ``[tls]`` and its Spark options."""

    where = out.resolve()
    ca = where / "ca.pem"
    print(f"keep {where / 'ca.key'} here; give each node ca.pem and its own two files")
    for node in nodes:
        cert, key = where / f"{node}.pem", where / f"{node}.key"
        tls = TLSSettings(certificate=str(cert), key=str(key), cafile=str(ca))
        print(f"{node}:")
        print(f"  flags: --cert {cert} --key {key} --ca {ca}")
        print("  node config:")
        print(f'    [tls]\n    certificate = "{cert}"\n    key = "{key}"\n    cafile = "{ca}"')
        print(f"  Spark options: {json.dumps(tls.spark_options())}")
