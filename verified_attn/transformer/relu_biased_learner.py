"""The biased ReLU FFN learner: line search, verification, result (exact, certified, float).

>>> import verified_attn as va
>>> from verified_attn.models import ReluFFN
>>> g = ReluFFN([[1, -2], [3, 1]], [2, -1], a=[1, 4], b=-3)
>>> rec = learn_biased_relu_ffn(va.Oracle(g, "float"))
>>> rec.exact, rec.verified, rec.network.width, rec.verification_error < 1e-9
(False, True, 2, True)
>>> rec.queries == rec.bound, rec.attempts       # the count formula, summed over lines
(True, 1)

The method and the count are described in :mod:`verified_attn.transformer.relu_biased`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Unpack

import numpy as np

from verified_attn.certificates.writer import RunRecord
from verified_attn.errors import ModelClassMismatch
from verified_attn.learner_options import ExactOptions
from verified_attn.oracle import Oracle
from verified_attn.progress import reporting
from verified_attn.recovery import ReluFFNRecovery
from verified_attn.serialize import dump_number, dump_rational
from verified_attn.transformer.common import first_success, learner_arguments, verify_network
from verified_attn.transformer.relu_biased import (
    Answers,
    BiasedReluNetwork,
    Faint,
    Num,
    Retry,
    biased_ffn_query_count,
)
from verified_attn.transformer.relu_biased_line import FloatLineSearch, learn_line
from verified_attn.transformer.relu_biased_refine import refine_line
from verified_attn.validation import (
    check_int,
)
from verified_attn.verification import (
    Verification,
)

__all__ = [
    "BiasedReluFFNRecovery",
    "SearchLine",
    "biased_ffn_query_count",
    "learn_biased_relu_ffn",
    "window_assumption",
]

THEOREM = "ffn/relu-biased"
#: Most lines a call may try (each widens the window 16-fold and doubles the grid).
MAX_ATTEMPTS = 6
#: The first line's window [-R, R] in units of the random line's coordinates (1/256).
RADIUS = 64


@dataclass(frozen=True)
class SearchLine:
    """The line ``x0 + t u`` a biased result was learned on, searched for |t| <= ``radius``:
    a neuron whose hyperplane crosses it only farther out (or never) is not seen.

    >>> from fractions import Fraction as F
    >>> line = SearchLine((F(0), F(1)), (F(1), F(0)), F(64))
    >>> line.crossing((F(1), F(0)), F(-3)), line.crossing((F(0), F(1)), F(2))
    (Fraction(3, 1), None)
    >>> line.holds([(((F(1), F(0)), F(-3)), F(2))]), line.holds([(((F(1), F(0)), F(-65)), F(2))])
    (True, False)
    """

    x0: tuple[Num, ...]
    u: tuple[Num, ...]
    radius: Num

    def crossing(self, n: Any, c: Any) -> Fraction | None:
        """The t where ``n^T (x0 + t u) + c = 0`` (exactly, in Fractions); None if the
        hyperplane is parallel to the line."""
        nu = sum((Fraction(a) * Fraction(b) for a, b in zip(n, self.u, strict=True)), Fraction(0))
        nx = sum((Fraction(a) * Fraction(b) for a, b in zip(n, self.x0, strict=True)), Fraction(0))
        return None if nu == 0 else -(nx + Fraction(c)) / nu

    def holds(self, neurons: Any) -> bool:
        """Whether every hyperplane of ``neurons`` (``((n, c), gamma)`` pairs, as in a
        :class:`~verified_attn.transformer.relu_biased.BiasedReluNetwork`) crosses the line
        within |t| <= radius: the window assumption, checked against a known network."""
        ts = [self.crossing(n, c) for (n, c), _ in neurons]
        return all(t is not None and abs(t) <= Fraction(self.radius) for t in ts)


@dataclass
class BiasedReluFFNRecovery(ReluFFNRecovery):
    """A ReLU FFN with biases in canonical form: parameters ``A`` (d x m), ``w_o`` (m x 1),
    ``a`` (m x 1) and ``b`` of the canonical network as a biased
    :class:`~verified_attn.models.ReluFFN` (exact SymPy matrices in exact and certified
    mode, float64 arrays in float mode). ``network`` is the canonical form
    (:class:`~verified_attn.transformer.relu_biased.BiasedReluNetwork`); ``line_counts``
    the last line's pieces, half pieces, probes and kinks, from which
    :func:`~verified_attn.transformer.relu_biased.biased_ffn_query_count` gives its
    learning queries; ``search_line`` the last line and window searched (a
    :class:`SearchLine`, the data of the window assumption every result states).
    """

    kind: ClassVar[str] = "relu-ffn-biased"
    search_line: SearchLine | None = None

    @property
    def a(self) -> Any:
        return self.parameters["a"]

    @property
    def b(self) -> Any:
        return self.parameters["b"]


def learn_biased_relu_ffn(
    oracle: Oracle,
    *,
    attempts: int = 3,
    **options: Unpack[ExactOptions],
) -> BiasedReluFFNRecovery:
    """Learn ``g(x) = f([x]) = w_o^T ReLU(A^T x + a) + b`` in canonical form.

    Learning sends only length-1 queries along one random line (see
    :mod:`verified_attn.transformer.relu_biased`); ``verify`` fresh sequences of the given
    ``lengths`` then check the learned :class:`~verified_attn.models.ReluFFN` (which reads
    the last token; ``lengths=(1,)`` checks only the length-1 function). ``attempts``:
    lines to try, each with a 16-fold wider window and a finer initial grid;
    ``denominator_bound``: certified answers are reconstructed as the unique rational with
    at most this denominator (default
    :func:`~verified_attn.transformer.relu.default_denominator_bound`).

    Float mode: a line whose network the fresh sequences refute has its thin cells
    re-measured at wide points first
    (:func:`~verified_attn.transformer.relu_biased_refine.refine_line`, d + 1 queries per
    cell), and the network checked again on the same sequences, before the next line.

    ``bound`` is :func:`~verified_attn.transformer.relu_biased.biased_ffn_query_count` of
    the lines searched (plus d + 1 per re-measured cell; the count is derived from the
    search, not fixed in advance);
    ``parameter_count`` is ``(m' + 1)(d + 1)`` for the canonical width m'.

    Raises :class:`ModelClassMismatch` when no line gives a network the fresh sequences
    confirm (not a ReLU network, e.g. GELU, or answers that no network explains),
    :class:`PrecisionExhausted` when a certified answer does not reconstruct,
    :class:`InvalidArgument` for bad arguments.
    """
    verify, seed, lengths, denominator_bound, progress = learner_arguments(
        oracle, "learn_biased_relu_ffn", options, rational=False
    )
    attempts = check_int(attempts, "attempts", low=1, high=MAX_ATTEMPTS)
    arith = oracle.arithmetic
    answers = Answers(oracle, denominator_bound)
    rng = np.random.default_rng(seed)
    faint: list[Faint] = []
    with reporting(oracle, progress, "learn_biased_relu_ffn"), oracle.run() as run, arith.context():
        try:
            (net, search, checked), failed = first_success(
                attempts,
                lambda i: _line(answers, rng, i, (verify, seed + i, lengths), faint),
                (Retry, _Refuted),
                "no one-hidden-layer ReLU network with biases fits the oracle after "
                f"{attempts} lines",
            )
        except ModelClassMismatch as exc:
            if not faint:
                raise
            # A line that bent too faintly for a kink: its witness, with every line's reason.
            w = faint[0].refusal
            raise ModelClassMismatch(
                str(exc), query=w.query, observed=w.observed, expected=w.expected
            ) from exc
    counts = {
        "pieces": search.pieces,
        "half_pieces": search.half_pieces,
        "probes": search.probes,
        "kinks": search.found,
    }
    # Every line searched counts, refuted or not (a Retry before any query has no search).
    tried = [search, *(getattr(exc, "search", None) for exc in failed)]
    bound = sum(line.queries() for line in tried if line is not None)
    reasons = [str(exc) for exc in failed]
    return _result(answers, run.counts, net, checked, counts, bound, reasons, seed, search)


def _line(
    answers: Answers,
    rng: np.random.Generator,
    attempt: int,
    check: tuple[int, int, Any],
    faint: list[Faint],
) -> tuple[BiasedReluNetwork, Any, Verification | None]:
    """Line ``attempt``: its network, search and verification; Retry if the search fails
    (a :class:`Faint` one also kept in ``faint``), _Refuted (carrying the search) if the
    fresh sequences refute the network."""
    verify, seed, lengths = check
    oracle = answers.oracle
    with oracle.phase("ffn"):
        try:
            net, search = learn_line(
                answers,
                oracle.d,
                rng,
                radius=RADIUS * 16**attempt,
                grid=2**attempt,
                shrink=(2 if answers.arith.name == "float" else 8) * attempt,
            )
        except Faint as exc:
            faint.append(exc)
            raise
    try:
        checked = verify_network(
            oracle, net, count=verify, seed=seed, lengths=lengths, retry=_Refuted
        )
    except _Refuted as exc:
        exc.search = search
        if not isinstance(search, FloatLineSearch):
            raise
        # Float: thin cells re-measured at wide points, then checked again (same sequences).
        try:
            with oracle.phase("ffn"):
                net = refine_line(search)
            checked = verify_network(
                oracle, net, count=verify, seed=seed, lengths=lengths, retry=_Refuted
            )
        except (Retry, _Refuted) as again:
            again.search = search  # its queries count in the bound
            raise
    return net, search, checked


#: How every biased FFN result's window assumption opens (the checker looks for it).
WINDOW_ASSUMPTION = "every hyperplane of g crosses the search line"


def window_assumption(search: Any) -> str:
    """The assumption a result of the line ``search`` rests on: the kinks it could see.

    A neuron's hyperplane n^T x + c = 0 that meets the line x0 + t u only at |t| > R (or
    is parallel to it) bends g nowhere on the searched segment, so no query along it can
    show that neuron, and fresh sequences that never cross the hyperplane cannot either.
    """
    def show(v: Any) -> str:
        return "[" + ", ".join(str(x) for x in v) + "]"

    return (
        f"{WINDOW_ASSUMPTION} x0 + t u within |t| <= {search.radius} (x0 = {show(search.x0)}, "
        f"u = {show(search.u)}): a neuron whose hyperplane meets that line only farther out, "
        "or never, is not seen by the search"
    )


class _Refuted(Exception):
    """The fresh sequences refute this line's network (``search``: the line's search)."""

    search: Any = None


def _parameters(net: BiasedReluNetwork, exact: bool) -> dict[str, Any]:
    model = net.model()
    if exact:
        return {"A": model.A, "w_o": model.w_o, "a": model.a, "b": model.b}
    return {
        "A": np.array(model.A.tolist(), dtype=np.float64),
        "w_o": np.array(model.w_o, dtype=np.float64).reshape(-1),
        "a": np.array(model.a, dtype=np.float64).reshape(-1),
        "b": float(model.b),
    }


def _result(
    answers: Answers,
    counts: Any,
    net: BiasedReluNetwork,
    checked: Verification | None,
    line_counts: dict[str, int],
    bound: int,
    reasons: list[str],
    seed: int,
    search: Any,
) -> BiasedReluFFNRecovery:
    arith = answers.arith
    exact = arith.name != "float"
    notes = [f"line {i + 1} failed: {r}" for i, r in enumerate(reasons)]
    assumptions = [window_assumption(search), *answers.assumptions()]
    return BiasedReluFFNRecovery.from_run(
        counts,
        theorem=THEOREM,
        parameters=_parameters(net, exact),
        learned_model=net.model(),
        arithmetic=arith.name,
        precision=arith.precision,
        exact=exact,
        bound=bound,
        parameter_count=net.parameter_count,
        seed=seed,
        rounds=0,
        verification=checked,
        assumptions=assumptions,
        notes=notes,
        certificate_data=None
        if not exact
        else functools.partial(
            certificate_data,
            RunRecord(arith, seed, counts, bound, checked, assumptions),
            net,
            dict(answers.raw),
            answers.D,
        ),
        network=net,
        attempts=len(reasons) + 1,
        line_counts=line_counts,
        search_line=SearchLine(search.x0, search.u, search.radius),
    )


def certificate_data(
    run: RunRecord,
    net: BiasedReluNetwork,
    raw: dict[Any, Any],
    denominator_bound: int,
) -> dict[str, Any]:
    """The ``relu-ffn-biased`` certificate (exact and certified results): every length-1
    answer exactly as given (``answers``: ``{"x", "y"}``) and the canonical form
    (``constant``, ``linear``, ``neurons`` as ``{"n", "c", "gamma"}``) with the biased
    ReluFFN ``A``, ``w_o``, ``a``, ``b`` built from it. Checker:
    :func:`verified_attn.certificates.relu_biased.verify`.
    """
    model = net.model()
    data = run.header("relu-ffn-biased", THEOREM, net.d)
    data.update(
        {
            "denominator_bound": denominator_bound,
            "answers": [
                {"x": [dump_rational(q) for q in x], "y": dump_number(y)} for x, y in raw.items()
            ],
            "result": {
                "exact": True,
                "constant": dump_rational(net.constant),
                "linear": [dump_rational(q) for q in net.linear],
                "neurons": [
                    {
                        "n": [dump_rational(q) for q in n],
                        "c": dump_rational(c),
                        "gamma": dump_rational(g),
                    }
                    for (n, c), g in net.neurons
                ],
                "A": [[dump_rational(q) for q in row] for row in model.A.tolist()],
                "w_o": [dump_rational(q) for q in model.w_o],
                "a": [dump_rational(q) for q in model.a],
                "b": dump_rational(model.b),
            },
        }
    )
    return data
