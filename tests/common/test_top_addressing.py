"""The address server's URL and answer, as RocketMQ's clients form and read them (no sockets)."""

from __future__ import annotations

import pytest

from tidalmq.common import top_addressing as ta


def test_url_adds_port_8080_unless_the_domain_has_one() -> None:
    assert ta.ws_addr("jmenv.tbsite.net") == "http://jmenv.tbsite.net:8080/rocketmq/nsaddr"
    assert ta.ws_addr("10.0.0.5:9000", "prod") == "http://10.0.0.5:9000/rocketmq/prod"
    assert ta.ws_addr("h", "nsaddr", "unit1") == "http://h:8080/rocketmq/nsaddr-unit1?nofix=1"


@pytest.mark.parametrize("domain", ["", "h/x", "h?x", "a@b", "h x"])
def test_illegal_domain_refused(domain: str) -> None:
    with pytest.raises(ta.AddressServerError):
        ta.ws_addr(domain)


def test_split_url() -> None:
    assert ta.split_url("http://127.0.0.1:18080/rocketmq/nsaddr") == ("127.0.0.1", 18080, "/rocketmq/nsaddr")
    assert ta.split_url("http://h/rocketmq/x") == ("h", 8080, "/rocketmq/x")
    for bad in ("https://h/x", "http://:80/x", "http://h:0/x", "http://h:99999/x", "http://h:²/x"):
        with pytest.raises(ta.AddressServerError):
            ta.split_url(bad)


def test_answer_first_line_trimmed_and_split() -> None:
    assert ta.parse_answer(b"  10.0.0.1:9876;10.0.0.2:9876 \r\nignored") == ["10.0.0.1:9876", "10.0.0.2:9876"]
    assert ta.parse_answer(b"a:1;;b:2;\n") == ["a:1", "b:2"]
    assert ta.parse_answer(ta.answer(["x:1", "y:2"])) == ["x:1", "y:2"]


@pytest.mark.parametrize("body", [b"", b"\n", b"no-port", b"h:70000", b"\xff\xfe", b"a:1;b c:2",
                                  b"h:1;" * 20000])
def test_unusable_answer_refused(body: bytes) -> None:
    with pytest.raises(ta.AddressServerError):
        ta.parse_answer(body)


def test_environment_names_are_rocketmqs() -> None:
    assert ta.configured_addr({"NAMESRV_ADDR": "a:1"}) == "a:1"
    assert ta.configured_addr({"rocketmq.namesrv.addr": "b:2", "NAMESRV_ADDR": "a:1"}) == "b:2"
    assert ta.configured_ws_addr(env={}) is None  # never jmenv.tbsite.net unasked
    assert ta.configured_ws_addr(env={"rocketmq.namesrv.domain": "h:1", "rocketmq.namesrv.domain.subgroup": "g"}) \
        == "http://h:1/rocketmq/g"
