"""The ``verified-attn`` command (also ``python -m verified_attn``).

>>> main(["claims", "-v"])  # doctest: +ELLIPSIS
thm-4.1/query-count (Thm 4.1)
  A single head is recovered exactly from d^2 + d queries of length <= 2.
  checked: checked on instances, at a chosen size (default d = 8; ...
0
>>> main(["check", "no-such-claim"])  # the message goes to stderr
2

Subcommands: ``check`` runs the claims, ``claims`` lists them (``-v``: in full, with how
each is checked), ``learn KIND`` runs a learner on a seeded random instance and writes a
certificate, ``verify-certificate`` re-checks one (``-``: from standard input).
Exit status: 0 success, 1 a claim or certificate failed (or a learner refused), 2 bad
usage (the usage line, then ``verified-attn: error: ...``), 130 interrupted (Ctrl-C).
Tables fit the terminal's width (``COLUMNS`` if set). A model kind for ``learn`` is one
entry in :data:`LEARN_KINDS`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verified_attn.cli.common import (
    EXIT_FAIL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    PROG,
    UsageError,
)
from verified_attn.cli.kinds import (
    LEARN_KINDS,
    LearnKind,
    LearnOutcome,
    random_single_head,
)
from verified_attn.errors import InvalidArgument, VerifiedAttnError

__all__ = ["LEARN_KINDS", "LearnKind", "LearnOutcome", "main", "random_single_head"]


def _attach_negative_numbers(argv: list[str]) -> list[str]:
    """``--opt -1e-3`` becomes ``--opt=-1e-3``: argparse would read ``-1e-3`` as an option.

    >>> _attach_negative_numbers(["learn", "noisy", "--tolerance", "-1e-3", "--d", "2"])
    ['learn', 'noisy', '--tolerance=-1e-3', '--d', '2']
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if token.startswith("--") and "=" not in token and nxt is not None and _is_negative(nxt):
            out.append(f"{token}={nxt}")
            i += 2
            continue
        out.append(token)
        i += 1
    return out


def _is_negative(text: str) -> bool:
    if not text.startswith("-"):
        return False
    try:
        float(text)
    except ValueError:
        return False
    return True


def _usage_error(exc: UsageError | InvalidArgument, usage: str | None) -> int:
    """As argparse reports it: the usage line, then ``verified-attn: error: ...``."""
    if usage:
        print(usage.rstrip(), file=sys.stderr)
    print(f"{PROG}: error: {exc}", file=sys.stderr)
    return EXIT_USAGE


def _run(argv: list[str]) -> int:
    from verified_attn.cli.commands import COMMANDS
    from verified_attn.cli.parser import build_parser

    parser = build_parser()
    usage = parser.format_usage()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help: argparse printed and wants out
            return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        usage = args.parser.format_usage()
        return COMMANDS[args.command](args)
    except UsageError as exc:
        return _usage_error(exc, exc.usage or usage)
    except InvalidArgument as exc:
        return _usage_error(exc, usage)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad usage,
    130 interrupted)."""
    argv = _attach_negative_numbers(list(sys.argv[1:] if argv is None else argv))
    if argv[:1] == ["--version"]:  # before the parser, which imports the heavy modules
        from verified_attn import __version__

        print(f"{PROG} {__version__}")
        return 0
    try:
        return _run(argv)
    except KeyboardInterrupt:
        print(f"\n{PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except VerifiedAttnError as exc:
        print(f"{PROG}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
