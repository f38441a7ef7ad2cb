"""``python -m broker_spark.demo``: the same as ``broker-spark demo``, flags and all.

It goes through the command line's ``main`` rather than the demo's own, so
logging, ``--log-level``, the help text and the exit statuses are those of
``broker-spark demo``, not merely alike.
"""

import sys

from broker_spark.cli import main

sys.exit(main(["demo", *sys.argv[1:]]))
