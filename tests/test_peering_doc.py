"""The version 2 examples merged into docs/protocol.md encode and decode as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_v2_messages import EXAMPLES, MP_B_C

from broker_spark.protocol.v2_messages import decode_v2, encode_v2

DOC = Path(__file__).resolve().parent.parent / "docs" / "protocol.md"


def doc_examples() -> dict[str, bytes]:
    out = {}
    for block in re.findall(r"```\n(example [^\n]+\n.*?)```", DOC.read_text(), re.S):
        head, *lines = block.strip().splitlines()
        out[head.split()[1]] = bytes.fromhex("".join(line.split()[0] for line in lines))
    return out


def test_protocol_md_lists_every_v2_example() -> None:
    assert set(doc_examples()) == set(EXAMPLES) | {"multipath"}
    assert doc_examples()["multipath"] == MP_B_C


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_protocol_md_v2_examples(name: str) -> None:
    sender, receiver, msg = EXAMPLES[name]
    assert encode_v2(sender, receiver, msg) == doc_examples()[name]
    assert decode_v2(doc_examples()[name]) == (sender, receiver, msg)
