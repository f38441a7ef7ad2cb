"""The deployment snippets of docs/, as the live tests run them.

A snippet the live tests run is marked in its Markdown file by a comment on the line
before its fenced block: ``<!-- live: NAME -->`` (invisible where the Markdown is
rendered). The tests take the block's text from the doc and change only what a
loopback test must: addresses, ports, paths. So a snippet that stops working fails a
test, and a doc cannot keep a snippet the tests no longer run.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_MARK = re.compile(r"^<!-- live: (?P<name>[\w.-]+) -->\s*$")


def snippets(doc: str) -> dict[str, str]:
    """Every marked snippet of ``docs/<doc>``, by name."""
    lines = (DOCS / doc).read_text().splitlines()
    out: dict[str, str] = {}
    for i, line in enumerate(lines):
        mark = _MARK.match(line.strip())
        if not mark:
            continue
        fence = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if not fence.startswith("```"):
            raise ValueError(f"docs/{doc}:{i + 1}: {line.strip()} is not followed by a code block")
        indent = lines[i + 1][: len(lines[i + 1]) - len(lines[i + 1].lstrip())]
        body = []
        for text in lines[i + 2 :]:
            if text.strip().startswith("```"):
                break
            body.append(text[len(indent) :] if text.startswith(indent) else text)
        out[mark["name"]] = "\n".join(body) + "\n"
    return out


def snippet(doc: str, name: str) -> str:
    found = snippets(doc)
    if name not in found:
        raise KeyError(f"docs/{doc} has no snippet marked <!-- live: {name} --> ({sorted(found)})")
    return found[name]


def replace_all(text: str, replacements: Mapping[str, str]) -> str:
    """``text`` with each key replaced by its value; a key the text lacks is an error (the
    doc changed under the test)."""
    for old, new in replacements.items():
        if old not in text:
            raise AssertionError(f"the snippet no longer holds {old!r}:\n{text}")
        text = text.replace(old, new)
    return text


_NODE = re.compile(r'\["(?P<node>[\w-]+)"\]\s*=\s*\[(?P<fields>[^\]]*)\]')


def relocate_layout(layout: str, ports: Mapping[str, int], ip: str = "127.0.0.1") -> str:
    """A cluster layout's nodes moved onto ``ip``, each node of ``ports`` onto its port.

    Every node keeps its type, manager and other fields; a node with a ``$p`` must be
    given a port, since on one host no two listeners share one."""

    def move(found: re.Match[str]) -> str:
        node, fields = found["node"], found["fields"]
        fields = re.sub(r"\$ip=[^,\]]+", f"$ip={ip}", fields)
        if "$p=" in fields:
            if node not in ports:
                raise AssertionError(f"node {node} listens ($p) but the test gave it no port")
            fields = re.sub(r"\$p=\d+/tcp", f"$p={ports[node]}/tcp", fields)
        elif node in ports:
            fields += f", $p={ports[node]}/tcp"
        return f'["{node}"] = [{fields}]'

    return _NODE.sub(move, layout)


def layout_nodes(layout: str) -> dict[str, str]:
    """The nodes of a cluster layout and their types (``LOGGER``, ``WORKER``...)."""
    out = {}
    for found in _NODE.finditer(layout):
        kind = re.search(r"\$node_type=Cluster::(\w+)", found["fields"])
        assert kind, found.group(0)
        out[found["node"]] = kind.group(1)
    return out


def command_args(text: str, values: Mapping[str, str]) -> list[str]:
    """A shell snippet's ``broker-spark`` command as arguments (after ``broker-spark``),
    each flag of ``values`` given that value instead of the doc's.

    Every flag the doc gives a value for must be in ``values`` or be a plain word that
    needs no placing (``--subscribe zeek/logs/``); an address or a path the test did not
    place fails it, so a snippet's new listener cannot bind beyond loopback here."""
    words = shlex.split(text.replace("\\\n", " "), comments=True)
    start = words.index("broker-spark") + 1
    args = words[start:]
    out: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        out.append(word)
        takes_value = (
            word.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--")
        )
        if takes_value:
            value = args[i + 1]
            if word in values:
                value = values[word]
            elif re.search(r"[/:]|\d+\.\d+", value) and not value.endswith("/"):
                raise AssertionError(f"{word} {value}: an address or path the test must place")
            out.append(value)
            i += 2
        else:
            i += 1
    unused = set(values) - set(out)
    if unused:
        raise AssertionError(f"the snippet has none of {sorted(unused)}: {text}")
    return out
