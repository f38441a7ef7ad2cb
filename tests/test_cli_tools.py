"""``certs``, ``bench`` and ``demo`` (its flags; the demo itself is tested with the demo)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from broker_spark.cli import build_parser, main
from broker_spark.cli.bench import BENCHMARKS, find_bench_dir
from broker_spark.cli.svg import render_svg


def test_certs_writes_a_ca_and_node_certificates(tmp_path: Path, capsys) -> None:
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out), "--nodes", "x", "y", "--host", "node.example"]) == 0
    printed = capsys.readouterr().out
    names = sorted(p.name for p in out.iterdir())
    assert names == ["ca.key", "ca.pem", "x.key", "x.pem", "y.key", "y.pem"]
    for name in names:
        assert f"wrote {out / name}" in printed
    import json
    import textwrap

    import tomllib

    for node in ("x", "y"):  # each node: its flags, [tls] and Spark options
        cert, key, ca = str(out / f"{node}.pem"), str(out / f"{node}.key"), str(out / "ca.pem")
        block = printed.split(f"\n{node}:\n", 1)[1]
        assert block.startswith(f"  flags: --cert {cert} --key {key} --ca {ca}\n")
        toml, spark = block.split("  node config:\n", 1)[1].split("  Spark options: ", 1)
        tls = tomllib.loads(textwrap.dedent(toml))["tls"]
        assert tls == {"certificate": cert, "key": key, "cafile": ca}
        options = json.loads(spark.split("\n", 1)[0])
        assert options == {"ssl.certificate": cert, "ssl.key": key, "ssl.cafile": ca}
    assert stat.S_IMODE((out / "x.key").stat().st_mode) == 0o600
    ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
    node = x509.load_pem_x509_certificate((out / "y.pem").read_bytes())
    node.verify_directly_issued_by(ca)
    sans = node.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {"y", "localhost", "node.example"} <= set(sans.get_values_for_type(x509.DNSName))
    # Run again: nothing replaced (containers run it at every start) ...
    before = (out / "x.pem").read_bytes()
    assert main(["certs", "--out", str(out), "--nodes", "x", "y"]) == 0
    assert "already in" in capsys.readouterr().out and (out / "x.pem").read_bytes() == before
    # ... unless forced; a partial set is an error.
    assert main(["certs", "--out", str(out), "--nodes", "x", "z"]) == 1
    assert "use --force" in capsys.readouterr().err
    assert main(["certs", "--out", str(out), "--nodes", "x", "y", "--force"]) == 0
    assert (out / "x.pem").read_bytes() != before


def test_certs_rejects_bad_names(tmp_path: Path, capsys) -> None:
    assert main(["certs", "--out", str(tmp_path), "--nodes", "../evil"]) == 2
    assert main(["certs", "--out", str(tmp_path), "--nodes", "ca"]) == 2


def _fake_bench(tmp_path: Path, fail: str = "") -> Path:
    d = tmp_path / "bench"
    d.mkdir()
    for name in BENCHMARKS:
        code = "1" if name == fail else "0"
        (d / f"{name}.py").write_text(
            f"import sys\nprint('table of {name}', *sys.argv[1:])\nsys.exit({code})\n"
        )
    return d


def test_bench_runs_the_scripts_with_progress(tmp_path: Path, capfd) -> None:
    d = _fake_bench(tmp_path)
    assert main(["bench", "codec", "endpoint", "--quick", "--dir", str(d)]) == 0
    out, err = capfd.readouterr()
    assert out.splitlines() == [
        "table of codec --quick",
        "table of endpoint --messages 30000 --repeat 1",
    ]
    assert "[1/2] codec ..." in err and "[2/2] endpoint done in" in err
    assert main(["bench", "--dir", str(d), "--json"]) == 0
    out, err = capfd.readouterr()
    n, last = len(BENCHMARKS), list(BENCHMARKS)[-1]
    assert len(out.splitlines()) == n and f"[{n}/{n}] {last}" in err


def test_bench_failures_and_errors(tmp_path: Path, capfd) -> None:
    d = _fake_bench(tmp_path, fail="store")
    assert main(["bench", "--dir", str(d)]) == 1
    err = capfd.readouterr().err
    n = len(BENCHMARKS)
    assert f"[5/{n}] store FAILED (exit 1)" in err
    assert err.endswith(f"broker-spark: error: 1 of {n} benchmarks failed: store\n")
    assert main(["bench", "nope", "--dir", str(d)]) == 2
    assert main(["bench", "--dir", str(tmp_path / "missing")]) == 2
    assert main(["bench", "--list"]) == 0
    assert capfd.readouterr().out.split() == list(BENCHMARKS)


def test_bench_finds_the_checkout() -> None:
    found = find_bench_dir(None)
    assert (found / "codec.py").is_file() and found.resolve().parent.name


def test_bench_lists_every_script_of_the_checkout() -> None:
    """`make bench` runs them all: a new script under bench/ must be added to the list."""
    scripts = {p.stem for p in find_bench_dir(None).glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(BENCHMARKS)


def test_bench_without_a_checkout(monkeypatch, tmp_path: Path) -> None:
    import broker_spark
    from broker_spark.cli.errors import CliError

    monkeypatch.setattr(broker_spark, "__file__", str(tmp_path / "site" / "broker_spark" / "x"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CliError, match="not with an installed wheel"):
        find_bench_dir(None)


def test_demo_flags_come_from_the_demo() -> None:
    args = build_parser().parse_args(["demo"])
    assert (args.seconds, args.rate, args.quiet, args.peer) == (60.0, 2000.0, False, None)
    args = build_parser().parse_args(
        ["demo", "--master", "spark://m:7077", "--peer", "b:9999", "--certificate", "c.pem",
         "--listen", "0.0.0.0:9999", "--advertise", "driver", "--seconds", "5", "--quiet"]
    )  # fmt: skip
    assert (args.master, args.peer, args.certificate, args.advertise) == (
        "spark://m:7077", "b:9999", "c.pem", "driver",
    )  # fmt: skip


def test_svg_of_a_single_node() -> None:
    from broker_spark.cli.network import Network

    svg = render_svg(Network("0123456789abcdef", "h:1", 1, {"0123456789abcdef": ["<a&b>"]}))
    assert "01234567" in svg and "&lt;a&amp;b&gt;" in svg
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg.split("\n", 1)[1])
    assert len(root.findall(".//{http://www.w3.org/2000/svg}circle")) == 1
