"""The facts the docs and the shipped files state, checked against the code and each other.

Each test takes one kind of fact (a default, a port, a metric's name and labels, a
retention, the restart policy, a dependency floor, a file's name, a pointer to a section)
wherever the hand-written pages (tests/doc_facts.py: docs/ but the generated reference,
and the README), conf/, docker/ and docker-compose.yml state it, and compares it with what
the code or the shipped file does. Issue 53 lists the contradictions they were written
against; each test's docstring names the kind it guards.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
import yaml
from doc_facts import CODE, DOCS, PAGES, REFERENCE, ROOT, SHIPPED, fenced_blocks, headings
from doc_facts import paragraphs as _paragraphs
from test_relay_packaging import UNIT, unit_entries

from broker_spark.node.settings import DEFAULT_RETENTION_SECONDS
from broker_spark.spool.metrics import StatusCollector

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

_spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "tools/gen_reference.py")
assert _spec is not None and _spec.loader is not None
gen = sys.modules.get("gen_reference") or importlib.util.module_from_spec(_spec)
if "gen_reference" not in sys.modules:
    sys.modules["gen_reference"] = gen
    _spec.loader.exec_module(gen)

EVERYTHING = [*PAGES, *SHIPPED]
PARAGRAPHS = list(_paragraphs(EVERYTHING))
PAGE_PARAGRAPHS = [p for p in PARAGRAPHS if p.path.suffix == ".md"]
NUMBERS = {"five": 5, "six": 6, "seven": 7, "eight": 8, "ten": 10, "twelve": 12}
#: Paths the docs name that are not in the repository: made by a command, or another project's.
UNSHIPPED = ("conf/certs", "tests/python")
#: Topics a pointer to a page is about, when the text before it names them.
TOPICS = ("ZeroMQ", "Databricks")
#: The labels Prometheus adds to every series it scrapes.
SCRAPE_LABELS = {"instance", "job"}
FRACTIONS = {"tenth": 10, "eleventh": 11, "twelfth": 12, "thirteenth": 13, "fourteenth": 14}


def _fail(found: list[str], what: str) -> None:
    assert not found, f"{what}:\n  " + "\n  ".join(found)


# --- the unit, the images, compose --------------------------------------------------------


def test_the_restart_policy_stated_is_the_units() -> None:
    """The Broker how-to said `Restart=always`; the unit says `on-failure`."""
    service = dict(unit_entries(UNIT.read_text())["Service"])
    found = [
        f"{p.where}: Restart={value}"
        for p in PARAGRAPHS
        if p.path != UNIT
        for value in re.findall(r"Restart=([\w-]+)", p.text)
        if value != service["Restart"]
    ]
    _fail(found, f"the unit says Restart={service['Restart']}")


def test_the_pyspark_floor_stated_is_pyprojects() -> None:
    """docker/Dockerfile said pyspark >= 4.2; pyproject.toml and the README say 4.0."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor = re.search(r"pyspark>=([\d.]+)", extras["optional-dependencies"]["spark"][0])
    assert floor is not None
    said = re.compile(r"pyspark\s*>=\s*([\d.]+)|PySpark ([\d.]+) (?:and|or) later", re.I)
    found = [
        f"{p.where}: {m.group(0)}"
        for p in PARAGRAPHS
        for m in said.finditer(p.text)
        if (m.group(1) or m.group(2)) != floor.group(1)
    ]
    _fail(found, f"pyproject.toml's floor is pyspark>={floor.group(1)}")


