"""`python cli.py 100 c f` prints `100 °C = 212 °F`."""

from __future__ import annotations

import argparse
import sys

from convert import CONVERSIONS, format_quantity


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="convert")
    parser.add_argument("value", type=float, help="the quantity to convert")
    parser.add_argument("source", help="its unit: c, f, km or mi")
    parser.add_argument("target", help="the unit to convert it to")
    args = parser.parse_args(argv)
    convert = CONVERSIONS.get((args.source, args.target))
    if convert is None:
        parser.error(f"cannot convert {args.source} to {args.target}")
    result = convert(args.value)
    source = format_quantity(args.value, args.source)
    print(f"{source} = {format_quantity(result, args.target)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
