"""A Spark driver for tests/test_spark_no_gap.py: one streaming query, run until killed.

``python no_gap_driver.py OPTIONS_JSON OUT_DIR CHECKPOINT`` reads
``format("broker")`` with the options given and writes each micro-batch's
``offset`` and the event's number into ``OUT_DIR/batch-<id>.json`` (a sink
keyed by offset: a batch Spark runs again after a crash writes the same
file). It prints ``started`` once the query runs, then waits for it forever.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> None:
    options, out, checkpoint = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from spark_fixtures import _start_session

    spark = _start_session(os.path.join(os.path.dirname(checkpoint), "spark-warehouse"))

    def write(df, batch_id: int) -> None:
        rows = [(r.offset, json.loads(r.data)) for r in df.select("offset", "data").collect()]
        numbers = [[offset, data["data"][2]["data"][1]["data"][0]["data"]] for offset, data in rows]
        partial = os.path.join(out, f".batch-{batch_id}.json")
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(numbers, f)
        os.replace(partial, os.path.join(out, f"batch-{batch_id}.json"))

    reader = spark.readStream.format("broker")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    print("started", flush=True)
    query.awaitTermination()


if __name__ == "__main__":
    main()
