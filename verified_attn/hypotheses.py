"""Is every assumption needed? The registry of each theorem's hypotheses, and their counterexamples.

>>> import verified_attn as va
>>> [h.kind for h in va.hypotheses("app-b")]
['positive-scale']
>>> cx = va.counterexample("thm-4.1", kind="v-zero", d=2, seed=1)
>>> cx.first.W != cx.second.W, cx.check()
(True, True)
>>> va.counterexample("thm-4.1", kind="no-such")
Traceback (most recent call last):
...
verified_attn.errors.InvalidArgument: kind must be one of v-zero, one-query-short, design-orthogonal for thm-4.1; got 'no-such'

Each :class:`Hypothesis` names its theorem (the claim-id prefix), a short ``kind``, the
hypothesis in words (``statement``), what fails without it (``fails``), and the room
function that builds its :class:`~verified_attn.counterexample.Counterexample`.
:func:`counterexample` dispatches to it; every counterexample is registered as the claim
``<theorem>/hypothesis/<kind>`` (:mod:`verified_attn.hypotheses_claims`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from verified_attn.counterexample import Counterexample
from verified_attn.errors import InvalidArgument
from verified_attn.validation import check_int, check_seed, is_int, require_size

__all__ = [
    "ALIASES",
    "HYPOTHESES",
    "THEOREMS",
    "Hypothesis",
    "counterexample",
    "get_hypothesis",
    "hypotheses",
    "hypotheses_markdown",
    "hypotheses_text",
]


@dataclass(frozen=True)
class Hypothesis:
    """One hypothesis of one theorem, and what fails without it."""

    theorem: str
    kind: str
    statement: str
    fails: str
    builder: str  # "module:function"
    min_d: int = 1
    exact: bool = True

    @property
    def claim_id(self) -> str:
        return f"{self.theorem}/hypothesis/{self.kind}"

    @property
    def command(self) -> str:
        return f"verified-attn counterexample {self.theorem} --kind {self.kind}"

    def build(self, d: int, seed: int, **options: Any) -> Counterexample:
        module, _, name = self.builder.partition(":")
        return getattr(importlib.import_module(module), name)(d=d, seed=seed, **options)


_EX = "verified_attn.exact_recovery.hypotheses"
_LR = "verified_attn.low_rank.hypotheses"
_NO = "verified_attn.noisy.hypotheses"
_TR = "verified_attn.transformer.hypotheses"
_MH = "verified_attn.multi_head.hypotheses"
_TM = "verified_attn.transformer.multi_head_counterexamples"

HYPOTHESES: tuple[Hypothesis, ...] = (
    Hypothesis(
        "thm-4.1",
        "v-zero",
        "v != 0",
        "with v = 0 two heads with different W are equal on every sequence: W is not "
        "identifiable from any queries",
        f"{_EX}:v_zero",
    ),
    Hypothesis(
        "thm-4.1",
        "one-query-short",
        "all d^2 + d queries of the design are asked",
        "with any one length-2 probe left out, two heads with different exact rational W "
        "agree exactly on the remaining d^2 + d - 1 queries (left_out='v', CLI --left-out v, leaves out "
        "a length-1 query instead: the pair is then certified, not exact)",
        f"{_EX}:one_query_short",
    ),
    Hypothesis(
        "thm-4.1",
        "design-orthogonal",
        "every design column has u_k^T v != 0",
        "a column with u_k^T v = 0 makes probes blind to row k of U^T W: two heads with "
        "different W agree exactly on all d^2 + d design queries",
        f"{_EX}:design_orthogonal",
        min_d=2,
    ),
    Hypothesis(
        "thm-5.1",
        "rank-exceeds",
        "rank W <= r, checked by the skeleton's rank test",
        "without the rank test, a rank r + 1 head and a rank r head agree exactly on every "
        "learning query of the rank-r skeleton; the test query tells them apart",
        f"{_LR}:rank_exceeds",
        min_d=2,
    ),
    Hypothesis(
        "thm-5.1",
        "nuclear-below-constant",
        "m >= C r (2d) rank-one measurements for the nuclear-norm method",
        "below the measured constant the nuclear-norm program returns a wrong W: a "
        "learner's failure with its figures (a second head matching every measurement is "
        "given exactly)",
        f"{_LR}:nuclear_below_constant",
        min_d=2,
    ),
    Hypothesis(
        "thm-6.1",
        "margin",
        "|v_i| >= mu > 0 for every i (the paper's design)",
        "with one |v_i| < mu, two heads with ||W||_F <= Wbar answer the paper's d^2 + d "
        "probes within tau of each other while their W differ by more than the derived "
        "bound: no estimator using those probes meets the bound",
        f"{_NO}:margin",
    ),
    Hypothesis(
        "thm-6.1",
        "tolerance",
        "the derived error bound at tolerance tau",
        "the bound is sharp: a tau-adversary drives the learner's error to within 1 % of "
        "it, so the bound cannot be lowered by 1 %",
        f"{_NO}:tolerance",
        min_d=2,
        exact=False,
    ),
    Hypothesis(
        "app-b",
        "positive-scale",
        "labels sign(f) only identify v up to a positive scale",
        "v and c v (c > 0) with one W give the same label on every sequence",
        f"{_NO}:positive_scale",
    ),
    Hypothesis(
        "transformer",
        "v-eff-zero",
        "v_eff = V A w_o != 0",
        "with v_eff = 0 the antisymmetrised oracle T(X) - T(-X) is 0 whatever W is; with "
        "cancelling neurons two Transformers with different W are equal on every sequence",
        f"{_TR}:v_eff_zero",
    ),
    Hypothesis(
        "transformer",
        "ffn-bias",
        "the FFN is bias-free",
        "with an FFN bias, T(X) - T(-X) is no longer a single-head regressor (exact "
        "witness: D(2x) != 2 D(x) at length 1); the reduction's learner fails on it",
        f"{_TR}:ffn_bias",
    ),
    Hypothesis(
        "transformer",
        "dead-neuron",
        "multi-head Transformers are identified only in canonical form: no never-active neuron",
        "a neuron with zero input weights and a negative bias is never active: two "
        "multi-head Transformers, one with it (any output weight) and one without, are "
        "equal on every sequence",
        f"{_TM}:dead_neuron",
    ),
    Hypothesis(
        "transformer",
        "always-on-neuron",
        "multi-head Transformers are identified only in canonical form: no always-on neuron",
        "a neuron with zero input weights and bias a_k > 0 is always active and adds the "
        "constant w_k a_k: with it, or with w_k a_k added to b instead, two multi-head "
        "Transformers are equal on every sequence",
        f"{_TM}:always_on_neuron",
    ),
    Hypothesis(
        "transformer",
        "killed-head",
        "multi-head Transformers are identified only in canonical form: every head has V_h A != 0",
        "a head whose values the FFN annihilates (V_h A = 0) adds nothing: two multi-head "
        "Transformers differing only in its W_h are equal on every sequence",
        f"{_TM}:killed_head",
    ),
    Hypothesis(
        "transformer",
        "colliding-heads",
        "multi-head Transformers are identified only in canonical form: heads have "
        "pairwise distinct (W_h, c_h)",
        "two heads with one W share one softmax, so only V_1 + V_2 is seen: the two heads "
        "and one head with V_1 + V_2 are equal on every sequence",
        f"{_TM}:colliding_heads",
    ),
    Hypothesis(
        "prop-7.1",
        "permutation",
        "(positive) multi-head parameters are identified only up to head order",
        "reordering the heads gives different parameters with the same map",
        f"{_MH}:permutation",
    ),
    Hypothesis(
        "prop-7.1",
        "shared-score-split",
        "heads have pairwise distinct W",
        "heads sharing one W may split their summed v arbitrarily: the same map",
        f"{_MH}:shared_score_split",
    ),
    Hypothesis(
        "prop-7.1",
        "dead-head",
        "every head has v_h != 0",
        "a head with v_h = 0 may have any W_h: the same map",
        f"{_MH}:dead_head",
    ),
    Hypothesis(
        "prop-7.1",
        "cancelling-values",
        "no equal-W heads whose values cancel",
        "two equal-W heads with v and -v vanish whatever their W: the same map",
        f"{_MH}:cancelling_values",
    ),
)

THEOREMS = ("thm-4.1", "thm-5.1", "thm-6.1", "app-b", "transformer", "prop-7.1")
#: Other names accepted for a theorem.
ALIASES = {"multi-head": "prop-7.1"}


def _theorem(theorem: Any) -> str:
    if isinstance(theorem, str) and theorem in ALIASES:
        return ALIASES[theorem]
    if not isinstance(theorem, str) or theorem not in THEOREMS:
        names = ", ".join((*THEOREMS, *ALIASES))
        raise InvalidArgument(f"theorem must be one of {names}; got {theorem!r}")
    return theorem


def hypotheses(theorem: str | None = None) -> list[Hypothesis]:
    """Every registered hypothesis (of one theorem, if given), in registry order.

    >>> [h.kind for h in hypotheses("transformer")]
    ['v-eff-zero', 'ffn-bias', 'dead-neuron', 'always-on-neuron', 'killed-head', 'colliding-heads']
    """
    if theorem is None:
        return list(HYPOTHESES)
    name = _theorem(theorem)
    return [h for h in HYPOTHESES if h.theorem == name]


def get_hypothesis(theorem: str, kind: str) -> Hypothesis:
    """The record of (theorem, kind); InvalidArgument naming the known kinds otherwise."""
    name = _theorem(theorem)
    found = [h for h in HYPOTHESES if h.theorem == name]
    for h in found:
        if h.kind == kind:
            return h
    raise InvalidArgument(
        f"kind must be one of {', '.join(h.kind for h in found)} for {name}; got {kind!r}"
    )


def counterexample(
    theorem: str, *, kind: str, d: int = 3, seed: int = 0, **options: Any
) -> Counterexample:
    """The counterexample showing ``theorem``'s hypothesis ``kind`` is needed.

    ``options`` go to the room's builder (``heads=`` for Prop 7.1, ``left_out=`` for
    ``one-query-short``, ``rank=`` for ``rank-exceeds``). ``"multi-head"`` is an alias of
    ``"prop-7.1"``.
    """
    hyp = get_hypothesis(theorem, kind)
    d = check_int(d, "d", low=1)
    if d < hyp.min_d:
        raise InvalidArgument(f"d must be >= {hyp.min_d} for {hyp.theorem} {kind!r}, got {d}")
    heads = options.get("heads", 2)
    heads = check_int(heads, "heads", low=1) if is_int(heads) else 2
    # Two models of up to ``heads`` heads, d x d each, built and compared exactly.
    require_size(f"counterexample at d = {d}, {heads} heads", numbers=4 * heads * (d * d + d))
    return hyp.build(d, check_seed(seed), **options)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def hypotheses_markdown(found: list[Hypothesis] | None = None) -> str:
    """The docs table: theorem | hypothesis | what fails without it | command | claim id.

    >>> print(hypotheses_markdown(hypotheses("app-b")).splitlines()[2])  # doctest: +ELLIPSIS
    | app-b | labels sign(f) only identify v up to a positive scale | v and c v ...
    """
    rows = [
        "| theorem | hypothesis | what fails without it | command | claim id |",
        "|---|---|---|---|---|",
    ]
    for h in HYPOTHESES if found is None else found:
        rows.append(
            f"| {h.theorem} | {_cell(h.statement)} | {_cell(h.fails)} | `{h.command}` | "
            f"`{h.claim_id}` |"
        )
    return "\n".join(rows) + "\n"


def hypotheses_text(found: list[Hypothesis] | None = None) -> str:
    """The table as plain text (what ``verified-attn hypotheses`` prints)."""
    import textwrap

    lines = []
    theorem = None
    for h in HYPOTHESES if found is None else found:
        if h.theorem != theorem:
            theorem = h.theorem
            lines.append(f"{theorem}")
        lines.append(f"  {h.kind:<24} {h.statement}")
        for part in textwrap.wrap(f"without it: {h.fails}", 72):
            lines.append(f"  {'':<24} {part}")
        lines.append(f"  {'':<24} $ {h.command}   (claim {h.claim_id})")
    return "\n".join(lines) + "\n"
