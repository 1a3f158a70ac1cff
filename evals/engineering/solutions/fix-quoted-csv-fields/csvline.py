"""Splits one line of the bank's CSV export into its fields."""

from __future__ import annotations


def split_fields(line: str, delimiter: str = ",") -> list[str]:
    """The fields of ``line``, with surrounding whitespace and line endings removed. A field
    in double quotes may hold the delimiter; a doubled quote inside it stands for one quote."""
    fields: list[str] = []
    current: list[str] = []
    quoted = False
    text = line.rstrip("\r\n")
    i = 0
    while i < len(text):
        ch = text[i]
        if quoted:
            if ch == '"' and text[i + 1 : i + 2] == '"':
                current.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                current.append(ch)
        elif ch == '"' and not "".join(current).strip():
            current = []
            quoted = True
        elif ch == delimiter:
            fields.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    fields.append("".join(current).strip())
    return fields
