"""``python -m server_app [--config FILE]``: the same as ``fedmor server``."""

import argparse
import sys

from server_app._cli import register


def main() -> int:
    """Parse ``server`` options and run."""
    parser = argparse.ArgumentParser(prog="python -m server_app")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["server", *sys.argv[1:]])
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
