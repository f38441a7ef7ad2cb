"""Where the recorded sessions of a real Broker are: ``tests/vectors/``.

They are byte-exact copies of the project's shared test vectors (see
``tests/vectors/README.md``), kept in the repository so that a clean clone
tests against them anywhere. ``BROKER_SPARK_VECTORS`` points elsewhere, for
checking newer recordings.
"""

from __future__ import annotations

import os
from pathlib import Path

VECTORS = Path(os.environ.get("BROKER_SPARK_VECTORS") or Path(__file__).parent / "vectors")
