"""The ``verified-attn`` command (also ``python -m verified_attn``).

>>> main(["claims"])  # doctest: +ELLIPSIS
id                   paper ref  statement...level
...
0
>>> main(["check", "no-such-claim"])  # the message goes to stderr
2

Subcommands: ``check`` runs the claims, ``claims`` lists them, ``learn KIND`` runs a learner
on a seeded random instance and writes a certificate, ``verify-certificate`` re-checks one.
Exit status: 0 success, 1 a claim or certificate failed (or a learner refused), 2 bad usage.
A model kind for ``learn`` is one entry in :data:`LEARN_KINDS`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from verified_attn.arithmetic import arb_bounds
from verified_attn.errors import InvalidArgument, VerifiedAttnError
from verified_attn.formal.cli_coq import add_export_parser, cmd_export_coq, cmd_verify_coq

__all__ = ["LEARN_KINDS", "LearnKind", "LearnOutcome", "main", "random_single_head"]

PROG = "verified-attn"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class _UsageError(Exception):
    """Internal: bad command-line usage (exit status 2)."""


# ---------------------------------------------------------------------------------------
# learn: one table entry per model kind.
# ---------------------------------------------------------------------------------------


@dataclass
class LearnOutcome:
    """What a learn run produced: the recovery, and how it compares with the truth."""

    recovery: Any
    equals_truth: bool | None
    comparison: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class LearnKind:
    """One model kind of ``verified-attn learn``.

    ``add_arguments`` adds the kind's own options (the common ones --d, --seed,
    --certificate, --json, --show-parameters for every kind, --arithmetic and --precision
    where the kind has a choice); ``run`` builds the seeded instance, learns it and compares
    with the truth.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], LearnOutcome]
    #: The arithmetics the kind accepts (the first is the default); () for a kind whose
    #: oracle fixes it (noisy answers are floats): then --arithmetic is not offered.
    arithmetics: tuple[str, ...] = ("certified", "exact", "float")


def random_single_head(d: int, *, seed: int, affine: bool = False) -> Any:
    """A seeded random rational head with a zero in v (for d >= 2) to show the design copes.

    >>> m = random_single_head(3, seed=1)
    >>> m.d, 0 in list(m.v), any(m.v)
    (3, True, True)
    """
    from verified_attn.models import SingleHeadAttention
    from verified_attn.validation import number_bytes, require_memory

    require_memory(2 * d * d * number_bytes("exact"), f"a random head at d = {d}")
    rng = np.random.default_rng(seed)
    W = [
        [Fraction(int(rng.integers(-9, 10)), int(rng.integers(1, 9))) for _ in range(d)]
        for _ in range(d)
    ]
    v = [Fraction(int(rng.integers(-5, 6))) for _ in range(d)]
    nonzero = int(rng.integers(d))
    v[nonzero] = Fraction(int(rng.choice([-3, -2, -1, 1, 2, 3])))  # v = 0 is not identifiable
    if d >= 2:
        v[(nonzero + 1 + int(rng.integers(d - 1))) % d] = Fraction(0)
    if not affine:
        return SingleHeadAttention(W, v)
    c = [Fraction(int(rng.integers(-4, 5)), 2) for _ in range(d)]
    beta = Fraction(int(rng.integers(-9, 10)), int(rng.integers(1, 5)))
    return SingleHeadAttention(W, v, c=c, beta=beta)


def _entries(x: Any) -> list[Any]:
    """The entries of a parameter (SymPy matrix, array or scalar), row-major."""
    if hasattr(x, "tolist"):
        return list(np.asarray(x.tolist(), dtype=object).reshape(-1))
    return [x]


def _compare_with_truth(rec: Any, truth: dict[str, Any]) -> tuple[bool | None, list[str]]:
    """Exact: == per parameter. Balls: does each contain the truth. Floats: the error."""
    if rec.exact:
        same = all(rec.parameters[k] == truth[k] for k in truth)
        return same, [f"equals the truth exactly (==): {'yes' if same else 'NO'}"]
    if rec.arithmetic == "certified":
        inside = True
        for name, want in truth.items():
            for ball, q in zip(_entries(rec.parameters[name]), _entries(want), strict=True):
                lo, hi = arb_bounds(ball)  # exact endpoints: no rounding of the truth
                inside &= lo <= Fraction(int(q.p), int(q.q)) <= hi
        return inside, [f"every ball contains the truth: {'yes' if inside else 'NO'}"]
    worst = 0.0
    for name, want in truth.items():
        got = _entries(rec.to_numpy()[name])
        worst = max(
            worst, max(abs(float(g) - float(w)) for g, w in zip(got, _entries(want), strict=True))
        )
    return None, [f"float64, not exact: max |recovered - truth| = {worst:.3e}"]