def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_security_says_which_compose_ports_are_published_and_who_gets_the_ca_key() -> None:
    """security.md said no port is published and five services get the certificates;
    docker-compose.yml published three of the relay's, into six."""
    section = headings(DOCS / "security.md")["7. The demo, the notebooks and docker-compose"]
    text = " ".join(section.split())
    services = _compose()["services"]
    published = [str(p) for s in services.values() for p in s.get("ports", [])]
    missing = [p for p in published if p.split(":")[-2 if p.count(":") > 1 else 0] not in text]
    assert not missing, f"security.md's compose part does not name the published {missing}"
    for port in published:
        host = port.rsplit(":", 2)[0] if port.count(":") == 2 else "0.0.0.0"
        if host == "127.0.0.1":
            assert f"127.0.0.1:{port.split(':')[1]}" in text, port
    with_certs = {
        name
        for name, s in services.items()
        if name != "certs" and any(str(v).startswith("certs:") for v in s.get("volumes", []))
    }
    named = re.search(r"mounted into ([^:]*):", text)
    assert named is not None, "security.md no longer says who mounts the certs volume"
    assert set(re.findall(r"`([\w-]+)`", named.group(1))) == with_certs
    counted = [
        f"{p.where}: {m.group(0)}"
        for p in _paragraphs([DOCS / "security.md"])
        for m in re.finditer(r"\b(\w+) services\b", p.text)
        if "compose" in p.text and NUMBERS.get(m.group(1), len(with_certs)) != len(with_certs)
    ]
    _fail(counted, f"{len(with_certs)} services mount the certs volume")


def test_the_relay_images_ports_are_its_configurations() -> None:
    """Dockerfile.relay's EXPOSE and its comment, compose's ports and the relay's
    configuration name the same ports for the same listeners."""
    dockerfile = (ROOT / "docker/Dockerfile.relay").read_text()
    exposed = re.search(r"^EXPOSE (.*)$", dockerfile, re.M)
    assert exposed is not None
    config = tomllib.loads((ROOT / "conf/relay-container.toml").read_text())
    ports = {
        "logs": config["zeromq"]["logs"].rsplit(":", 1)[1],
        "readers": config["spool"]["relay"].rsplit(":", 1)[1],
        "metrics": config["metrics"]["listen"].rsplit(":", 1)[1],
    }
    assert set(exposed.group(1).split()) == set(ports.values())
    said = dict(re.findall(r"(\d{4,5}): ([^,\n]+)", dockerfile))
    assert ports["logs"] in said and "Zeek" in said[ports["logs"]], said
    assert "reader" in said[ports["readers"]] and "metrics" in said[ports["metrics"]], said
    relay = _compose()["services"]["relay"]
    assert {str(p).rsplit(":", 1)[1] for p in relay["ports"]} <= set(ports.values())
    service = tomllib.loads((ROOT / "conf/relay-service.toml").read_text())
    assert service["spool"]["relay"].endswith(":" + ports["readers"])
    assert service["zeromq"]["logs"].endswith(":" + ports["logs"])


# --- metrics ---------------------------------------------------------------------------------


def _metrics() -> dict[str, set[str]]:
    """The code's metrics: name -> the labels it declares."""
    out = {}
    for family in StatusCollector(lambda: gen.STATUS_EXAMPLE).collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = set(getattr(family, "_labelnames", ()))
    return out


def test_every_metric_the_docs_name_exists_with_those_labels() -> None:
    """A metric or label the docs, the dashboard or the alert rules name is one the relay
    serves."""
    metrics = _metrics()
    found = []
    for p in PARAGRAPHS:
        for m in re.finditer(r"\b(broker_spark_[a-z_]+)(?![\w*])(\{[^}]*\})?", p.text):
            name, labels = m.group(1), m.group(2)
            if name not in metrics:
                if not any(known.startswith(name + "_") for known in metrics):  # a prefix
                    found.append(f"{p.where}: {name} is no metric")
                continue
            for label in re.findall(r"([a-z_]+)\s*(?:=~?|!=|,|\})", labels or ""):
                if label not in metrics[name] | SCRAPE_LABELS:
                    found.append(f"{p.where}: {name} has no label {label!r}")
    _fail(found, "metrics the code does not serve")


def test_the_metrics_reference_gives_each_metric_its_labels() -> None:
    """The reference gave `relay_reader_lag_seconds` no label; the code gives it `reader`."""
    rows = re.findall(
        r"^\| `(broker_spark_\w+)` \| \w+ \| ([^|]*) \|",
        (REFERENCE / "metrics.md").read_text(),
        re.M,
    )
    assert rows
    said = {name: set(re.findall(r"`(\w+)`", labels)) for name, labels in rows}
    assert said == _metrics()


