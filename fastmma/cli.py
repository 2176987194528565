"""The ``fastmma`` command line: ``conform``, ``gemm``, ``info``, ``explain``.

Errors of fastmma's own print as one line on stderr and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

from .errors import FastmmaError


def _cmd_conform(args) -> int:
    from .conform import run

    passed, failed = run(args.paths, limit=args.show)
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fastmma", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("conform", help="replay hardware recordings (golden format v1) and compare every bit")
    p.add_argument("paths", nargs="+", help="recording files or directories")
    p.add_argument("--show", type=int, default=8, metavar="N", help="mismatches to print per file (default 8)")
    p.set_defaults(func=_cmd_conform)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FastmmaError as exc:
        print(f"fastmma: error: {exc}", file=sys.stderr)
        return 2
