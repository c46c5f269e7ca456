"""The web console as a user sees it: chromium against ``databus console`` and a real
``databus broker``, messages produced and consumed by confluent-kafka (a real Kafka client).

Set DATABUS_CONSOLE_SCREENSHOTS=DIR to also keep a screenshot of every page in DIR (the
pictures of docs/console.md are made so: see docs/console.md).
"""

from __future__ import annotations

import json
from urllib.parse import quote

import msgpack
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from databus_plugins.index.store import IndexStore

from tests.console.conftest import ConsoleProcess, databus, shoot
from tests.helpers.broker import BrokerProcess

pytestmark = pytest.mark.timeout(120)

TOPIC = "console-orders"
GROUP = "console-billing"


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    root = tmp_path_factory.mktemp("broker")
    with BrokerProcess(root, options={"group.initial.rebalance.delay.ms": 0,
                                      "num.partitions": 1}) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 2)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        # A JSON value with a key and a header, a msgpack value, and bytes that are neither.
        producer.produce(TOPIC, json.dumps({"order": 42, "items": ["tea"]}).encode(),
                         key=b"user-7", headers=[("source", b"web")], partition=0)
        producer.produce(TOPIC, msgpack.packb({"user": "ann", "n": 7}), partition=0)
        producer.produce(TOPIC, b"\x00\xff\x10\x80", partition=1)
        assert producer.flush(30) == 0
        yield broker


@pytest.fixture(scope="module")
def consoles(kafka, tmp_path_factory):
    """Two ``databus console`` processes, started together: one with a sidecar.yaml, one
    read-only with --bootstrap."""
    tmp = tmp_path_factory.mktemp("console")
    # What the status page reads: an index with a sink; its database holds the entry its
    # builder (tests/sinks/test_index.py) would have written for the JSON message.
    (tmp / "sidecar.yaml").write_text(
        f"clusters:\n  main:\n    bootstrap.servers: {kafka.bootstrap}\n"
        f"indexes:\n  orders:\n    topics: [{TOPIC}]\n    fields: {{order: order}}\n"
        f"    path: {tmp}/indexes\n"
        f"sinks:\n  archive:\n    plugin: parquet\n    topics: [{TOPIC}]\n"
        f"    config: {{path: {tmp}/parquet}}\n")
    (tmp / "indexes").mkdir()
    store = IndexStore(str(tmp / "indexes" / "orders.db"))
    store.add((TOPIC, 0), 0, 2, {"order": [("42", 1, 0)]}, {})
    store.add((TOPIC, 1), 0, 1, {}, {})
    store.close()
    processes = [
        ConsoleProcess(tmp, "-c", str(tmp / "sidecar.yaml"), "--sample-interval-ms", "300"),
        ConsoleProcess(tmp_path_factory.mktemp("ro-console"), "--bootstrap", kafka.bootstrap,
                       "--read-only"),
    ]
    try:
        yield [process.wait().url for process in processes]
    finally:
        for process in processes:
            process.close()


@pytest.fixture(scope="module")
def console(consoles):
    return consoles[0]


@pytest.fixture(scope="module")
def read_only_console(consoles):
    return consoles[1]


def topics_list(kafka) -> list[str]:
    """`databus topics list`, as a user checks."""
    done = databus("topics", "list", "--bootstrap-server", kafka.bootstrap)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def topic_names(kafka) -> set[str]:
    """The same question through librdkafka (no process start)."""
    return set(AdminClient({"bootstrap.servers": kafka.bootstrap}).list_topics(timeout=30).topics)


def test_message_browser_shows_produced_messages(page, console):
    page.goto(f"{console}/topics/{TOPIC}")
    # Each partition's size on disk (DescribeLogDirs): bytes, not "-".
    sizes = page.locator("#partitions tr td:nth-child(7)").all_inner_texts()
    assert len(sizes) == 2 and all(s.endswith(" B") and s != "0 B" for s in sizes), sizes
    # The newest-first list loads by itself (htmx, on load).
    page.wait_for_selector("#messages tr.message")
    rows = page.locator("#messages tr.message")
    assert rows.count() == 3
    text = page.inner_text("#messages")
    assert '"order": 42' in text and '"tea"' in text  # JSON, pretty-printed
    assert "user-7" in text and "source" in text and "web" in text  # key and header
    assert '"user": "ann"' in text  # msgpack, decoded
    assert "00 ff 10 80" in text  # binary, as hex
    kinds = page.locator("#messages tr.message td:nth-child(5) .badge").all_inner_texts()
    assert sorted(kinds) == ["hex", "json", "msgpack"]
    shoot(page, "topic")

    # By offset: partition 0 from offset 1 is the msgpack message alone.
    page.select_option("#browse select[name=mode]", "offset")
    page.select_option("#browse select[name=partition]", "0")
    page.fill("#browse input[name=offset]", "1")
    page.click("#browse button[type=submit]")
    page.wait_for_function(
        "document.querySelectorAll('#messages tr.message').length == 1")
    assert '"user": "ann"' in page.inner_text("#messages")
    assert page.errors == []


