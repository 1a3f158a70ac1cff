"""`python cli.py --to ops@example.org "disk full"`: sends an alert through the relay."""

from __future__ import annotations

import argparse
import sys

from config import load_config
from mailer import Mailer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Send an alert through the mail relay.")
    parser.add_argument("subject")
    parser.add_argument("--to", required=True)
    parser.add_argument("--config", help="a JSON settings file")
    parser.add_argument("--relay-host", help="overrides relay_host from the settings")
    parser.add_argument("--dry-run", action="store_true", help="print instead of sending")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    if args.relay_host:
        config["relay_host"] = args.relay_host
    mailer = Mailer(config)
    message = mailer.compose(args.to, args.subject, args.subject)
    if not args.dry_run:
        print("sending is not configured on this machine; use --dry-run", file=sys.stderr)
        return 1
    print(mailer.describe(message))
    return 0


if __name__ == "__main__":
    sys.exit(main())
