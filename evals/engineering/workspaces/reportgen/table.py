"""Plain-text tables: a header, a rule, and right-aligned numbers."""

from __future__ import annotations

from cells import format_cell


def render_table(header: list[str], rows: list[list[str]]) -> str:
    cells = [[format_cell(value) for value in row] for row in rows]
    widths = [max(len(text) for text in column) for column in zip(header, *cells)]
    lines = ["  ".join(name.ljust(width) for name, width in zip(header, widths))]
    lines.append("  ".join("-" * width for width in widths))
    for row in cells:
        lines.append(
            "  ".join(
                text.rjust(width) if text[:1].isdigit() else text.ljust(width)
                for text, width in zip(row, widths)
            ).rstrip()
        )
    return "\n".join(lines)
