"""HOST:PORT parsing: the one set of rules every listener and bootstrap list goes through."""

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from databus.protocol.addresses import format_host_port, parse_host_port, parse_host_port_list


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("localhost:9092", ("localhost", 9092)),
        ("10.0.0.7:1", ("10.0.0.7", 1)),
        ("kafka-0.kafka_svc.local:65535", ("kafka-0.kafka_svc.local", 65535)),
        ("[::1]:9092", ("::1", 9092)),
        ("[fe80::1%eth0]:9092", ("fe80::1%eth0", 9092)),
        ("PLAINTEXT://broker:9092", ("broker", 9092)),
        ("SSL://[::1]:9093", ("::1", 9093)),
        ("INTERNAL_1://h:9", ("h", 9)),
        (":9092", ("", 9092)),  # Kafka: every interface (listener) or this host (client)
        ("  h:7  ", ("h", 7)),
    ],
)
def test_accepted(text, expected):
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("nohost", "no port"),
        ("h:", "no port"),
        ("h:x1", "port 'x1' is not a number"),
        ("h:-1", "port '-1' is not a number"),
        ("h:0", r"port 0 is not in 1\.\.65535"),
        ("h:65536", r"port 65536 is not in 1\.\.65535"),
        ("::1:9092", r"an IPv6 address needs brackets, as in \[::1\]:9092"),
        ("::1", r"an IPv6 address needs brackets, as in \[::1\]:9092"),
        ("[127.0.0.1]:9092", r"\[127\.0\.0\.1\] is not an IPv6 address"),
        ("[::1]9092", "unexpected '9092' after ]"),
        ("my host:9092", "'my host' is not a host name or address"),
        ("http//x://h:1", r"the listener name before :// may only have letters, digits and _\.\+-"),
        ("h:１２", "port '１２' is not a number"),  # fullwidth digits: isdigit() but not a port
    ],
)
def test_refused_with_the_value_and_the_reason(text, reason):
    with pytest.raises(ValueError, match=rf"^address must be HOST:PORT, got {re.escape(repr(text))}: {reason}$"):
        parse_host_port(text)


def test_what_names_the_setting():
    with pytest.raises(ValueError, match=r"^listeners must be HOST:PORT, got 'x'"):
        parse_host_port("x", what="listeners")


def test_port_zero_only_where_a_listener_may_bind_any_port():
    assert parse_host_port("127.0.0.1:0", allow_port_zero=True) == ("127.0.0.1", 0)
    with pytest.raises(ValueError, match=r"port 0 is not in 1\.\.65535"):
        parse_host_port("127.0.0.1:0")
    with pytest.raises(ValueError, match=r"port 65536 is not in 0\.\.65535"):
        parse_host_port("h:65536", allow_port_zero=True)


def test_default_port_fills_a_missing_port_only():
    assert parse_host_port("h", default_port=9092) == ("h", 9092)
    assert parse_host_port("[::1]", default_port=9092) == ("::1", 9092)
    assert parse_host_port("h:1", default_port=9092) == ("h", 1)
    with pytest.raises(ValueError, match="no port"):
        parse_host_port("h:", default_port=9092)


def test_require_host():
    with pytest.raises(ValueError, match="no host"):
        parse_host_port(":9092", require_host=True)
    with pytest.raises(ValueError, match="no host"):
        parse_host_port("PLAINTEXT://:9092", require_host=True)


def test_lists_are_comma_separated_or_sequences():
    assert parse_host_port_list("a:1, PLAINTEXT://b:2,,") == [("a", 1), ("b", 2)]
    assert parse_host_port_list(["[::1]:9092", " c:3 "]) == [("::1", 9092), ("c", 3)]
    with pytest.raises(ValueError, match=r"^bootstrap\.servers must be HOST:PORT, got 'b': no port$"):
        parse_host_port_list("a:1,b")
    with pytest.raises(ValueError, match=r"^bootstrap\.servers is empty$"):
        parse_host_port_list(" , ")


hostnames = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9\-._]{0,30}", fullmatch=True)
hosts = st.one_of(
    hostnames,
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(str),
)
schemes = st.sampled_from(["", "PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "EXTERNAL_2://"])


@given(host=hosts, port=st.integers(1, 65535), scheme=schemes)
def test_format_then_parse_round_trips(host, port, scheme):
    assert parse_host_port(scheme + format_host_port(host, port)) == (host, port)


@given(host=st.ip_addresses(v=6).map(str), port=st.integers(0, 65535))
def test_bare_ipv6_is_always_refused(host, port):
    with pytest.raises(ValueError, match="needs brackets"):
        parse_host_port(f"{host}:{port}", allow_port_zero=True)


@given(text=st.text(max_size=40))
def test_any_text_parses_or_raises_value_error(text):
    try:
        host, port = parse_host_port(text, allow_port_zero=True)
    except ValueError as exc:
        assert repr(text.strip()) in str(exc)
    else:
        assert 0 <= port <= 65535
        assert parse_host_port(format_host_port(host, port), allow_port_zero=True) == (host, port)
