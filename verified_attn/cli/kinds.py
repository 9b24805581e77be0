"""The model kinds of ``verified-attn learn``: each builds a seeded random instance, learns
it and compares the result with the truth.

>>> sorted(LEARN_KINDS)
['low-rank', 'multi-head', 'noisy', 'single-head', 'transformer']
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from verified_attn.cli.common import UsageError, int_at_least, nonneg_int, positive_float

__all__ = ["LEARN_KINDS", "LearnKind", "LearnOutcome", "compare_with_truth", "random_single_head"]


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
    import numpy as np

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
    import numpy as np

    if hasattr(x, "tolist"):
        return list(np.asarray(x.tolist(), dtype=object).reshape(-1))
    return [x]


def compare_with_truth(rec: Any, truth: dict[str, Any]) -> tuple[bool | None, list[str]]:
    """Exact: == per parameter. Balls: does each contain the truth. Floats: the error."""
    from verified_attn.arithmetic import arb_bounds

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
    rec = learn_single_head(oracle, seed=args.seed, progress=args.progress)
    equal, lines = compare_with_truth(rec, model.parameters())
    return LearnOutcome(rec, equal, lines)


def _low_rank_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--rank",
        type=int_at_least(1),
        help="the true rank r (required unless --find-rank; then default max(1, d // 4))",
    )
    p.add_argument(
        "--find-rank", action="store_true", help="do not tell the learner r: it finds it"
    )
    p.add_argument("--method", choices=("skeleton", "nuclear"), default="skeleton")
    p.add_argument("--measurements", type=int_at_least(1), help="nuclear: number m of probes")
    p.add_argument("--verify", type=nonneg_int, default=8, help="fresh verification queries")
    p.add_argument(
        "--denominator-bound",
        type=int_at_least(1),
        help="certified: the entry bound D of rational reconstruction (default "
        "2^(precision/4); export-coq of a certified run needs a small one, e.g. 16)",
    )


def _run_low_rank(args: argparse.Namespace) -> LearnOutcome:
    from verified_attn.low_rank import learn_low_rank
    from verified_attn.low_rank.claims import random_low_rank_head
    from verified_attn.oracle import Oracle

    if args.rank is None:
        if not args.find_rank:
            raise UsageError("learn low-rank needs --rank R (or --find-rank to let it find r)")
        args.rank = max(1, args.d // 4)
    if args.rank > args.d:
        raise UsageError(f"--rank must be <= --d; got rank {args.rank} > d {args.d}")
    if args.method == "nuclear":
        if args.arithmetic is None:
            args.arithmetic = "float"  # a convex solver in floats
        elif args.arithmetic != "float":
            raise UsageError("--method nuclear needs --arithmetic float (a convex solver)")
    model = random_low_rank_head(args.d, args.rank, args.seed)
    oracle = Oracle(model, args.arithmetic, precision=args.precision)
    rec = learn_low_rank(
        oracle,
        denominator_bound=args.denominator_bound,
        rank=None if args.find_rank else args.rank,
        method=args.method,
        seed=args.seed,
        verify=args.verify,
        measurements=args.measurements,
        progress=args.progress,
    )
    equal, lines = compare_with_truth(rec, model.parameters())
    return LearnOutcome(rec, equal, lines)


def _transformer_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--width", type=int_at_least(1), required=True, help="FFN width m")
    p.add_argument("--method", choices=("paper", "direct"), default="paper")


def _run_transformer(args: argparse.Namespace) -> LearnOutcome:
    import numpy as np

    from verified_attn.oracle import Oracle
    from verified_attn.transformer import canonical_network, learn_transformer
    from verified_attn.transformer.claims import random_transformer

    T = random_transformer(args.d, args.width, np.random.default_rng(args.seed))
    oracle = Oracle(T, args.arithmetic, precision=args.precision)
    rec = learn_transformer(oracle, method=args.method, seed=args.seed, progress=args.progress)
    same = rec.W == T.W and rec.network == canonical_network(T)
    line = f"W and the canonical FFN g equal the truth exactly (==): {'yes' if same else 'NO'}"
    return LearnOutcome(rec, same, [line])


def _noisy_arguments(p: argparse.ArgumentParser) -> None:
    from verified_attn.noisy.demo import ADVERSARY_CHOICES

    p.add_argument(
        "--tolerance", type=positive_float, default=1e-3, help="tau (sigma for gaussian)"
    )
    p.add_argument("--adversary", choices=ADVERSARY_CHOICES, default="uniform")
    p.add_argument("--design", choices=("paper", "norm"), default="paper")
    p.add_argument("--w-bound", type=positive_float, default=1.0, help="Wbar: ||W||_F <= Wbar")
    p.add_argument(
        "--margin", type=positive_float, default=1.0, help="mu: |v_i| >= mu (norm: ||v||)"
    )
    p.add_argument("--target-error", type=positive_float, default=0.05, help="gaussian: target eps")
    p.add_argument("--bits", type=int_at_least(1), default=30, help="labels: bits per unknown")


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
        progress=args.progress,
    )
    return LearnOutcome(out["recovery"], out["within_bound"], out["lines"])


def _multi_head_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--heads", type=int_at_least(1), required=True, help="number of heads H")
    p.add_argument(
        "--find-heads",
        action="store_true",
        help="tell the learner only an upper bound H (max_heads=H): it finds the number "
        "(exact/certified: a certified degree test; float: the Loewner rank rule)",
    )
    p.add_argument("--verify", type=nonneg_int, default=8, help="fresh verification queries")


def _run_multi_head(args: argparse.Namespace) -> LearnOutcome:
    import numpy as np

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
    rec = learn_multi_head(
        oracle, seed=args.seed, verify=args.verify, progress=args.progress, **count
    )
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