def test_what_spool_failed_means_is_what_the_code_says() -> None:
    """The ZeroMQ how-to said `spool_failed` means a full disk; the code: an error other than
    a full disk (the disk guard is `spool_paused`)."""
    found = [
        p.where
        for p in PAGE_PARAGRAPHS
        if "spool_failed" in p.text
        and re.search(r"full disk|disk guard", p.text)
        and not re.search(r"other than a full disk|no longer", p.text)
    ]
    _fail(found, "spool_failed said to mean a full disk")


def test_undecodable_batches_are_kept_not_refused() -> None:
    """The ZeroMQ how-to, command-line.md and the metrics reference counted undecodable
    batches under "refused"; the relay keeps them (`undecodable`)."""
    found = []
    for p in [*PARAGRAPHS, *_paragraphs([REFERENCE / "metrics.md"])]:
        for m in re.finditer(r"undecodable batches", p.text):
            before = p.text[max(0, m.start() - 60) : m.start()]
            if re.search(r"refused\S*\s*(?:\(|`? rising:)\s*$", before):
                found.append(f"{p.where}: ...{before}{m.group(0)}")
    _fail(found, "undecodable batches counted as refused")


def test_metrics_tls_is_not_denied() -> None:
    """security.md said `/metrics` has no TLS; `--metrics-tls` serves it over HTTPS."""
    found = [
        p.where
        for p in PAGE_PARAGRAPHS
        if "metrics" in p.text
        and re.search(r"no TLS|plain HTTP", p.text)
        and "metrics-tls" not in p.text
    ]
    _fail(found, "pages that say /metrics has no TLS, without --metrics-tls")


# --- retention, disk, compression -------------------------------------------------------------


def test_the_relays_retention_default_is_the_codes() -> None:
    """security.md said 1 GiB / 7 days by default; a relay keeps a day with no size limit
    (1 GiB and 7 days are a query's `spoolPath`, or the old defaults)."""
    found = []
    for p in PARAGRAPHS:
        for m in re.finditer(r"(?:--spool-max-age|retention_seconds =) (\d+)", p.text):
            stated = "default" in p.text and not re.search(r"before|old bounds|instead of", p.text)
            if stated and float(m.group(1)) != DEFAULT_RETENTION_SECONDS:
                found.append(f"{p.where}: {m.group(0)}")
        if re.search(r"7 days|604800", p.text) and not re.search(
            r"spool\.retention|spoolPath|receiver|before|instead of|old\b", p.text
        ):
            found.append(f"{p.where}: 7 days, not a query's spoolPath nor the old default")
    _fail(found, f"a relay's default retention is {DEFAULT_RETENTION_SECONDS:g} s")


def test_the_disk_formulas_agree() -> None:
    """The ZeroMQ how-to and performance.md added one segment to the disk a spool needs;
    relay.md two files and the guard's floor."""
    tails = {}
    for page in PAGES:
        for block in re.findall(
            r"(?m)^ {4}\S*disk[^\n]*=[^\n]*\n((?: {4,}\+[^\n]*\n)+)", page.read_text()
        ):
            tails[page.relative_to(ROOT).as_posix()] = " ".join(block.split())
    assert len(tails) >= 2, tails
    assert len(set(tails.values())) == 1, tails
    relay = " ".join((DOCS / "relay.md").read_text().split())
    assert "two files as written" in relay and "free-disk floor" in relay
    assert "two files as written" in next(iter(tails.values()))


def _bytes_a_record() -> dict[str, tuple[int, int]]:
    """performance.md's measured bytes a record, as written and compressed, by batch kind."""
    text = (DOCS / "performance.md").read_text()
    out = {}
    for kind, pattern in (("ZeroMQ", r"as ZeroMQ batches"), ("Broker", r"as Broker Batches")):
        m = re.search(pattern + r"[^|]*\| (\d+) \| (\d+) \|", text)
        assert m is not None, kind
        out[kind] = (int(m.group(1)), int(m.group(2)))
    return out


