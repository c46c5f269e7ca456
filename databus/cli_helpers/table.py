"""The one place the CLI prints tables: a rich table on a terminal wide enough for it, plain
aligned columns everywhere else.

* The console writes to a terminal and the table's natural width fits in it: a rich table
  whose columns never wrap, fold or truncate (each column is as wide as its widest cell or
  header), so ``PARTITION`` never becomes ``PARTITI…``.
* Otherwise (a pipe, a file, or a terminal narrower than the table): plain columns as Kafka's
  kafka-consumer-groups.sh prints them: headers in full, every column padded to its widest
  cell (or its ``min_width``, which is how Kafka's fixed widths are reproduced), one space
  between columns, no box characters, so ``awk '{print $6}'`` works.

rich's environment knobs choose and size the output: ``COLUMNS`` sets the width,
``TTY_COMPATIBLE=0`` forces plain columns on a terminal and ``TTY_COMPATIBLE=1`` (or
``FORCE_COLOR``) a rich table in a pipe when it fits ``COLUMNS`` (80 by default).

A cell is a string (other values go through ``str``), or a list of strings: several lines in
a rich cell, joined with commas in plain columns so that a row stays one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

# Wide enough for any table: the width at which a table is measured at its natural size.
_UNLIMITED = 1_000_000


@dataclass(frozen=True)
class Column:
    header: str
    justify: Literal["left", "right"] = "left"
    min_width: int = 0  # plain columns: pad to at least this (Kafka's %-15s)
    style: str | None = None  # rich only


def console(*, stderr: bool = False):
    """A rich Console for a command's own lines; soft_wrap so long lines are never cut."""
    from rich.console import Console

    return Console(stderr=stderr, soft_wrap=True)


def print_table(columns: Sequence[Column | str], rows: Iterable[Sequence], *,
                title: str | None = None, grid: bool = False, to=None) -> None:
    """Print a table on ``to`` (a rich Console; by default one on stdout): rich if it fits a
    terminal, plain columns otherwise (see the module docstring).  ``grid``: no header and
    no borders (a key/value listing); the headers then only name the columns."""
    out = to if to is not None else console()
    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    lists = [list(row) for row in rows]
    if out.is_terminal:
        table = _rich_table(cols, lists, title, grid)
        if natural_width(out, table) <= out.width:
            out.print(table, crop=False)
            return
    out.out(render_plain(cols, lists, title=title, grid=grid),
            highlight=False)


def natural_width(out, table) -> int:
    """The width ``table`` takes when nothing is wrapped or truncated."""
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update_width(_UNLIMITED), table).maximum


def render_plain(columns: Sequence[Column | str], rows: Iterable[Sequence], *,
                 title: str | None = None, grid: bool = False) -> str:
    """Kafka-style columns: each padded to its widest cell (at least ``min_width``), one
    space apart (two in a grid, whose cells are phrases), the last one unpadded; the title,
    if any, on a line above."""
    from rich.cells import cell_len

    cols = [c if isinstance(c, Column) else Column(c) for c in columns]
    lines = [[_plain_cell(cell) for cell in row] for row in rows]
    if not grid:
        lines.insert(0, [c.header for c in cols])
    for line in lines:
        if len(line) != len(cols):
            raise ValueError(f"a row has {len(line)} cells for {len(cols)} columns: {line}")
    widths = [max([c.min_width, *(cell_len(line[i]) for line in lines)])
              for i, c in enumerate(cols)]

    def pad(text: str, column: Column, width: int) -> str:
        fill = " " * (width - cell_len(text))
        return fill + text if column.justify == "right" else text + fill

    gap = "  " if grid else " "
    out = [title] if title else []
    for line in lines:
        out.append(gap.join(pad(text, c, w)
                            for text, c, w in zip(line, cols, widths)).rstrip())
    return "\n".join(out)


def _plain_cell(cell) -> str:
    if isinstance(cell, (list, tuple)):
        return ",".join(str(part) for part in cell)
    return str(cell)


def _rich_cell(cell) -> str:
    from rich.markup import escape

    if isinstance(cell, (list, tuple)):
        return "\n".join(escape(str(part)) for part in cell)
    return escape(str(cell))


def _rich_table(cols: list[Column], rows: list[list], title, grid: bool):
    from rich.markup import escape
    from rich.table import Table

    table = Table.grid(padding=(0, 2)) if grid else Table()
    table.title = escape(title) if title else None
    for c in cols:
        # no_wrap: a column is as wide as its widest line, so print_table can tell whether
        # the table fits before choosing it; it never folds or ellipsizes when it does.
        table.add_column(escape(c.header), justify=c.justify, style=c.style, no_wrap=True)
    for row in rows:
        table.add_row(*(_rich_cell(cell) for cell in row))
    return table
