# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Each creates .venv with the machine's python3 when it is absent and installs the
# project into it (editable, with the dev extras), so a fresh clone needs nothing else.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: test test-slow test-live test-cluster test-spark-versions soak demo lint format bench bench-kafka clean reference docs test-docs

$(STAMP): pyproject.toml setup.py $(wildcard broker_spark/zeek/*.c)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	@touch $(STAMP)

# The kafka extra (confluent-kafka: bench/kafka_path.py's producer) on top of the dev one.
KAFKA_STAMP := $(VENV)/.kafka-stamp
$(KAFKA_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,kafka]' --config-settings editable_mode=compat
	@touch $(KAFKA_STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest

# Tests that start Spark drivers, kernels or relay nodes of their own, or run long (a driver
# killed and restarted, a relay killed under a query, the notebooks, the demo's short run,
# the tables of every recorded log, bench/kafka_path.py --quick): too slow for the 5-minute suite,
# so a step of their own; CI runs it after `make test`. The long steps print their ten
# slowest tests (--durations), so a CI log says where a step's time goes.
test-slow: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/python -m pytest --durations=10 -m "slow or notebooks"

# A real Zeek (9.1: shared/zeek beside the checkout, or $$BROKER_SPARK_ZEEK) against broker-spark
# on loopback, Zeek's own output the oracle: a ZeroMQ cluster logging into relay nodes and
# tables, zeekctl's layout, events both ways (proxy, relay, WebSocket API), the Broker backend
# (tests/live/). Fails, never skips, without a Zeek; CI runs it after `make test-slow`.
test-live: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider --durations=10 -m "live and not lake" tests/live

# The connector beyond one process, each in a pytest process of its own (a classic driver
# and a Spark Connect client cannot share one): a Spark standalone cluster (a master and two
# single-core workers) and a Spark Connect server, both started from the venv's pyspark on
# loopback and stopped at the end. `make test` leaves these tests out; CI runs them after it.
test-cluster: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m cluster tests/test_spark_cluster.py
	$(BIN)/python -m pytest -p no:cacheprovider -m connect tests/test_spark_connect.py

# The Spark tests again on PySpark 4.0 and 4.1 (Databricks 17.3 and 18 LTS), each in its
# own .venv-spark-X.Y, both at once; CI runs it after `make test`.
test-spark-versions:
	PYTHON=$(PYTHON) .ci/spark-versions

# The whole path (two relays, senders over ZeroMQ and Broker, a Spark query, WebSocket and
# store clients) under load with faults injected, then checked: bench/soak/run.py.
# SOAK_SECONDS long (10 minutes by default; an hour: SOAK_SECONDS=3600 make soak).
SOAK_SECONDS ?= 600
soak: $(STAMP)
	SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python bench/soak/run.py

# The pages of docs/reference/, made from the code (the parser, the configuration reader,
# the option catalog, the metrics, the codes, the status fields): run it after changing
# any of those and commit the result; tests/test_reference.py fails while they differ.
reference: $(STAMP)
	$(BIN)/python tools/gen_reference.py

# The site of docs/ (mkdocs.yml, mkdocs-material), built strict: a broken link, a missing
# page or a reference that is not the code's fails it. It lands in site/ (not committed).
docs: $(STAMP)
	$(BIN)/python tools/gen_reference.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The runnable blocks of the tutorial and the how-to guides, run as written on loopback
# (tests/doc_blocks.py); blocks that need a real Zeek are make test-live's. CI runs it.
test-docs: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider --durations=10 -m docs tests/test_doc_blocks.py

demo: $(STAMP)
	$(BIN)/broker-spark demo

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	$(BIN)/broker-spark bench

# Ours against Kafka on the same Zeek records, end to end into tables (bench/kafka_path.py,
# docs/performance.md): fetches Kafka 4 and Spark's Kafka source with mvn into
# ~/.cache/broker-spark/kafka once, runs a broker for the run and stops it. Took 8 minutes
# on 2 shared cores; BENCH_KAFKA_ARGS=--quick runs 10,000 records.
BENCH_KAFKA_ARGS ?=
bench-kafka: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/python bench/_kafka_setup.py fetch
	$(BIN)/python bench/kafka_path.py $(BENCH_KAFKA_ARGS)

clean:
	rm -rf $(VENV) .venv-spark-* .pytest_cache .ruff_cache .hypothesis build
	rm -f broker_spark/zeek/*.so
