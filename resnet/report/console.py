"""Tables for the terminal: the summary every run prints at its end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def format_table(rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> str:
    """A plain box table for the terminal: one row per dict, floats to 3 decimals, counts with
    thousands separators."""
    if not rows:
        return ""
    columns = list(columns or rows[0])

    def fmt(v) -> str:
        if isinstance(v, int) and not isinstance(v, bool):
            return f"{v:,}"  # 10,000 images, as "500 of 10,000" beside it
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 1e6 else f"{v:,.0f}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    head = "|" + "|".join(f" {c:<{w}} " for c, w in zip(columns, widths)) + "|"
    body = ["|" + "|".join(f" {v:>{w}} " for v, w in zip(row, widths)) + "|" for row in cells]
    return "\n".join([line, head, line, *body, line])


def summary(record: Mapping, columns: Mapping[str, str], footer: str) -> str:
    """A run's closing table: ``columns`` maps each heading to its key in ``record``."""
    row = {heading: record[key] for heading, key in columns.items()}
    return "\n" + format_table([row]) + "\n" + footer


def images_cell(n_images: int, skipped: int = 0, split: int | None = None) -> int | str:
    """The images a result was computed on, as a table shows them: the count alone for a whole set;
    ``3 of 7`` for part of a split (``val_images=N``: ``split`` is the whole); ``38 of 40: 2 unreadable``
    where files of the set could not be read (under ``max_unreadable``), and ``2 of 3 (of 7): 1
    unreadable`` for both."""
    if not skipped:
        return f"{n_images:,} of {split:,}" if split and split != n_images else n_images
    taken = n_images + skipped
    whole = f" (of {split:,})" if split and split != taken else ""
    return f"{n_images:,} of {taken:,}{whole}: {skipped:,} unreadable"
