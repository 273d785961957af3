"""``python -m client_app [--config FILE]``: the same as ``fedmor client``."""

import argparse
import sys

from client_app._cli import register


def main() -> int:
    """Parse ``client`` options and run."""
    parser = argparse.ArgumentParser(prog="python -m client_app")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["client", *sys.argv[1:]])
    return int(args.handler(args))


if __name__ == "__main__":
    raise SystemExit(main())