def _single_head_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--affine",
        action="store_true",
        help="learn the affine model (score bias c, output bias beta): d^2 + 2d + 1 queries",
    )


def _run_single_head(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.exact_recovery import learn_single_head
    from verified_attn.oracle import Oracle

    model = random_single_head(args.d, seed=args.seed, affine=args.affine)
    oracle = Oracle(model, args.arithmetic, precision=args.precision)
    rec = learn_single_head(oracle, seed=args.seed)
    equal, lines = _compare_with_truth(rec, model.parameters())
    return LearnOutcome(rec, equal, lines)


def _low_rank_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rank",
        type=_int_at_least(1),
        help="the true rank r (required unless --find-rank; then default max(1, d // 4))",
    )
    p.add_argument(
        "--find-rank", action="store_true", help="do not tell the learner r: it finds it"
    )
    p.add_argument("--method", choices=("skeleton", "nuclear"), default="skeleton")
    p.add_argument("--measurements", type=_int_at_least(1), help="nuclear: number m of probes")
    p.add_argument("--verify", type=_nonneg_int, default=8, help="fresh verification queries")


def _run_low_rank(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.low_rank import learn_low_rank
    from verified_attn.low_rank.claims import random_low_rank_head
    from verified_attn.oracle import Oracle

    if args.rank is None:
        if not args.find_rank:
            raise _UsageError("learn low-rank needs --rank R (or --find-rank to let it find r)")
        args.rank = max(1, args.d // 4)
    if args.rank > args.d:
        raise _UsageError(f"--rank must be <= --d; got rank {args.rank} > d {args.d}")
    if args.method == "nuclear":
        if args.arithmetic is None:
            args.arithmetic = "float"  # a convex solver in floats
        elif args.arithmetic != "float":
            raise _UsageError("--method nuclear needs --arithmetic float (a convex solver)")
    model = random_low_rank_head(args.d, args.rank, args.seed)
    oracle = Oracle(model, args.arithmetic, precision=args.precision)
    rec = learn_low_rank(
        oracle,
        rank=None if args.find_rank else args.rank,
        method=args.method,
        seed=args.seed,
        verify=args.verify,
        measurements=args.measurements,
    )
    equal, lines = _compare_with_truth(rec, model.parameters())
    return LearnOutcome(rec, equal, lines)


def _transformer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=_int_at_least(1), required=True, help="FFN width m")
    p.add_argument("--method", choices=("paper", "direct"), default="paper")


def _run_transformer(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.oracle import Oracle
    from verified_attn.transformer import canonical_network, learn_transformer
    from verified_attn.transformer.claims import random_transformer

    T = random_transformer(args.d, args.width, np.random.default_rng(args.seed))
    oracle = Oracle(T, args.arithmetic, precision=args.precision)
    rec = learn_transformer(oracle, method=args.method, seed=args.seed)
    same = rec.W == T.W and rec.network == canonical_network(T)
    line = f"W and the canonical FFN g equal the truth exactly (==): {'yes' if same else 'NO'}"
    return LearnOutcome(rec, same, [line])


def _noisy_arguments(p: argparse.ArgumentParser) -> None:
    from verified_attn.noisy.demo import ADVERSARY_CHOICES

    p.add_argument(
        "--tolerance", type=_positive_float, default=1e-3, help="tau (sigma for gaussian)"
    )
    p.add_argument("--adversary", choices=ADVERSARY_CHOICES, default="uniform")
    p.add_argument("--design", choices=("paper", "norm"), default="paper")
    p.add_argument("--w-bound", type=_positive_float, default=1.0, help="Wbar: ||W||_F <= Wbar")
    p.add_argument(
        "--margin", type=_positive_float, default=1.0, help="mu: |v_i| >= mu (norm: ||v||)"
    )
    p.add_argument(
        "--target-error", type=_positive_float, default=0.05, help="gaussian: target eps"
    )
    p.add_argument("--bits", type=_int_at_least(1), default=30, help="labels: bits per unknown")


def _run_noisy(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.noisy.demo import run

    out = run(
        args.d,
        tolerance=args.tolerance,
        adversary=args.adversary,
        design=args.design,
        w_bound=args.w_bound,
        margin=args.margin,
        target_error=args.target_error,
        bits=args.bits,
        seed=args.seed,
    )
    return LearnOutcome(out["recovery"], out["within_bound"], out["lines"])


def _multi_head_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heads", type=_int_at_least(1), required=True, help="number of heads H")
    p.add_argument(
        "--find-heads",
        action="store_true",
        help="tell the learner only an upper bound H (max_heads=H): it finds the number "
        "(exact/certified: a certified degree test; float: the Loewner rank rule)",
    )
    p.add_argument("--verify", type=_nonneg_int, default=8, help="fresh verification queries")


def _run_multi_head(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.multi_head import canonical_form, learn_multi_head
    from verified_attn.multi_head.counterexamples import random_multi_head
    from verified_attn.oracle import Oracle

    if args.arithmetic == "float":
        # Float boxes at the float design's scale (W ~ N(0, 1/d), v ~ N(0, 1)), as benchmarked.
        from verified_attn.multi_head.canonical_float import random_float_box

        model = random_float_box(args.d, args.heads, args.seed)
    else:
        model = random_multi_head(args.d, args.heads, args.seed)
    oracle = Oracle(model, args.arithmetic, precision=args.precision)
    count = {"max_heads": args.heads} if args.find_heads else {"heads": args.heads}
    rec = learn_multi_head(oracle, seed=args.seed, verify=args.verify, **count)
    truth = canonical_form(model).heads
    found = []
    if args.find_heads:
        # The learner was told only the upper bound: say what it found.
        found = [f"heads found: {rec.H} (upper bound {args.heads}; the box has {len(truth)})"]
        if rec.H != len(truth):
            return LearnOutcome(rec, False, found)
    if rec.exact:
        same = rec.parameters["heads"] == truth
        return LearnOutcome(
            rec,
            same,
            [*found, f"equals the canonical form exactly (==): {'yes' if same else 'NO'}"],
        )
    got = rec.to_numpy()["heads"]
    worst = max(
        float(np.max(np.abs(np.ravel(g) - np.array(w.tolist(), dtype=np.float64).ravel())))
        for gh, wh in zip(got, truth, strict=True)
        for g, w in zip(gh, wh, strict=True)
    )
    return LearnOutcome(
        rec, None, [*found, f"float64, not exact: max |recovered - canonical truth| = {worst:.3e}"]
    )


LEARN_KINDS: dict[str, LearnKind] = {
    "single-head": LearnKind(
        "single-head",
        "Thm 4.1: a single head from d^2 + d queries",
        _single_head_arguments,
        _run_single_head,
    ),
    "low-rank": LearnKind(
        "low-rank",
        "Thm 5.1: a rank-r head from d + 2dr - r^2 (+1 rank test) queries, or nuclear norm",
        _low_rank_arguments,
        _run_low_rank,
    ),
    "multi-head": LearnKind(
        "multi-head",
        "Prop 7.1 follow-up: the canonical form of H heads, d + 2H(d^2 + d - 1) queries",
        _multi_head_arguments,
        _run_multi_head,
    ),
    "transformer": LearnKind(
        "transformer",
        "one-layer Transformer: 2(d^2 + d) or d^2 attention queries + the exact FFN learner",
        _transformer_arguments,
        _run_transformer,
        ("certified", "exact"),
    ),
    "noisy": LearnKind(
        "noisy",
        "Thm 6.1 / App. B: a head behind a tolerance-tau, gaussian or label-only oracle",
        _noisy_arguments,
        _run_noisy,
        (),  # the answers of a noisy oracle are floats; the bound is computed in balls
    ),
}


# ---------------------------------------------------------------------------------------
# The parser.
# ---------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    # Raise instead of exiting, so main() returns a status and tests see no SystemExit.
    def error(self, message: str) -> Any:
        raise _UsageError(f"{message}\n{self.format_usage().rstrip()}")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if n < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {n}")
        return n

    return parse


_nonneg_int = _int_at_least(0)


def _positive_float(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (x > 0 and x < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return x


def _build_parser() -> argparse.ArgumentParser:
    from verified_attn import __version__

    parser = _Parser(
        prog=PROG,
        description="Learn softmax attention from black-box queries, exactly and checkably.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    check = sub.add_parser("check", help="check the theory's claims (exit 1 if any fails)")
    check.add_argument("ids", nargs="*", metavar="ID", help="claim ids or prefixes (default all)")
    check.add_argument(
        "--json", metavar="F", help="also write the results as JSON to F ('-': standard output)"
    )
    check.add_argument(
        "--verbose", "-v", action="store_true", help="full statements and every claim's detail"
    )
    check.add_argument("--markdown", metavar="F", type=Path, help="also write them as Markdown")
    check.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
    check.add_argument("--size", choices=("small", "medium", "large"), help="sized claims' preset")
    check.add_argument("--d", type=_int_at_least(1), help="run sized claims at this d")

    claims = sub.add_parser("claims", help="list the registered claims")
    claims.add_argument("--markdown", action="store_true", help="print the CLAIMS.md table")

    learn = sub.add_parser("learn", help="learn a seeded random model and write a certificate")
    kinds = learn.add_subparsers(dest="kind", metavar="KIND", parser_class=_Parser)
    for kind in LEARN_KINDS.values():
        p = kinds.add_parser(kind.name, help=kind.help)
        p.add_argument("--d", type=_int_at_least(1), required=True, help="token dimension d >= 1")
        if kind.arithmetics:
            p.add_argument(
                "--arithmetic",
                choices=kind.arithmetics,
                default=None,
                help=f"default {kind.arithmetics[0]}",
            )
        if "certified" in kind.arithmetics:
            p.add_argument("--precision", type=_int_at_least(32), help="bits (certified only)")
        p.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
        p.add_argument(
            "--certificate",
            metavar="F",
            type=Path,
            help=f"certificate path (default certificate-{kind.name}-d<N>.json here)",
        )
        p.add_argument(
            "--json", metavar="F", help="write the result as JSON to F ('-': standard output)"
        )
        p.add_argument(
            "--show-parameters", action="store_true", help="print the learned parameters too"
        )
        p.set_defaults(arithmetic=None, precision=None)
        kind.add_arguments(p)

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
    cex.add_argument("--d", type=_int_at_least(1), default=3, help="token dimension (default 3)")
    cex.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
    cex.add_argument("--heads", type=_int_at_least(1), help="number of heads (prop-7.1 only)")
    cex.add_argument(
        "--left-out",
        choices=("W", "v"),
        help="one-query-short: a length-2 (W) or length-1 (v) query",
    )
    cex.add_argument("--rank", type=_int_at_least(1), help="rank-exceeds: the rank r (default 1)")
    cex.add_argument(
        "--json", metavar="F", type=Path, help="also write the certificate (JSON) to F"
    )

    hyp = sub.add_parser("hypotheses", help="every theorem's hypotheses and their counterexamples")
    hyp.add_argument("theorem", nargs="?", metavar="THEOREM", help="only this theorem's")
    hyp.add_argument("--markdown", action="store_true", help="print the docs table (Markdown)")

    ver = sub.add_parser("verify-certificate", help="re-check a certificate without the oracle")
    ver.add_argument("path", metavar="F", type=Path, help="certificate JSON file")
    ver.add_argument("--coq", action="store_true", help="also export to Coq and check with coqc")
    add_export_parser(sub)

    swp = sub.add_parser("sweep", help="check one claim over a grid of sizes and seeds")
    swp.add_argument("claim", metavar="CLAIM", help="a claim id with size support")
    swp.add_argument("--sizes", type=_int_list, required=True, help="sizes d, e.g. 8,16,32")
    swp.add_argument("--seeds", type=_int_list, default=[0], help="seeds, e.g. 0,1,2 (default 0)")
    where = swp.add_mutually_exclusive_group()
    where.add_argument("--workers", type=_int_at_least(1), help="a local pool of N processes")
    where.add_argument(
        "--scheduler", metavar="ADDRESS", help="a Dask distributed scheduler, e.g. tcp://host:8786"
    )
    swp.add_argument("--json", metavar="F", type=Path, help="write the sweep as JSON")
    return parser


# ---------------------------------------------------------------------------------------
# Commands.
# ---------------------------------------------------------------------------------------


def _write(path: Path, text: str, out: Any = None) -> None:
    path.write_text(text)
    print(f"wrote {path}", file=out or sys.stdout)


def _cmd_check(args: argparse.Namespace) -> int:
    import time

    from verified_attn.claims import check_claims
    from verified_attn.report import claims_json, claims_markdown, claims_table, claims_verbose

    start = time.perf_counter()
    try:
        results = check_claims(
            args.ids or None,
            seed=args.seed,
            size=args.size,
            d=args.d,
            progress=sys.stderr.isatty(),
        )
    except InvalidArgument as exc:
        raise _UsageError(str(exc)) from exc
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout  # keep stdout pure JSON
    print(claims_verbose(results) if args.verbose else claims_table(results), file=out)
    if args.size is not None or args.d is not None:
        sized = [r for r in results if r.data.get("size")]
        at = " ".join(f"--{k} {v}" for k, v in (("size", args.size), ("d", args.d)) if v)
        print(
            f"{len(sized)} of {len(results)} claims ran at {at}; the other "
            f"{len(results) - len(sized)} have no size support and ran at their default size",
            file=out,
        )
    print(f"total {time.perf_counter() - start:.1f} s", file=out)
    if args.json is not None:
        data = json.dumps(claims_json(results, seed=args.seed), indent=1) + "\n"
        if to_stdout:
            sys.stdout.write(data)
        else:
            _write(Path(args.json), data, out)
    if args.markdown is not None:
        _write(args.markdown, claims_markdown(results), out)
    return EXIT_OK if all(r.passed or r.skipped for r in results) else EXIT_FAIL


def _cmd_claims(args: argparse.Namespace) -> int:
    from verified_attn.claims import all_claims
    from verified_attn.report import claim_list_markdown, claim_list_text

    claims = all_claims()
    print(claim_list_markdown(claims) if args.markdown else claim_list_text(claims), end="")
    if not args.markdown:
        print()
    return EXIT_OK


def _cmd_learn(args: argparse.Namespace) -> int:
    from verified_attn.recovery_report import recovery_json, recovery_text

    if args.kind is None:
        raise _UsageError("learn needs a model kind: " + ", ".join(LEARN_KINDS))
    kind = LEARN_KINDS[args.kind]
    if (
        kind.arithmetics
        and args.arithmetic is None
        and not (args.kind == "low-rank" and args.method == "nuclear")
    ):
        args.arithmetic = kind.arithmetics[0]
    if args.precision is not None and args.arithmetic not in (None, "certified"):
        raise _UsageError("--precision applies to --arithmetic certified only")
    outcome = kind.run(args)
    rec = outcome.recovery
    to_stdout = args.json == "-"
    out = sys.stderr if to_stdout else sys.stdout  # keep stdout pure JSON
    text = recovery_text(rec, parameters=args.show_parameters)
    print(text, file=out)
    for line in outcome.comparison:
        print(line, file=out)
    if args.json is not None:
        data = json.dumps(recovery_json(rec), indent=1) + "\n"
        if to_stdout:
            sys.stdout.write(data)
        else:
            _write(Path(args.json), data, out)
    path = args.certificate or Path(f"certificate-{args.kind}-d{args.d}.json")
    rec.certificate(path)
    print(f"certificate written to {path} (check it: {PROG} verify-certificate {path})", file=out)
    return EXIT_OK if outcome.equals_truth is not False else EXIT_FAIL


def _cmd_verify_certificate(args: argparse.Namespace) -> int:
    from verified_attn.certificates import verify_certificate
    from verified_attn.errors import CertificateError

    try:
        check = verify_certificate(args.path)
    except CertificateError as exc:
        print(f"certificate FAILED: {args.path}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    print(f"{args.path}: {check}")
    return cmd_verify_coq(args) if args.coq else EXIT_OK


def _cmd_counterexample(args: argparse.Namespace) -> int:
    from verified_attn.errors import CertificateError
    from verified_attn.hypotheses import ALIASES, counterexample

    theorem = ALIASES.get(args.theorem, args.theorem)
    kind = args.kind
    if kind is None:
        if theorem != "prop-7.1":
            raise _UsageError(
                f"counterexample {args.theorem} needs --kind (see `{PROG} hypotheses`)"
            )
        kind = "shared-score-split"
    options: dict[str, Any] = {}
    for name, applies in (
        ("heads", theorem == "prop-7.1"),
        ("left_out", kind == "one-query-short"),
        ("rank", kind == "rank-exceeds"),
    ):
        value = getattr(args, name)
        if value is not None:
            if not applies:
                raise _UsageError(f"--{name.replace('_', '-')} does not apply to {theorem} {kind}")
            options[name] = value
    cx = counterexample(theorem, kind=kind, d=args.d, seed=args.seed, **options)
    pair = cx.payload.get("pair")
    if pair is not None:  # Prop 7.1: the room's report (both models, then the proof)
        from verified_attn.multi_head.counterexamples import counterexample_report

        print(counterexample_report(pair))
    else:
        print(cx.text())
    try:
        lines = cx.explain()
    except CertificateError as exc:
        print(f"check FAILED: {exc}")
        return EXIT_FAIL
    print("check (the counterexample checker, exact where the relation is 'equal'):")
    for line in lines:
        print(f"  {line}")
    if args.json is not None:
        _write(args.json, json.dumps(cx.certificate(), indent=1) + "\n")
        print(f"check it: {PROG} verify-certificate {args.json}")
    return EXIT_OK


def _cmd_hypotheses(args: argparse.Namespace) -> int:
    from verified_attn.hypotheses import hypotheses, hypotheses_markdown, hypotheses_text

    found = hypotheses(args.theorem)
    print(hypotheses_markdown(found) if args.markdown else hypotheses_text(found), end="")
    return EXIT_OK


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas, got {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one integer, got {text!r}")
    return values


def _cmd_sweep(args: argparse.Namespace) -> int:
    from concurrent.futures import ProcessPoolExecutor

    from verified_attn.sweep import sweep

    def run(executor: Any) -> dict[str, Any]:
        try:
            return sweep(args.claim, sizes=args.sizes, seeds=args.seeds, executor=executor)
        except InvalidArgument as exc:
            raise _UsageError(str(exc)) from exc

    if args.scheduler is not None:
        try:
            import distributed
        except ImportError:
            raise _UsageError(
                "--scheduler needs Dask distributed: pip install 'verified-attn[dask]'"
            ) from None
        try:
            client = distributed.Client(args.scheduler, timeout=30)
        except (OSError, TimeoutError) as exc:
            raise _UsageError(f"cannot reach the Dask scheduler {args.scheduler}: {exc}") from exc
        with client:
            out = run(client.get_executor())
            out["executor"] = f"dask scheduler {args.scheduler}"
            out["dask_workers"] = len(client.scheduler_info().get("workers", {}))
    elif args.workers is not None:
        with ProcessPoolExecutor(args.workers) as pool:
            out = run(pool)
    else:
        out = run(None)
    for c in out["cells"]:
        size = ", ".join(f"{k} = {v}" for k, v in c["size"].items())
        verdict = "PASS" if c["passed"] else "FAIL"
        print(f"{verdict}  {size}, seed {c['seed']}  ({c['seconds']:.2f} s)  {c['detail'][:100]}")
    print(
        f"{out['claim']}: {out['passed']} passed, {out['failed']} failed; "
        f"{out['executor']}, {out['seconds']:.2f} s"
    )
    if not out["versions_agree"]:
        print(f"warning: workers ran other versions: {out['worker_versions']}", file=sys.stderr)
    if args.json is not None:
        _write(args.json, json.dumps(out, indent=1) + "\n")
    return EXIT_OK if out["all_passed"] else EXIT_FAIL


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "counterexample": _cmd_counterexample,
    "export-coq": cmd_export_coq,
    "hypotheses": _cmd_hypotheses,
    "check": _cmd_check,
    "claims": _cmd_claims,
    "learn": _cmd_learn,
    "sweep": _cmd_sweep,
    "verify-certificate": _cmd_verify_certificate,
}


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 1 failed, 2 bad usage)."""
    parser = _build_parser()
    argv = _attach_negative_numbers(list(sys.argv[1:] if argv is None else argv))
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help / --version: argparse printed and wants out
            return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_USAGE
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return _COMMANDS[args.command](args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except InvalidArgument as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except VerifiedAttnError as exc:
        print(f"{PROG}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except OSError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_FAIL
