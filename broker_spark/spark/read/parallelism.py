"""How many partitions a micro-batch becomes, and where the cluster's parallelism comes from.

The reader plans partitions in its driver-side process, which Spark starts
for the query with nothing in it that says how many cores run the tasks: no
session, no Spark configuration, and the options the user gave
(REFERENCE.md section 3). Its own ``os.cpu_count()`` is the driver
machine's, right in local mode and wrong on a cluster (a 4-core driver would
give a 200-core cluster 4 partitions). So the target comes, first found
first, from:

1. ``minPartitions`` (as Spark's Kafka source): a micro-batch of at least
   that many records is split into at least that many partitions;
2. the session's parallelism, captured by :func:`~broker_spark.spark.register`
   where the user's session is at hand (the driver program or notebook,
   classic or Spark Connect): what ``spark.range`` would use, i.e.
   ``spark.sql.leafNodeDefaultParallelism`` if set, else Spark's default
   parallelism (the executors' cores on a cluster). ``register`` puts it on
   the class it registers, which Spark pickles to every process that builds
   the source, the reader's included;
3. the driver machine's cores: local mode's answer, and what a query gets
   when the source was found by Spark's own lookup (``pyspark_broker``) and
   nobody registered it.

The reader does not ask the tasks: a task that runs on another machine has
no way back to the reader's process but the network, and the cores a
cluster offers are known to the driver's JVM, which the user's session
reaches. The captured figure is the one of the moment ``register`` runs; a
cluster that grows later (autoscaling) needs ``minPartitions``, or another
``register`` call.

How a batch of ``n`` records is split (:func:`split_batch`): ranges of at
most ``maxRecordsPerPartition`` records; their number is rounded up to whole
waves of tasks (a multiple of the parallelism: 3 partitions on 2 cores
would leave one core idle in the second wave) while each range keeps at
least :data:`MIN_RECORDS_PER_SPLIT` records, so a small batch is not cut
into tasks that cost more to schedule than to run; and with
``minPartitions`` there are at least that many ranges whenever the batch
has that many records.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from broker_spark.reader.offsets import plan_partitions

__all__ = [
    "plan_ranges",
    "MIN_RECORDS_PER_SPLIT",
    "is_connect_session",
    "local_parallelism",
    "session_parallelism",
    "split_batch",
]

log = logging.getLogger(__name__)

#: A batch is spread over the cores only while each range keeps this many records.
MIN_RECORDS_PER_SPLIT = 4096

#: Rows of the probe that counts ``spark.range``'s slices through Spark Connect (each slice
#: must get one: more rows than any cluster has cores).
_PROBE_ROWS = 1 << 20


def local_parallelism() -> int:
    """This machine's cores: the reader's target when nothing better is known."""
    return max(1, os.cpu_count() or 1)


def split_batch(
    lo: int,
    hi: int,
    cap: int,
    *,
    parallelism: int,
    least: int = MIN_RECORDS_PER_SPLIT,
    min_partitions: int | None = None,
) -> list[tuple[int, int]]:
    """Ranges of ``[lo, hi)`` for one micro-batch, as the module docstring says.

    ``cap`` and ``least`` are in offsets (the Zeek log reader scales both by
    the records a message holds); the split depends only on the arguments, so
    a re-planned batch reads the same ranges.
    """
    n = hi - lo
    parallelism = max(1, parallelism)
    needed = -(-n // cap)  # partitions of at most cap records
    waves = -(-needed // parallelism)
    wanted = max(1, min(waves * parallelism, n // max(1, least)))
    if min_partitions is not None:
        wanted = max(wanted, min_partitions)
    return plan_partitions(lo, hi, cap, min_partitions=wanted)


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no SparkContext, no JVM here)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _positive(value: Any) -> int | None:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def session_parallelism(spark: Any) -> int | None:
    """The parallelism ``spark`` gives a source's scan (None if it cannot be learned).

    ``spark.sql.leafNodeDefaultParallelism`` when set, as for ``spark.range``;
    else, in a classic session, the SparkContext's default parallelism (the
    cores of the executors registered so far, or ``local[N]``'s N). A Spark
    Connect client has no SparkContext: it reads ``spark.default.parallelism``
    if set, else counts the slices of a ``range`` the server plans (one small
    job, which the server sizes exactly as it would size a scan).
    """
    conf = spark.conf
    found = _positive(conf.get("spark.sql.leafNodeDefaultParallelism", None))
    if found is not None:
        return found
    try:
        if not is_connect_session(spark):
            return _positive(spark.sparkContext.defaultParallelism)
        found = _positive(conf.get("spark.default.parallelism", None))
        if found is not None:
            return found
        row = spark.sql(
            "SELECT max(slice) + 1 AS n FROM "
            f"(SELECT spark_partition_id() AS slice FROM range(0, {_PROBE_ROWS}))"
        ).first()
        return _positive(row[0]) if row is not None else None
    except Exception as exc:  # a session that cannot say: the reader falls back
        log.warning("could not learn the session's parallelism: %s", exc)
        return None


def plan_ranges(
    lo: int,
    hi: int,
    *,
    records_cap: int,
    parallelism: int,
    min_partitions: int | None = None,
    per_message: float = 1.0,
) -> list[tuple[int, int]]:
    """:func:`split_batch` for messages of ``per_message`` records each on average (a Zeek
    Batch holds hundreds): at most ``records_cap`` records, and at least
    :data:`MIN_RECORDS_PER_SPLIT`, a partition, in offsets."""
    return split_batch(
        lo,
        hi,
        max(1, int(records_cap / per_message)),
        parallelism=parallelism,
        least=max(1, int(MIN_RECORDS_PER_SPLIT / per_message)),
        min_partitions=min_partitions,
    )
