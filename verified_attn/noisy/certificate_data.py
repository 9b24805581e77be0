"""Theorem 6.1's certificate data: every answer as given, the tolerance, the design, the intervals.

The checker :mod:`verified_attn.certificates.noisy` re-derives the intervals from these
answers with its own code.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from verified_attn.certificates.writer import RunRecord, dump_floats, fresh_section
from verified_attn.noisy.intervals import INTERVAL_PRECISION
from verified_attn.noisy.planning import A
from verified_attn.noisy.verification import ToleranceVerification
from verified_attn.serialize import dump_number, dump_rational

__all__ = ["NoisySetting", "noisy_certificate_data"]

THEOREM = "thm-6.1"


@dataclass(frozen=True)
class NoisySetting:
    """What a Theorem 6.1 run stated and chose: tolerance tau, w_bound, margin mu, the
    number of repeats, the design's name, its U and the probe scale b.

    >>> s = NoisySetting(Fraction(1, 100), Fraction(1), Fraction(1), 1, "paper", [[Fraction(1)]], Fraction(1))
    >>> s.noise()["tolerance"], s.design_section()["b"]
    ('1/100', '1/1')
    """

    tau: Fraction
    wbar: Fraction
    mu: Fraction
    repeats: int
    design: str
    U: list[list[Fraction]]
    b: Fraction

    def noise(self) -> dict[str, Any]:
        """The certificate's ``noise`` section."""
        return {
            "tolerance": dump_rational(self.tau),
            "w_bound": dump_rational(self.wbar),
            "margin": dump_rational(self.mu),
            "repeats": self.repeats,
            "stochastic": None,
        }

    def design_section(self) -> dict[str, Any]:
        """The certificate's ``design`` section."""
        return {
            "name": self.design,
            "U": [[dump_rational(q) for q in row] for row in self.U],
            "a": dump_rational(A),
            "b": dump_rational(self.b),
            "interval_precision": INTERVAL_PRECISION,
        }


def noisy_certificate_data(
    run: RunRecord,
    setting: NoisySetting,
    answers: tuple[list[list[float]], list[list[float]]],
    est: dict[str, Any],
    checked: ToleranceVerification | None,
) -> dict[str, Any]:
    """The certificate: every answer as the oracle gave it, tolerance, design, intervals.

    Checked by :mod:`verified_attn.certificates.noisy` (see there for what it re-derives).
    ``answers`` are the raw answers to [e_i] and to the probes; ``answers.W[k][j]`` lists
    the answers to [b u_k + a e_j; a e_j], ``answers.v[i]`` those to [e_i] (``repeats``
    each); ``verification.answers[i]`` those to the i-th fresh sequence. ``run`` holds no
    verification: the noisy rule's own section is written here.
    """
    d = len(setting.U)
    raw_v, raw_W = answers
    data = run.header("noisy", THEOREM, d)

    data["verified"] = checked is not None and checked.count > 0
    data["verification"] = fresh_section(
        "within-tolerance",
        checked,
        run.seed,
        [] if checked is None else [[dump_number(a) for a in row] for row in checked.raw_answers],
    )
    data.update(
        {
            "noise": setting.noise(),
            "design": setting.design_section(),
            "answers": {
                "v": [[dump_number(a) for a in row] for row in raw_v],
                "W": [
                    [[dump_number(a) for a in raw_W[k * d + j]] for j in range(d)] for k in range(d)
                ],
            },
            "result": {
                "exact": False,
                "parameters": {"W": dump_floats(est["W"]), "v": dump_floats(est["v"])},
                "enclosures": {
                    "W": {"lower": dump_floats(est["W_lower"]), "upper": dump_floats(est["W_upper"])},
                    "v": {"lower": dump_floats(est["v_lower"]), "upper": dump_floats(est["v_upper"])},
                    "W_error": dump_floats(est["W_error"]),
                    "v_error": dump_floats(est["v_error"]),
                },
            },
        }
    )
    return data
