"""Properties read straight from stored records, as the broker's filter sees them."""

from __future__ import annotations

import pytest

from tidalmq.common.message import decode_java_properties, java_property_reader
from tidalmq.common.record import encode_record
from tidalmq.filter import FilterCache, FilterSyntaxError, compile_sql92
from tidalmq.filter.properties import properties_bytes


def record(props: str | dict[str, str], *, v6: bool = False, body: bytes = b"payload") -> memoryview:
    host = bytes(range(16)) if v6 else b"\x7f\x00\x00\x01"
    return memoryview(bytes(encode_record(topic="T", queue_id=0, body=body, properties=props,
                                          born_host=host, store_host=host)))


@pytest.mark.parametrize("v6", [False, True])
def test_properties_section_with_ipv4_and_ipv6_hosts(v6: bool) -> None:
    rec = record({"TAGS": "TagA", "a": "5", "KEYS": "k"}, v6=v6, body=b"\x01\x02" * 100)
    raw = properties_bytes(rec)
    assert decode_java_properties(raw) == {"TAGS": "TagA", "a": "5", "KEYS": "k"}
    assert java_property_reader(["a", "TAGS", "b"])(raw) == {"a": "5", "TAGS": "TagA"}


def test_lookup_follows_javas_decoder() -> None:
    raw = b"xa\x011\x02a\x012\x02e\x01\x02v\x01p\x01q\x02a\x013\x02"
    read = java_property_reader(["a", "e", "v", "p"])
    # the last duplicate wins, "xa" is another name; an empty value is no value; the first \x01 splits
    # name and value, so "p" is no name
    assert read(raw) == {"a": "3", "v": "p\x01q"}
    assert decode_java_properties(raw) == {"xa": "1", "a": "3", "v": "p\x01q"}
    assert java_property_reader(["é"])("é\x01ü".encode()) == {"é": "ü"}


@pytest.mark.parametrize("n_props", [1, 6])  # per-name lookup, then whole-section decoding
def test_record_filter(n_props: int) -> None:
    names = [f"p{i}" for i in range(n_props)]
    expr = " AND ".join(f"{n} > 2" for n in names)
    f = compile_sql92(expr).record_filter
    assert f(0, record({n: "3" for n in names}))
    assert not f(0, record({n: "2" for n in names}))
    assert not f(0, record({}))
    assert not f(0, record({n: "x" for n in names}))  # evaluation error: no match


def test_constant_expressions_skip_the_record() -> None:
    assert compile_sql92("TRUE").record_filter(0, memoryview(b""))
    assert not compile_sql92("NULL").record_filter(0, memoryview(b""))


def test_cache_compiles_once_and_remembers_failures() -> None:
    cache = FilterCache(capacity=2)
    a = cache.get("SQL92", "a > 1")
    assert cache.get("SQL92", "a > 1") is a and cache.compiles == 1
    for _ in range(2):
        with pytest.raises(FilterSyntaxError):
            cache.get("SQL92", "a >")
    assert cache.compiles == 2
    cache.get("SQL92", "b > 1")  # evicts the least recently used ("a > 1")
    cache.get("SQL92", "a > 1")
    assert cache.compiles == 4 and len(cache) == 2
    with pytest.raises(FilterSyntaxError, match="not supported"):
        cache.get("BLOOM", "x")
