"""``python -m broker_spark``: the same as the ``broker-spark`` command."""

import sys

from broker_spark.cli import main

sys.exit(main())
