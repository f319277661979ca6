"""Result files shared by the benchmark scripts: rows as CSV and as a Markdown table.

Imported by the scripts as a sibling module (``python benchmarks/<script>.py`` puts
this folder on ``sys.path``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path


def write_csv(path: Path, rows: Sequence[Mapping]) -> None:
    """Write ``rows`` to ``path``: one column per key, in first-seen order (a row
    without a key leaves its cell empty)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(rows: Sequence[Mapping]) -> list[str]:
    """The lines of a Markdown table with one column per key of ``rows``, in first-seen
    order (a row without a key leaves its cell empty, as in :func:`write_csv`)."""
    header = list(dict.fromkeys(key for row in rows for key in row))
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(str(row.get(h, "")) for h in header) + " |" for row in rows),
    ]


def write_tables(directory: Path, name: str, intro: str, rows: Sequence[Mapping]) -> None:
    """Write ``<name>.csv`` and ``<name>.md`` (``intro``, a blank line, the table)."""
    write_csv(directory / f"{name}.csv", rows)
    (directory / f"{name}.md").write_text("\n".join([intro, "", *markdown_table(rows), ""]))
