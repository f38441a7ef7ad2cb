"""The reference pages of docs/reference/ are the code's: regenerated, they are what is committed.

``tools/gen_reference.py`` makes each page from the code (the parser, the configuration
reader, the option catalog, the metrics collector, the codes, the status fields). Here:
the committed pages equal what it makes now (so a new flag, key, option, metric or code,
or one removed, fails until ``make reference`` ran), and the sources it reads hold
everything the code does: every key the configuration reader takes has its line in
node_config's docstring and no line names a key it refuses, and a real relay node's
``status --json``, a node's ``status --json`` and its ``/metrics`` have no key or metric
the reference lacks, nor the reference one they never have.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from spark_fixtures import wait_for
from test_cli_support import run_command

from broker_spark.cli.network import NETWORK_FIELDS
from broker_spark.cli.spool_status import STATUS_FIELDS
from broker_spark.reader.options import text as option_text

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools" / "gen_reference.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
sys.modules["gen_reference"] = gen
_spec.loader.exec_module(gen)

#: Status keys a relay node never shows, and why (each is checked where it occurs).
ELSEWHERE = {
    "since": "a receiver's status only (tests/test_spark_receiver.py)",
    "sources[].error": "a source whose figures fail to read",
}


def test_the_committed_reference_is_what_the_code_makes() -> None:
    stale = [
        str(path.relative_to(ROOT))
        for path, text in gen.render_all()
        if not path.exists() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"{stale} differ from the code: run `make reference` and commit them"


def test_every_configuration_key_is_described_and_every_described_key_is_read() -> None:
    described = {s: set(keys) - {""} for s, keys in gen.config_docstring().items()}
    read = {s: set(keys) for s, keys in gen.config_keys_read().items() if s}
    readers = described.pop("spool.readers")  # certificate names: any key is a name
    assert readers and "readers" in read["spool"]
    read["spool"] -= {"readers"}
    options = described.pop("options")
    assert options <= set(gen.broker_options()), "[options] names no BrokerOptions field"
    read.pop("options")
    assert read == described, "node_config's docstring and the keys its reader takes differ"
    sections = {s.strip("[]") for s in gen.config_keys_read()[""]}
    assert sections == {s.strip("[]") for s in gen.config_docstring()} - {"spool.readers"}


def test_the_option_groups_parsed_together_are_catalogued() -> None:
    assert set(option_text.SSL_FILES) <= set(option_text.SHARED_OPTIONS)
    assert set(option_text.ZEROMQ_OPTIONS) <= set(option_text.SHARED_OPTIONS)


def _keys(value: Any, prefix: str = "") -> set[str]:
    """Every field of a JSON value as a path: ``a.b``, a list ``l`` and its elements'
    ``l[].key``; a map by reason (``refused``) is one field."""
    if isinstance(value, dict) and not prefix.endswith("refused"):
        out: set[str] = set()
        for k, v in value.items():
            out |= _keys(v, f"{prefix}.{k}" if prefix else k)
        return out
    if isinstance(value, list):
        return {prefix}.union(*(_keys(v, f"{prefix}[]") for v in value if isinstance(v, dict)))
    return {prefix}


def test_the_status_example_has_every_field() -> None:
    assert _keys(gen.STATUS_EXAMPLE) == set(STATUS_FIELDS)


def _committed(relay: str) -> Any:
    done = run_command("status", "--relay", relay, "--no-tls", "--json")
    status = json.loads(done.stdout) if done.returncode == 0 else {}
    readers = status.get("readers") if status.get("peers") else None
    return readers[0]["committed"] if readers else None


@pytest.mark.timeout(90)
def test_a_real_relay_status_and_its_metrics_are_what_the_reference_says(spawn, tmp_path) -> None:
    from broker_spark.spool.relay_client import SpoolClient

    spool = tmp_path / "spool"
    node = spawn(
        "node", "--no-tls", "--listen", "127.0.0.1:0", "--spool", str(spool), "--spool-retention", "1g",
        "--subscribe", "zeek/logs/", "--relay", "127.0.0.1:0",
        "--zeromq-logs", "tcp://127.0.0.1:0", "--zeromq-proxy", "tcp://127.0.0.1:1,tcp://127.0.0.1:2",
        "--websocket-peer", "ws://127.0.0.1:1/", "--metrics", "127.0.0.1:0",
    )  # fmt: skip
    listen = node.expect(r"^listening on (\S+)", 30).group(1)
    relay = node.expect(r"^relay listening on (\S+)", 30).group(1)
    metrics = node.expect(r"^metrics listening on (\S+)", 30).group(1)
    node.expect("^ready$", 30)
    sent = run_command("publish", "zeek/logs/x", "1", "2", "--no-tls", "--peer", listen)
    assert sent.returncode == 0, sent.stderr
    spawn("subscribe", "nothing/", "--no-tls", "--peer", listen)  # a peer while we look
    host, port = relay.rsplit(":", 1)
    with SpoolClient.tcp(host, int(port), None) as reader:
        reader.hello("follow", "reference test")
        wait_for(lambda: int(reader.request("bounds")["end"]) >= 2, 30, "spooled")
        reader.fetch(0, 2, 30)
        reader.send(reader.session.request("commit", offset=1))  # answered by nothing
        wait_for(lambda: _committed(relay) == 1, 30, "the commit and the peer shown")
        done = run_command("status", "--relay", relay, "--no-tls", "--json")
        assert done.returncode == 0, done.stderr
        status = json.loads(done.stdout)
    network = run_command("status", "--peer", listen, "--no-tls", "--json")
    assert network.returncode == 0, network.stderr
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as answer:
        scraped = answer.read().decode()
    node.close()
    offline = run_command("status", "--spool", str(spool), "--json")
    assert offline.returncode == 0, offline.stderr

    seen = _keys(status) | _keys(json.loads(offline.stdout))
    assert status["readers"], "the test's reader should show"
    assert seen - set(STATUS_FIELDS) == set(), "status keys the reference lacks"
    assert set(STATUS_FIELDS) - seen == set(ELSEWHERE), "documented keys no status showed"

    ids = json.loads(network.stdout)["endpoints"]
    node_keys = {
        re.sub(r"^endpoints\.[^.]+", "endpoints.ID", k) for k in _keys(json.loads(network.stdout))
    }
    assert ids and node_keys == set(NETWORK_FIELDS)

    served = set(re.findall(r"^# TYPE (\w+) (\w+)", scraped, re.M))
    served = {
        n + ("_total" if kind == "counter" and not n.endswith("_total") else "")
        for n, kind in served
    }
    documented = set(
        re.findall(
            r"^\| `(broker_spark_\w+)`", (ROOT / "docs/reference/metrics.md").read_text(), re.M
        )
    )
    assert served == documented
