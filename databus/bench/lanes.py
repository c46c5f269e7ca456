"""``databus bench lanes``: what the ``lanes`` route plugin costs per message.

Times the plugin's route function alone (no sockets, no broker; each figure includes
making the message object, shown on its own in the first row), for messages without a lane
header, with a live lane's header (the topic already made) and with an unknown lane's
(policy main).  Messages without any headers never reach it (the sidecar's fast path), so
that case is not timed.  Best of several rounds with the garbage collector paused, as
``databus bench records`` measures.
"""

from __future__ import annotations


def add_arguments(parser) -> None:
    parser.add_argument("--messages", type=int, default=200_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=7, help="rounds; the best is reported")


def run(args) -> int:
    from databus_plugins.lanes.route import make_route
    from databus_plugins.lanes.service import LaneService

    from databus.cli_helpers.table import Column, print_table
    from databus.hookspecs import RoutedMessage
    from databus.lanes import model
    from databus.lanes.config import LanesConfig

    from .common import best_seconds

    settings = LanesConfig()
    service = LaneService("127.0.0.1:9", settings)  # never started: the state is set here
    service.ready.set()
    forever = 2 ** 62
    service.registry.apply(model.lane_key("fx"),
                           model.encode(model.Lane("fx", "bench", 0, forever, forever)), 0)
    service.topics.add(model.lane_topic(settings.topic, "orders", "fx"))
    route = make_route(service, "orders", settings)
    n = args.messages
    rows = []

    def baseline():
        for _ in range(n):
            RoutedMessage("orders", "orders", None, b"v", (), None)

    base = best_seconds(baseline, args.rounds)
    rows.append(("(making the message object only)", f"{base / n * 1e9:.0f}", "-"))
    for label, headers in (
        ("other headers, no lane", [("trace-id", b"1"), ("source", b"web")]),
        ("live lane", [("trace-id", b"1"), (settings.header, b"fx")]),
        ("unknown lane (policy main)", [("trace-id", b"1"), (settings.header, b"nope")]),
    ):
        def one_round(headers=headers):
            for _ in range(n):
                route(RoutedMessage("orders", "orders", None, b"v", headers, None))

        total = best_seconds(one_round, args.rounds)
        rows.append((label, f"{total / n * 1e9:.0f}", f"{n / total:,.0f}"))
    print_table([Column("message"), Column("ns/message", "right"),
                 Column("messages/s", "right")], rows,
                title="lanes route function, per message")
    return 0