def test_produce_form_asks_then_sends(page, console):
    page.goto(f"{console}/topics/{TOPIC}")
    page.select_option("#produce select[name=partition]", "1")
    page.fill("#produce input[name=key]", "k-console")
    page.fill("#produce textarea[name=value]", '{"sent": "from the console"}')
    page.click("#produce button[type=submit]")
    page.wait_for_selector("#confirm")
    assert "Produce a message?" in page.inner_text("h1")
    page.click("#confirm")
    page.wait_for_selector(".done")
    assert "produced to partition 1 at offset 1" in page.inner_text(".done")
    page.wait_for_selector("#messages tr.message")
    first = page.locator("#messages tr.message").first.inner_text()
    assert '"sent": "from the console"' in first and "k-console" in first
    assert page.errors == []


def test_create_topic_from_the_ui_shows_in_topics_list(page, console, kafka):
    page.goto(console)
    shoot(page, "cluster")
    page.fill("#create-topic input[name=name]", "made-in-the-browser")
    page.fill("#create-topic input[name=partitions]", "3")
    page.click("#create-topic button[type=submit]")
    page.wait_for_selector("#confirm")
    assert "create topic 'made-in-the-browser' with 3 partition(s)" in page.inner_text("main")
    # The first step only asked.
    assert "made-in-the-browser" not in topic_names(kafka)
    page.click("#confirm")
    page.wait_for_selector("#partitions")
    assert page.inner_text("h1") == "Topic made-in-the-browser"
    assert page.locator("#partitions tr").count() == 1 + 3
    assert "made-in-the-browser" in topics_list(kafka)
    assert page.errors == []


def test_internal_topics_are_marked_and_hidden_behind_a_switch(page, console, kafka):
    """databus's own topics (delay levels, half messages), Confluent's _schemas and Kafka's
    __consumer_offsets are not listed by default; the switch shows them, marked, with no
    Delete button; ordinary topics keep theirs."""
    internal = ["databus-delay-1s", "databus-txn-half", "_schemas"]
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for future in admin.create_topics([NewTopic(name, 1) for name in internal]).values():
        future.result(30)
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "console-internal"})
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 1)], asynchronous=False)
    consumer.close()
    kafkas = {name for name in topic_names(kafka) if name.startswith("__")}
    assert "__consumer_offsets" in kafkas
    internal += sorted(kafkas)  # (and __share_group_state, if the broker made it)

    def listed() -> dict[str, str]:
        rows = page.locator("#topics tr").all()[1:]
        return {row.locator("td").first.locator("a").inner_text(): row.inner_text()
                for row in rows}

    page.goto(console)
    shown = listed()
    assert TOPIC in shown and not set(internal) & set(shown), shown
    assert page.locator("#topics tr", has_text=TOPIC).locator("button",
                                                              has_text="delete").count() == 1
    switch = page.locator("#show-internal")
    assert f"show {len(internal)} internal topic" in switch.inner_text()
    switch.click()
    page.wait_for_url("**/?internal=1")
    shown = listed()
    assert set(internal) <= set(shown) and TOPIC in shown, shown
    for name in internal:
        row = page.locator("#topics tr").filter(
            has=page.locator(f'a[href="/topics/{quote(name, safe="")}"]'))
        assert "internal" in row.locator(".badge").all_inner_texts(), name
        assert row.locator("button").count() == 0, name
    assert "internal" not in page.locator("#topics tr", has_text=TOPIC).inner_text()
    # The list refreshes itself (htmx, every 5 s) with the switch kept.
    assert page.get_attribute("#topics", "hx-get") == "/?internal=1"
    page.locator("#show-internal").click()
    page.wait_for_url(console.rstrip("/") + "/")
    assert not set(internal) & set(listed())
    assert page.errors == []


