"""The argument parser of ``verified-attn``: one subparser per command.

>>> parser = build_parser()
>>> args = parser.parse_args(["claims", "-v"])
>>> args.command, args.verbose
('claims', True)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from verified_attn.cli.common import (
    PROG,
    Parser,
    int_at_least,
    int_list,
    nonneg_int,
)
from verified_attn.cli.kinds import LEARN_KINDS

__all__ = ["build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each subparser records itself as ``args.parser``."""
    from verified_attn import __version__

    parser = Parser(
        prog=PROG,
        description="Learn softmax attention from black-box queries, exactly and checkably.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    _add_check(sub)
    claims = sub.add_parser("claims", help="list the registered claims")
    claims.add_argument("--markdown", action="store_true", help="print the CLAIMS.md table")
    claims.add_argument(
        "--verbose", "-v", action="store_true", help="full statements and how each is checked"
    )
    claims.set_defaults(parser=claims)
    _add_learn(sub)
    _add_counterexample(sub)
    hyp = sub.add_parser("hypotheses", help="every theorem's hypotheses and their counterexamples")
    hyp.add_argument("theorem", nargs="?", metavar="THEOREM", help="only this theorem's")
    hyp.add_argument("--markdown", action="store_true", help="print the docs table (Markdown)")
    hyp.set_defaults(parser=hyp)
    _add_verify_certificate(sub)
    _add_sweep(sub)
    return parser


def _add_check(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="check the theory's claims (exit 1 if any fails)")
    check.add_argument("ids", nargs="*", metavar="ID", help="claim ids or prefixes (default all)")
    check.add_argument(
        "--json", metavar="F", help="also write the results as JSON to F ('-': standard output)"
    )
    check.add_argument(
        "--verbose", "-v", action="store_true", help="full statements and every claim's detail"
    )
    check.add_argument("--markdown", metavar="F", type=Path, help="also write them as Markdown")
    check.add_argument("--seed", type=nonneg_int, default=0, help="random seed (default 0)")
    check.add_argument("--size", choices=("small", "medium", "large"), help="sized claims' preset")
    check.add_argument("--d", type=int_at_least(1), help="run sized claims at this d")
    check.set_defaults(parser=check)


def _add_learn(sub: argparse._SubParsersAction) -> None:
    from verified_attn.phases import glossary_text

    # `learn --help` and `learn KIND --help` end with what each query phase is.
    glossary: dict[str, Any] = {
        "epilog": glossary_text(),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
    }
    learn = sub.add_parser(
        "learn", help="learn a seeded random model and write a certificate", **glossary
    )
    learn.set_defaults(parser=learn)
    kinds = learn.add_subparsers(dest="kind", metavar="KIND", parser_class=Parser)
    for kind in LEARN_KINDS.values():
        p = kinds.add_parser(kind.name, help=kind.help, **glossary)
        p.add_argument("--d", type=int_at_least(1), required=True, help="token dimension d >= 1")
        if kind.arithmetics:
            p.add_argument(
                "--arithmetic",
                choices=kind.arithmetics,
                default=None,
                help=f"default {kind.arithmetics[0]}",
            )
        if "certified" in kind.arithmetics:
            p.add_argument("--precision", type=int_at_least(32), help="bits (certified only)")
        p.add_argument("--seed", type=nonneg_int, default=0, help="random seed (default 0)")
        where = p.add_mutually_exclusive_group()
        where.add_argument(
            "--certificate",
            metavar="F",
            type=Path,
            help=f"certificate path (default certificate-{kind.name}-d<N>.json here; "
            "with --json - none unless given)",
        )
        where.add_argument("--no-certificate", action="store_true", help="write no certificate")
        p.add_argument(
            "--json", metavar="F", help="write the result as JSON to F ('-': standard output)"
        )
        p.add_argument(
            "--show-parameters", action="store_true", help="print the learned parameters too"
        )
        # A progress bar on standard error when it is a terminal.
        p.set_defaults(arithmetic=None, precision=None, parser=p, progress=sys.stderr.isatty())
        kind.add_arguments(p)


def _add_counterexample(sub: argparse._SubParsersAction) -> None:
    from verified_attn.hypotheses import ALIASES, HYPOTHESES, THEOREMS

    cex = sub.add_parser(
        "counterexample",
        help="a counterexample showing a theorem's hypothesis is needed (see `hypotheses`)",
    )
    cex.add_argument(
        "theorem", metavar="THEOREM", choices=(*THEOREMS, *ALIASES), help=", ".join(THEOREMS)
    )
    cex.add_argument(
        "--kind",
        choices=sorted({h.kind for h in HYPOTHESES}),
        default=None,
        metavar="KIND",
        help="the hypothesis (`verified-attn hypotheses` lists them; multi-head default "
        "shared-score-split)",
    )
    cex.add_argument("--d", type=int_at_least(1), default=3, help="token dimension (default 3)")
    cex.add_argument("--seed", type=nonneg_int, default=0, help="random seed (default 0)")
    cex.add_argument("--heads", type=int_at_least(1), help="number of heads (prop-7.1 only)")
    cex.add_argument(
        "--left-out",
        choices=("W", "v"),
        help="one-query-short: a length-2 (W) or length-1 (v) query",
    )
    cex.add_argument("--rank", type=int_at_least(1), help="rank-exceeds: the rank r (default 1)")
    cex.add_argument(
        "--json", metavar="F", type=Path, help="also write the certificate (JSON) to F"
    )
    cex.set_defaults(parser=cex)


def _add_verify_certificate(sub: argparse._SubParsersAction) -> None:
    from verified_attn.certificates.reading import MAX_FILE_BYTES

    ver = sub.add_parser("verify-certificate", help="re-check a certificate without the oracle")
    ver.add_argument("path", metavar="F", help="certificate JSON file ('-': standard input)")
    ver.add_argument(
        "--max-bytes",
        type=int_at_least(1),
        default=MAX_FILE_BYTES,
        metavar="N",
        help=f"refuse a certificate larger than N bytes (default {MAX_FILE_BYTES}, 256 MiB)",
    )
    ver.add_argument("--coq", action="store_true", help="also export to Coq and check with coqc")
    ver.set_defaults(parser=ver)

    from verified_attn.formal.cli_coq import add_export_parser

    export = add_export_parser(sub)
    export.set_defaults(parser=export)


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    swp = sub.add_parser("sweep", help="check one claim over a grid of sizes and seeds")
    swp.add_argument("claim", metavar="CLAIM", help="a claim id with size support")
    swp.add_argument("--sizes", type=int_list, required=True, help="sizes d, e.g. 8,16,32")
    swp.add_argument("--seeds", type=int_list, default=[0], help="seeds, e.g. 0,1,2 (default 0)")
    where = swp.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int_at_least(1), help="a local pool of N processes")
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="a Dask distributed scheduler, e.g. tcp://host:8786"
    )
    swp.add_argument("--json", metavar="F", type=Path, help="write the sweep as JSON")
    swp.set_defaults(parser=swp)
