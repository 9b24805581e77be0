"""The float learner's typed state, passed from stage to stage, and its stage switches.

>>> Options().pilot, Options(pilot=False).pilot, len(SWITCHES)
(True, False, 10)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.pipeline.rules import _Decoded
from verified_attn.oracle import Oracle
from verified_attn.verification import Verification

__all__ = ["DEFAULT_OPTIONS", "SWITCHES", "FloatState", "Options"]

Fits = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # r, s, residuals, floors


@dataclass(frozen=True)
class Options:
    """Which heuristic stages run (all by default: the learner as shipped). Each switch turns
    one repair, restart, round or polish rule off, for ``benchmarks/multi_head_ablation.py``;
    a rule switched off is never replaced by a looser check, so a result stays sound.

    >>> off = Options(conditioning=False)
    >>> off.conditioning, off.pilot, [s for s in SWITCHES if not getattr(off, s)]
    (False, True, ['conditioning'])
    """

    pilot: bool = True  # rescaling rounds of the pilot pairs (off: the design scale)
    pair_repairs: bool = True  # leave-one-out residues and multi-start pair refits
    joint_restarts: bool = True  # a stalled group's worst pair restarted jointly
    consensus_start: bool = True  # the redundant design's consensus-plane restart
    linear_rounds: bool = True  # the redundant design's pair-refit rounds on the plane
    low_rank_restarts: bool = True  # stalled groups from the others' low-rank head planes
    conditioning: bool = True  # failing u-groups asked again at a better-conditioned u
    joint_polish: bool = True  # small boxes: a dense fit of every parameter on every answer
    precision_polish: bool = True  # a float64 box's polish on random sequences
    refine: bool = True  # Gauss-Newton on extended-precision residuals, with new sequences
    # Where each stage counts the runs it changed (the ablation's record; None: not counted).
    fired: dict[str, int] | None = field(default=None, compare=False, repr=False)

    def mark(self, stage: str) -> None:
        """Count ``stage`` as having changed the run (when ``fired`` is given).

        >>> o = Options(fired={}); o.mark("pilot"); o.fired
        {'pilot': 1}
        """
        if self.fired is not None:
            self.fired[stage] = self.fired.get(stage, 0) + 1


#: The learner as shipped: every stage on.
DEFAULT_OPTIONS = Options()

#: The switches' names, in the order the ablation turns them off.
SWITCHES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Options) if f.type == "bool")


@dataclass
class FloatState:
    """Everything one float learning run has built so far; each stage reads and extends it."""

    oracle: Oracle
    H: int
    verify: int
    seed: int
    lengths: Sequence[int]
    affine: bool
    options: Options
    unit: float = 0.0
    bound: int = 0
    ratios: list[tuple[int, int]] = field(default_factory=list)
    t: np.ndarray = field(default_factory=lambda: np.zeros(0))
    d: int = 0
    wide: int = 0  # the redundant probe columns beyond d (affine d + 1)
    U: np.ndarray = field(default_factory=lambda: np.zeros(0))
    B: np.ndarray = field(default_factory=lambda: np.zeros(0))
    f0: np.ndarray = field(default_factory=lambda: np.zeros(0))
    scale: float = 1.0
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0))
    discarded: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[tuple[np.ndarray, int]] = field(default_factory=list)
    piloted: list[int] = field(default_factory=list)  # the pilot pairs' indices in pairs
    Mt: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ans: np.ndarray = field(default_factory=lambda: np.zeros(0))
    asked_ties: dict[tuple[int, int], float] = field(default_factory=dict)
    tie_answers: list[dict[str, Any]] = field(default_factory=list)
    fits: Fits | None = None
    restarted: list[int] = field(default_factory=list)
    rank: int = 0
    dec: _Decoded | None = None
    replaced: list[dict[str, Any]] = field(default_factory=list)
    prtol: float = 0.0
    heads: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    beta_fit: float = 0.0
    estimate: float = 0.0
    # The estimate per parameter group (refine.refined_error_groups); None: not stated.
    estimate_groups: dict[str, Any] | None = None
    prediction: tuple[float, float] = (0.0, 0.0)
    figure: str = ""
    kind: str = ""
    polish_seqs: list[np.ndarray] = field(default_factory=list)
    polish_ans: np.ndarray = field(default_factory=lambda: np.zeros(0))
    refine_seqs: list[np.ndarray] = field(default_factory=list)
    refine_ans: np.ndarray = field(default_factory=lambda: np.zeros(0))
    refine_picks: list[int] | None = None  # the lean design's picks (refine.pick_sequences)
    candidate: MultiHeadAttention | None = None
    checked: Verification | None = None

    @property
    def decoded(self) -> _Decoded:
        """The decoding (set by the decoding stage; an error before it)."""
        if self.dec is None:
            raise RuntimeError("the decoding stage has not run")
        return self.dec
