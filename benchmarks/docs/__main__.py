"""`python -m benchmarks.docs [--write]`: see the package docstring."""

from __future__ import annotations

import argparse

from benchmarks.docs import __doc__ as about
from benchmarks.docs.sections import stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(about or "").split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the stale sections")
    args = parser.parse_args(argv)
    sections = write() if args.write else stale()
    for s in sections:
        print(f"{s.path}: {s.name} {'rewritten' if args.write else 'differs from its source'}")
    return 0 if args.write or not sections else 1


if __name__ == "__main__":
    raise SystemExit(main())
