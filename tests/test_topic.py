"""Topics and prefix filters, as Broker defines them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_spark.topic import Filter, Topic, as_topic_str, matches, minimize


def test_topic_join_rules_match_broker() -> None:
    assert Topic("/a/") / Topic("/b/c") == "/a//b/c"
    t = Topic("/b/c")
    t /= Topic("/a/")
    assert t == "/b/c/a"
    assert isinstance(t, Topic)
    assert (Topic("a") / "b").string() == "a/b"
    assert Topic("a") / "" == "a"
    # Broker adds no separator after an empty topic and drops only one trailing separator.
    assert Topic("") / "foo" == "foo"
    assert Topic("a") / "b//" == "a/b/"
    assert Topic("a/") / "" == "a"
    assert Topic("/") / "" == ""


def test_topic_is_a_str() -> None:
    assert Topic("/zeek") == "/zeek"
    assert {Topic("/zeek")} == {"/zeek"}
    assert repr(Topic("/x")) == "Topic('/x')"


def test_as_topic_str_rejects_non_topics() -> None:
    assert as_topic_str(Topic("/a")) == "/a"
    with pytest.raises(TypeError, match="expected a topic"):
        as_topic_str(42)


def test_filter_minimises_prefixes() -> None:
    f = Filter(["/zeek/event/foo", "/zeek/event/bar"])
    assert f.prefixes() == ["/zeek/event/bar", "/zeek/event/foo"]
    assert f.add("/zeek/event") is True
    assert f.prefixes() == ["/zeek/event"]
    assert f.add("/zeek/event/baz") is False
    assert f.prefixes() == ["/zeek/event"]


def test_filter_matching_is_plain_string_prefix() -> None:
    f = Filter(["/zeek/event"])
    assert f.matches("/zeek/event/foo")
    assert f.matches("/zeek/events")
    assert not f.matches("/zeek/even")
    assert not f.matches("/other")


def test_filter_remove() -> None:
    f = Filter(["/a", "/b"])
    assert f.remove("/a") is True
    assert f.remove("/a") is False
    assert list(f) == ["/b"]
    assert "/b" in f and len(f) == 1


@given(
    st.lists(st.text(alphabet="/ab", max_size=5), max_size=12), st.text(alphabet="/ab", max_size=7)
)
def test_minimised_filter_matches_like_the_raw_prefix_set(prefixes: list[str], topic: str) -> None:
    minimal = minimize(prefixes)
    assert matches(minimal, topic) == matches(prefixes, topic)
    for p in minimal:
        assert not any(q != p and p.startswith(q) for q in minimal)
