"""What every part of the command line shares: exit statuses, the usage error, the
argument types, the parser class and "did you mean" suggestions.

>>> suggest("chek", ["check", "claims", "learn"])
"; did you mean 'check'?"
>>> suggest("zzz", ["check", "claims"])
''
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = [
    "EXIT_FAIL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROG",
    "Parser",
    "UsageError",
    "int_at_least",
    "int_list",
    "nonneg_int",
    "positive_float",
    "suggest",
    "write_text",
]

PROG = "verified-attn"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
#: 128 + SIGINT, as shells report a command stopped by Ctrl-C.
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """Bad command-line usage (exit status 2); ``usage`` is the usage line to print first.

    >>> UsageError("--rank must be <= --d", "usage: verified-attn learn low-rank ...").usage
    'usage: verified-attn learn low-rank ...'
    """

    def __init__(self, message: str, usage: str | None = None) -> None:
        super().__init__(message)
        self.usage = usage


def suggest(word: str, candidates: Iterable[str], *, n: int = 1) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``candidates`` (``n`` of them), else ``""``."""
    close = difflib.get_close_matches(word, list(candidates), n=n, cutoff=0.6)
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<word>[^']*)' \(choose from (?P<choices>.*)\)")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises :class:`UsageError` (with its usage line and a "did you
    mean" for a mistyped subcommand, choice or option) instead of exiting.

    >>> p = Parser(prog="demo")
    >>> _ = p.add_argument("--seed")
    >>> try:
    ...     p.parse_args(["--sed", "1"])
    ... except UsageError as exc:
    ...     print(exc)
    unrecognized arguments: --sed 1; did you mean '--seed'?
    """

    def error(self, message: str) -> NoReturn:
        match = _INVALID_CHOICE.search(message)
        if match:
            choices = re.findall(r"'([^']*)'", match["choices"])
            message += suggest(match["word"], choices)
        raise UsageError(message, self.format_usage())

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            # The options of the (sub)command that was parsed last: that is where they went.
            owner: argparse.ArgumentParser = getattr(parsed, "parser", None) or self
            message = f"unrecognized arguments: {' '.join(extras)}"
            unknown = next((e for e in extras if e.startswith("-")), None)
            if unknown is not None:
                message += suggest(unknown.split("=")[0], _option_strings(owner))
            raise UsageError(message, owner.format_usage())
        return parsed


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [o for action in parser._actions for o in action.option_strings if o.startswith("--")]


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argument type: an integer >= ``minimum``.

    >>> int_at_least(1)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {n}")
        return n

    return parse


nonneg_int = int_at_least(0)


def positive_float(text: str) -> float:
    """An argument type: a finite number > 0.

    >>> positive_float("1e-3")
    0.001
    """
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (x > 0 and x < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return x


def int_list(text: str) -> list[int]:
    """An argument type: integers separated by commas.

    >>> int_list("8,16, 32")
    [8, 16, 32]
    """
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def write_text(path: Path, text: str, out: Any = None) -> None:
    """Write ``text`` to ``path`` and say so (on ``out``, default standard output).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     write_text(Path(folder) / "x.txt", "hi")  # doctest: +ELLIPSIS
    wrote .../x.txt
    """
    path.write_text(text)
    print(f"wrote {path}", file=out or sys.stdout)
