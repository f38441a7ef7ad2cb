"""``broker-spark demo``: what ``make demo`` runs; the demo itself is :mod:`broker_spark.demo`.

The demo owns its flags (``broker_spark.demo.add_arguments``: ``--seconds``,
``--rate``, ``--quiet``, ``--master``, ``--peer``, ``--topic``, ``--listen``,
``--advertise``, ``--plain``, ``--certificate``, ``--key``, ``--cafile``,
``--checkpoint``) and its entry point (``main(args) -> int``); this module
only hangs them under the ``broker-spark`` command.
"""

from __future__ import annotations

import argparse

from broker_spark.demo import main

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:

    return int(main(args) or 0)