def test_lag_chart_moves_while_a_consumer_lags_then_reset(page, console, kafka):
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe([TOPIC])
        message = None
        while message is None:
            message = consumer.poll(1.0)
        assert message.error() is None
        consumer.commit(message, asynchronous=False)
        # It stays a member (librdkafka heartbeats in the background) and reads no more.
        page.goto(f"{console}/groups/{GROUP}")
        page.wait_for_selector("#members td:has-text('rdkafka')")
        before = int(page.inner_text("#total-lag"))
        # The chart has sampled the lag as it is now before the consumer falls behind.
        page.wait_for_function(
            "(n) => document.querySelector('#lag-chart').textContent.includes('now ' + n + ' ·')",
            arg=before)
        producer = Producer({"bootstrap.servers": kafka.bootstrap})
        for n in range(10):
            producer.produce(TOPIC, f"more {n}".encode(), partition=message.partition())
        assert producer.flush(30) == 0
        # The fragment reloads itself; the chart's latest sample reaches the new lag.
        page.wait_for_function(
            "(n) => document.querySelector('#lag-chart').textContent.includes('now ' + n + ' ·')",
            arg=before + 10)
        assert int(page.inner_text("#total-lag")) == before + 10
        points = page.get_attribute("#lag-chart polyline", "points").split()
        heights = {p.split(",")[1] for p in points}
        assert len(heights) > 1, points  # the line rose: samples at the old and new lag
        shoot(page, "group")
    finally:
        consumer.close()

    # Now that the group has no members its offsets may be reset: to earliest, confirmed.
    page.goto(f"{console}/groups/{GROUP}")
    page.wait_for_selector("#state:has-text('Empty')")
    page.select_option("#reset select[name=target]", "earliest")
    page.click("#reset button[type=submit]")
    page.wait_for_selector("#plan")
    plan = page.inner_text("#plan")
    assert "new offset" in plan and str(message.offset() + 1) in plan
    page.click("#confirm")
    page.wait_for_selector(".done")
    assert "committed" in page.inner_text(".done")
    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": GROUP})
    try:
        committed = reader.committed([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)], 30)
    finally:
        reader.close()
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 0), (1, 0)]
    assert page.errors == []


def test_every_page_loads_without_console_errors(page, console, kafka):
    # The group page needs the group: committed offsets make it exist whatever ran before.
    committer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": GROUP})
    try:
        committer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
    finally:
        committer.close()
    for path, heading in [("/", "Cluster"), (f"/topics/{TOPIC}", f"Topic {TOPIC}"),
                          ("/groups", "Consumer groups"), (f"/groups/{GROUP}", f"Group {GROUP}"),
                          ("/status", "Mirrors, indexes, sinks")]:
        page.goto(console + path)
        page.wait_for_load_state("networkidle")
        assert page.inner_text("h1") == heading, path
    indexes = page.inner_text("#status-indexes")
    assert "orders" in indexes and "MB" in indexes
    assert page.locator("#chart-indexes-orders polyline").count() == 1  # its lag, sampled
    sinks = page.inner_text("#status-sinks")
    assert "archive" in sinks and "index.orders" in sinks  # an index's builder is a sink
    # The index search box returns the message itself, fetched from the broker.
    page.fill("#search-orders input[name=value]", "42")
    page.click("#search-orders button[type=submit]")
    page.wait_for_selector("#found-orders tr.message")
    assert '"order": 42' in page.inner_text("#found-orders")
    shoot(page, "status")
    page.goto(f"{console}/groups")
    shoot(page, "groups")
    assert page.errors == []


def test_read_only_console_refuses_every_action(page, read_only_console, kafka):
    page.goto(read_only_console)
    assert page.locator(".badge.ro").inner_text() == "read-only"
    assert page.locator("form").count() == 0
    page.goto(f"{read_only_console}/topics/{TOPIC}")
    assert page.locator("#produce").count() == 0
    # A hand-made confirmed request (the form is not even shown) is refused all the same.
    for action, fields in [("create-topic", {"name": "never-made"}),
                           ("delete-topic", {"name": TOPIC}),
                           ("produce", {"topic": TOPIC, "value": "x"}),
                           ("reset-offsets", {"group": GROUP, "target": "earliest"})]:
        status = page.evaluate(
            """async ([action, fields]) => {
                const body = new URLSearchParams({...fields, confirmed: "yes"});
                return (await fetch("/actions/" + action, {method: "POST", body})).status;
            }""", [action, fields])
        assert status == 403, action
    names = topic_names(kafka)
    assert "never-made" not in names and TOPIC in names
    # The refusals are answers, not page errors; nothing else went wrong.
    assert [e for e in page.errors if "403" not in e] == []


def test_cross_site_post_is_refused(console):
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"{console}/actions/create-topic", data=b"name=from-elsewhere&confirmed=yes",
        headers={"Origin": "http://evil.example", "Content-Type":
                 "application/x-www-form-urlencoded"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 403
