"""What each query phase a learner reports means: the one glossary of phase names.

A result's ``queries_by_phase`` counts the queries per phase (``F(0)``, ``W``, ...); the
``learn`` command's help and a result's text explain the names from here.

>>> describe_phase("F(t)")
'multi-head (float): the grid probes [b + u]*k + [b]*m, one per ratio t = k/m, 2H per pair of design vectors'
>>> describe_phase("head2/W")
'head 2, restricted to its known subspace (learn_orthogonal_heads): W: the length-2 probes [e_j + t u_k, e_j]...'
>>> phase_glossary({"v": 2, "verify": 8})
['phases:', '  v: length-1 queries [e_i]: the value vector v (f([e_i]) = v_i)', '  verify: fresh random sequences the learner did not use, checked against the learned model (verification)']
>>> describe_phase("nonsense") is None
True

Names built from others are explained from their parts: ``headK/X`` (head K of
:func:`~verified_attn.multi_head.learn_orthogonal_heads`, its phase X), ``attention-X``
(the Transformer's attention head learned on f(X) - f(-X), its phase X) and ``X-rescale``
(phase X's probes re-asked at a smaller scale).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable

__all__ = ["PHASES", "describe_phase", "glossary_text", "phase_glossary"]

#: Every phase name the learners count, with its meaning in one line.
PHASES: dict[str, str] = {
    # Thm 4.1 (single head) and the rooms that use it.
    "v": "length-1 queries [e_i]: the value vector v (f([e_i]) = v_i)",
    "beta": "one query of the zero token: the output bias beta (affine model)",
    "W": "the length-2 probes [e_j + t u_k, e_j] of the design U (a float single head: "
    "[a e_j + (t/a) u_k, a e_j], a = 1/8): the entries of W (and c, affine; with a label "
    "oracle, bisected over t)",
    "rescale": "probes that saturated the softmax, re-asked at a smaller scale",
    "refine": "probes re-asked at a larger scale where a float answer was too coarse",
    "verify": "fresh random sequences the learner did not use, checked against the learned "
    "model (verification)",
    # Low rank (Thm 5.1 and beyond).
    "C": "low-rank skeleton: column probes u_i^T W b_k (the next column of the skeleton)",
    "R": "low-rank skeleton: row probes u_s^T W e_j on unit vectors (the pivot row)",
    "rank": "low-rank: the rank test u^T W b against the skeleton's prediction (1 query)",
    "rank-check": "low-rank: a second rank test, confirming rank 0 (verification)",
    "rop": "low-rank, nuclear norm: the rank-one probes a_k^T W b_k",
    # Transformer and ReLU FFN.
    "ffn": "ReLU FFN: length-1 queries along random lines, locating the kinks of g",
    "ffn-verify": "ReLU FFN: fresh length-1 sequences checked against the learned g "
    "(verification)",
    "attention-direct": "Transformer, method 'direct': d^2 two-token queries inside one "
    "linear piece of the learned g",
    "attention-cell": "Transformer with FFN biases, float: g at the design's centre and its d "
    "base tokens (d + 1 length-1 queries), the cell's values measured from the box",
    # Multi-head (Prop. 7.1 follow-up), exact/certified and float.
    "F(0)": "multi-head: the base tokens [b_j] alone (F at k = 0): b_j^T sum_h v_h (+ beta)",
    "F(k)": "multi-head (exact/certified): the probes [b + u]*k + [b], k = 1..2H, whose "
    "answers are a rational function of k with one pole per head",
    "F(t)": "multi-head (float): the grid probes [b + u]*k + [b]*m, one per ratio t = k/m, "
    "2H per pair of design vectors",
    "redundancy": "multi-head (float): extra ratios per pair beyond the 2H the fit needs, "
    "against rounding",
    "tie links": "multi-head: probes at (b_1 + b_j)/2 linking heads whose scores tie, to "
    "match them across probes",
    "pilot": "multi-head (float): a first round of a few pairs choosing the probe scale "
    "(its last round is kept, earlier ones are extra)",
    "links": "multi-head (float, rank=): the halved links ((u_1 + u_k)/2, b_1) of the low-rank "
    "skeleton design, ordering each u-group's heads",
    "rank check": "multi-head (float, rank=): one pair outside the low-rank skeleton, predicted "
    "by the completed heads and never fitted (a rank too small fails it)",
    "conditioning": "multi-head (float): a stalled u-group asked again with a better "
    "conditioned direction",
    "shifted": "multi-head (float, rank=): a stalled u-group's columns asked at a shifted "
    "row (a full group's at u_k / 2, whose fit doubled is u_k's; a partial group's at u_k "
    "plus a seeded mix of the full groups' rows, whose fit starts u_k's by subtraction)",
    "polish": "multi-head (float): random sequences for a final fit of every parameter on "
    "every answer",
    "refinement": "multi-head (float64): random sequences up to the follow-up's count for a "
    "Gauss-Newton refinement on residuals in extended precision",
    "head-count": "multi-head (float, max_heads): Loewner probes counting the heads (and "
    "noise probes measuring the rounding floor)",
    "diagnosis": "after a failed decoding: probes testing whether there are more heads than "
    "given",
    "values": "multi-head Transformer (float), phase cell<i>/values: in a cell of g other "
    "than the one whose run learned the heads' scores, 2 H d three-token probes whose answers "
    "give the heads' values by least squares",
    "swap": "multi-head Transformer (float), phase cell<i>/swap: before a cell whose fits "
    "failed is passed over, the two-token sequences [c - s e, c + s e] and their swaps at s "
    "and s/2, whose odd part is O(s^3) in the class (a residual connection's is first order)",
    # App. B (sign labels).
    "signs": "label oracle: the labels of [e_i] and [-e_i], the signs of v",
    "other": "queries made outside any named phase",
}

_HEAD = re.compile(r"head(\d+)/(.+)")
_COMPOSED = "headK/X, attention-X, X-rescale"
_COMPOSED_MEANING = (
    "phase X of head K (learn_orthogonal_heads), of the Transformer's attention head, or "
    "phase X's probes re-asked at a smaller scale"
)


def describe_phase(name: str) -> str | None:
    """The meaning of phase ``name`` in one line, or None if the glossary lacks it."""
    if name in PHASES:
        return PHASES[name]
    head = _HEAD.fullmatch(name)
    if head is not None:
        inner = describe_phase(head.group(2))
        return None if inner is None else (
            f"head {head.group(1)}, restricted to its known subspace "
            f"(learn_orthogonal_heads): {head.group(2)}: {inner}"
        )
    if name.startswith("attention-"):
        part = name[len("attention-") :]
        inner = describe_phase(part)
        return None if inner is None else (
            f"Transformer attention, learned on f(X) - f(-X) (2 queries each): {part}: {inner}"
        )
    if name.endswith("-rescale"):
        part = name[: -len("-rescale")]
        inner = describe_phase(part)
        return None if inner is None else f"re-asks of {part} probes at a smaller scale ({inner})"
    return None


def phase_glossary(phases: Iterable[str]) -> list[str]:
    """Lines explaining the given phase names (a result's ``queries_by_phase`` keys), in
    order, under a ``phases:`` heading; none if there are no phases."""
    names = list(dict.fromkeys(phases))
    if not names:
        return []
    return ["phases:"] + [f"  {n}: {describe_phase(n) or 'no description'}" for n in names]


def glossary_text() -> str:
    """Every base phase name and its meaning, for ``verified-attn learn --help``.

    >>> glossary_text().splitlines()[0]
    'query phases (a result counts its queries by phase):'
    """
    entries = [*PHASES.items(), (_COMPOSED, _COMPOSED_MEANING)]
    lines = ["query phases (a result counts its queries by phase):"]
    for name, meaning in entries:
        lines += textwrap.wrap(
            f"{name}: {meaning}", width=88, initial_indent="  ", subsequent_indent="      "
        )
    return "\n".join(lines)