def test_compression_ratios_said_are_the_measured_ones() -> None:
    """ "A tenth" in one place, "a thirteenth" in another: each fraction now names its kind
    of batch, and is performance.md's measurement for it."""
    ratios = {k: written / packed for k, (written, packed) in _bytes_a_record().items()}
    found = []
    texts = [(p.where, p.text) for p in PARAGRAPHS]
    texts += [(str(f.relative_to(ROOT)), f.read_text()) for f in CODE if f.parent.name == "cli"]
    for where, text in texts:
        for m in re.finditer(rf"\ba ({'|'.join(FRACTIONS)})\b", text):
            before = text[max(0, m.start() - 120) : m.start()]
            if "compress" not in before + text[m.end() : m.end() + 60] and "disk" not in before:
                continue
            kinds = {k: before.rfind(k) for k in ratios if k in before}
            if not kinds:
                found.append(f"{where}: 'a {m.group(1)}' of which batches?")
                continue
            kind = max(kinds, key=kinds.get)  # the kind named last before it
            if abs(FRACTIONS[m.group(1)] - ratios[kind]) >= 1:
                found.append(f"{where}: 'a {m.group(1)}' for {kind}")
    _fail(found, f"compression ratios measured: {ratios}")


# --- file names, pointers, places -----------------------------------------------------------------


def test_the_readers_files_are_named_alike_and_never_given_to_a_relay() -> None:
    """Databricks' and the pipelines' how-tos used cert.pem/key.pem, the ZeroMQ how-to
    reader.pem/reader.key; a relay was given the reader's pair."""
    written, read = set(), {}
    for page in PAGES:
        text = page.read_text()
        written |= set(re.findall(r"> /local_disk0/broker-tls/([\w.]+)", text))
        for name in re.findall(
            r"ssl\.\w+\"?[,:)]?\s*\(?\"(?:/local_disk0/broker-tls/)([\w.]+)\"", text
        ):
            read.setdefault(name, page.relative_to(ROOT).as_posix())
    assert written, "no init script writes the reader's files"
    assert set(read) <= written, f"read but not written by the init script: {read}"
    assert {"reader.pem", "reader.key", "ca.pem"} == written
    given = [
        f"{page.relative_to(ROOT)}: {block.splitlines()[0]}"
        for page in [*PAGES]
        for block in fenced_blocks(page)
        if "broker-spark node" in block and "reader." in block
    ]
    _fail(given, "a relay's command with the reader's files")


_CITED = re.compile(r"(docs/[\w/.-]+\.md),?\s+\"([^\"]+)\"")


def test_every_section_the_shipped_files_and_help_cite_exists_and_has_content() -> None:
    """The unit and Dockerfile.relay cited deploy.md's "A relay as a service" (none),
    relay.md "the README's Benchmarks" (none), relay-zeromq.toml and `node --help`
    deploy.md's ZeroMQ part (a stub now)."""
    found = []
    sources = [*SHIPPED, *CODE, *PAGES]
    for source in sources:
        text = " ".join(re.sub(r"\n\s*(?:#|//)?\s*", " ", source.read_text()).split())
        for page, section in _CITED.findall(text):
            titles = headings(ROOT / page) if (ROOT / page).exists() else {}
            body = titles.get(section)
            if body is None:
                found.append(f"{source.relative_to(ROOT)}: {page} has no section {section!r}")
            elif len(body.split()) < 60 or body.lstrip().startswith("Moved"):
                found.append(f"{source.relative_to(ROOT)}: {page} {section!r} is a stub")
        for section in re.findall(r"the README's (\w[\w ]*?)\b[),.:]", text):
            if section not in headings(ROOT / "README.md"):
                found.append(f"{source.relative_to(ROOT)}: the README has no {section!r}")
        if source.suffix != ".md":
            bare = re.finditer(r"\b(docs/[\w/.-]+\.md)\b", text.replace("docs/NAME.md", ""))
            for m in bare:
                found += _points_to_its_topic(
                    source, m.group(1), text[max(0, m.start() - 300) : m.start()]
                )
    _fail(found, "pointers to sections that are not there")


