"""databus.cli_helpers.table: the one way the CLI prints tables (rich when it fits a terminal,
Kafka's plain columns otherwise); the commands using it are tested as processes in
tests/groups/test_cli.py."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from databus.cli_helpers.table import Column, print_table, render_plain

COLUMNS = [Column("GROUP", min_width=15), Column("TOPIC", min_width=15),
           Column("PARTITION", min_width=10), Column("CURRENT-OFFSET", min_width=15),
           Column("LOG-END-OFFSET", min_width=15), Column("LAG", min_width=15),
           Column("CONSUMER-ID", min_width=15), Column("HOST", min_width=15),
           Column("CLIENT-ID")]
ROWS = [("billing", "orders", "0", "2", "5", "3", "rdkafka-1f0e", "/127.0.0.1", "rdkafka"),
        ("billing", "orders", "1", "5", "5", "0", "-", "-", "-")]

# Kafka's kafka-consumer-groups.sh --describe for the same rows, byte for byte (its format
# "%-15s %-15s %-10s %-15s %-15s %-15s %-15s %-15s %s"), minus its leading empty line.
KAFKA_DESCRIBE = (
    "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG       "
    "      CONSUMER-ID     HOST            CLIENT-ID\n"
    "billing         orders          0          2               5               3         "
    "      rdkafka-1f0e    /127.0.0.1      rdkafka\n"
    "billing         orders          1          5               5               0         "
    "      -               -               -"
)


def printed(console_width: int, *, terminal: bool, **kw) -> str:
    out = io.StringIO()
    console = Console(file=out, width=console_width, force_terminal=terminal,
                      color_system=None)
    print_table(COLUMNS, ROWS, to=console, **kw)
    return out.getvalue()


def test_plain_columns_are_kafkas_bytes():
    assert render_plain(COLUMNS, ROWS) == KAFKA_DESCRIBE


def test_not_a_terminal_prints_plain_columns_even_when_wide():
    assert printed(300, terminal=False) == KAFKA_DESCRIBE + "\n"


def test_a_terminal_too_narrow_for_the_table_gets_plain_columns_not_cut_headers():
    text = printed(80, terminal=True)
    assert text == KAFKA_DESCRIBE + "\n"
    assert "…" not in text


def test_a_terminal_wide_enough_gets_a_rich_table_with_every_header_whole():
    text = printed(160, terminal=True)
    lines = text.splitlines()
    assert "…" not in text and all(len(line) <= 160 for line in lines)
    header = next(line for line in lines if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == [c.header for c in COLUMNS]
    rows = [tuple(c.strip() for c in line.strip("│").split("│"))
            for line in lines if line.startswith("│")]
    assert rows == ROWS


def test_plain_justify_titles_lists_and_wide_characters():
    columns = [Column("name"), Column("µs", justify="right"), Column("hooks")]
    rows = [("field", "0.25", ["route", "partitioner"]), ("表", "12.50", [])]
    assert render_plain(columns, rows, title="costs") == (
        "costs\n"
        "name     µs hooks\n"
        "field  0.25 route,partitioner\n"
        "表    12.50"
    )


def test_grid_has_no_header_and_two_spaces_between_phrases():
    assert render_plain(["what", "where"], [("metrics", "http://h:1/metrics"),
                                            ("apps connect to", "/run/db.sock")],
                        grid=True) == (
        "metrics          http://h:1/metrics\n"
        "apps connect to  /run/db.sock"
    )


def test_rich_cells_are_text_not_markup():
    out = io.StringIO()
    print_table(["GROUP"], [("[bold]g[/bold]",)],
                to=Console(file=out, width=80, force_terminal=True, color_system=None))
    assert "[bold]g[/bold]" in out.getvalue()


def test_a_row_of_the_wrong_length_is_named():
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        render_plain(["a", "b", "c"], [("1", "2")])