def _points_to_its_topic(source: Path, page: str, before: str) -> list[str]:
    """A bare pointer to a page: the page is there and, where the text before it names one
    of TOPICS, says more than a stub's "Moved" about it."""
    where = source.relative_to(ROOT)
    if not (ROOT / page).exists():
        return [f"{where}: {page} does not exist"]
    sections = list(headings(ROOT / page).values())[1:]  # not the title's intro, which links
    return [
        f"{where}: {page} says nothing of {topic} but where it moved"
        for topic in TOPICS
        if topic in before
        and not any(topic in b and len(b.split()) >= 60 and "Moved" not in b for b in sections)
    ]


def test_every_file_the_docs_name_exists() -> None:
    """A shipped file, benchmark or test a page names is there."""
    found = []
    for p in PARAGRAPHS:
        pattern = r"(?<![\w/.-])((?:conf|docker|bench|tests|tools)/[\w./-]*\w)(?![\w*{/-])"
        for name in re.findall(pattern, p.text):
            if not name.startswith(UNSHIPPED) and not (ROOT / name).exists():
                found.append(f"{p.where}: {name}")
    _fail(found, "files that are not there")


def test_checkpoints_live_in_the_volume_the_guide_creates() -> None:
    """A checkpoint under `zeek/checkpoints` in one guide, the `main.zeek.state` volume in
    another."""
    created = set()
    used = []
    for page in PAGES:
        text = page.read_text()
        created |= {m.replace(".", "/") for m in re.findall(r"CREATE VOLUME (\w+\.\w+\.\w+)", text)}
        used += [(page, v) for v in re.findall(r"/Volumes/(\w+/\w+/\w+)/", text)]
    assert created
    _fail(
        [f"{p.relative_to(ROOT)}: {v}" for p, v in used if v not in created], f"volumes: {created}"
    )


# --- claims about what was run ----------------------------------------------------------------


def _soak_minutes() -> int:
    m = re.search(r"^SOAK_SECONDS \?= (\d+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m is not None
    return int(m.group(1)) // 60


@pytest.mark.parametrize("claim", ["weeks", "months", "days"])
def test_the_soak_is_claimed_for_as_long_as_it_runs(claim: str) -> None:
    """index.md promised "weeks without a gap" from a soak of 10 minutes."""
    minutes = _soak_minutes()
    found = []
    for p in PAGE_PARAGRAPHS:
        if "make soak" not in p.text:
            continue
        if re.search(rf"\b{claim} without", p.text):
            found.append(f"{p.where}: {claim}")
        for said in re.findall(r"\b(\d+|ten)[- ]minutes?\b", p.text):
            if int(NUMBERS.get(said, said)) not in (minutes, 60):
                found.append(f"{p.where}: {said} minutes")
    _fail(found, f"the soak runs {minutes} minutes (SOAK_SECONDS)")


def test_delta_is_said_to_be_written_as_the_code_writes_it() -> None:
    """databricks.md said Delta tables take Spark's own parse and writer; since 2026-11-28
    the tasks' typed Arrow columns, no JSON (zeek.md, upgrading.md)."""
    found = [
        p.where
        for p in PAGE_PARAGRAPHS
        if re.search(r"Spark's own\s+parse|Spark's parse of JSON", p.text)
        and not re.search(r"instead of|Before", p.text)
    ]
    _fail(found, "Delta said to be written from Spark's parse of JSON")


def test_upgrading_announces_nothing_it_already_records() -> None:
    """upgrading.md still announced, as coming, the retention change it records above."""
    titles = headings(DOCS / "upgrading.md")
    coming = {t: b for t, b in titles.items() if t.lower().startswith("coming")}
    done = " ".join(t for t in titles if not t.lower().startswith("coming"))
    stale = [t for t, body in coming.items() if "retention" in body and "keep a day" in done]
    assert not stale, f"upgrading.md announces what it records: {stale}"
