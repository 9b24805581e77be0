"""The float multi-head learner: the pipeline of its stages."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from verified_attn.errors import ModelClassMismatch, NotIdentifiable, PrecisionExhausted
from verified_attn.models import MultiHeadAttention
from verified_attn.multi_head.canonical_bounds import (
    METHOD,
    THEOREM,
    follow_up_query_bound,
    parameter_count,
)
from verified_attn.multi_head.pipeline.asking import (
    ask_pairs,
)
from verified_attn.multi_head.pipeline.budget import (
    _within_parameter_tolerance,
    base_query_limit,
    conditioning_cost,
    extra_columns,
    float_query_bound,
    float_query_limit,
    float_ratios,
    polish_count,
    polish_wanted,
    precision_polish_count,
    redundancy,
)
from verified_attn.multi_head.pipeline.decode import (
    _decode_pooled,
)
from verified_attn.multi_head.pipeline.design import (
    _CONDITIONING_ANGLE,
    _CONDITIONING_FACTOR,
    _DOUBLE_UNIT,
    CONDITIONING_GROUPS,
    CONDITIONING_ROUNDS,
    box_precision,
    coarse,
    float_design,
    float_probe_matrix,
    float_sequence,
)
from verified_attn.multi_head.pipeline.fits import (
    _group_fits,
    _refit_groups,
)
from verified_attn.multi_head.pipeline.pilot import (
    _condition,
    _not_reproduced,
    _pilot,
    conditioning_partners,
    pilot_pairs,
)
from verified_attn.multi_head.pipeline.poles import (
    _refine,
)
from verified_attn.multi_head.pipeline.repairs import (
    _low_rank_restarts,
)
from verified_attn.multi_head.pipeline.result import (
    _certificate_data,
)
from verified_attn.multi_head.pipeline.verify import (
    _check_learning_fit,
    _design_answers,
    _parameter_error_estimate,
    _prediction_ratio,
    heads_error_estimate,
    joint_polish,
    polish_figures,
    prediction_check,
)
from verified_attn.multi_head.prediction_bound import (
    PREDICTION_SEQUENCES,
    PREDICTION_SIGMAS,
    joint_prediction_bound,
)
from verified_attn.multi_head.sequence_fit import (
    compress,
    fit_sequences,
    polish_sequences,
)
from verified_attn.oracle import Oracle
from verified_attn.recovery import MultiHeadRecovery
from verified_attn.verification import (
    fresh_sequences,
    verify_model,
)


def learn_float(
    oracle: Oracle,
    H: int,
    *,
    verify: int,
    seed: int,
    lengths: Sequence[int],
    affine: bool,
) -> MultiHeadRecovery:
    """The float path of :func:`~.canonical_learner.learn_multi_head` (arguments already
    validated there)."""
    # The box's unit roundoff: its design (coarse or not), the fits' rounding floors.
    unit = float(getattr(oracle.arithmetic, "unit_roundoff", _DOUBLE_UNIT))
    bound = float_query_limit(oracle.d, H, affine=affine, unit=unit)
    oracle.require_remaining(bound, verify, "learn_multi_head")
    ratios = float_ratios(H, unit=unit)
    n_grid, n_extra = 2 * H, redundancy(H)
    t = np.array([k / m for k, m in ratios])
    tie_answers: list[dict[str, Any]] = []
    with oracle.run() as run:
        d = oracle.d
        wide = extra_columns(d, H, affine, unit=unit)
        U, B, _ = float_design(d, seed, affine, extra=wide)
        ncols = len(B)
        with oracle.phase("F(0)"):
            f0 = np.array(oracle.query_many(B[:, None, :]), dtype=np.float64)
        scale, kept, discarded = _pilot(oracle, f0, ratios, H, seed, affine)
        U, B, pairs = float_design(d, seed, affine, scale, wide)
        Mt = float_probe_matrix(B, affine).T
        piloted = pilot_pairs(d, ncols)
        rest = [p for i, p in enumerate(pairs) if i not in set(piloted)]
        with oracle.phase("F(t)"):
            grid_ans = ask_pairs(oracle, rest, B, ratios[:n_grid])
        extra_ans = np.zeros((len(rest), 0))
        if n_extra:
            with oracle.phase("redundancy"):
                extra_ans = ask_pairs(oracle, rest, B, ratios[n_grid:])
        ans = np.empty((len(pairs), len(ratios)))
        ans[piloted] = kept  # the pilot's kept round: those pairs' answers
        others = [i for i in range(len(pairs)) if i not in set(piloted)]
        ans[others] = np.hstack([grid_ans, extra_ans])

        asked_ties: dict[tuple[int, int], float] = {}

        def ask_ties(kj: list[tuple[int, int]]) -> list[float]:
            # A tie link already asked is not asked again (a decoding after a conditioning
            # round meets the same ties): its row u_k is never replaced (below).
            new = list(dict.fromkeys(x for x in kj if x not in asked_ties))
            if new:
                seqs = [float_sequence(U[k], (B[0] + B[j]) / 2, 1) for k, j in new]
                with oracle.phase("tie links"):
                    measured = [float(y) for y in oracle.query_many(seqs)]
                for (k, j), y in zip(new, measured, strict=True):
                    asked_ties[(k, j)] = y
                    tie_answers.append({"k": k, "j": j, "answer": y})
            return [asked_ties[x] for x in kj]

        fits = _group_fits(f0, ans, t, H, d, unit, Mt=Mt)
        # Stalled groups restarted from the converged groups' low-rank head planes (no
        # query) before any is asked again.
        fits, restarted, rank = _low_rank_restarts(f0, ans, t, H, fits, Mt)
        dec = _decode_pooled(U, B, f0, ans, t, H, affine, oracle.arithmetic, ask_ties, fits)
        replaced: list[dict[str, Any]] = []
        # The adaptive phases' share of the bound (float_query_limit), less the pilot's.
        room = (
            bound
            - base_query_limit(d, H, affine=affine, unit=unit)
            - len(discarded) * d * len(ratios)
        )
        for _ in range(CONDITIONING_ROUNDS):
            if dec.estimate is not None or not dec.bad:
                break
            # Every failing group of this decoding is asked again in one round (each its own
            # record and cost), or none: a group left as it is keeps its fit (it depends on
            # its own answers only), so the decoding would fail again on it. Rows with tie
            # links cannot be asked again (the links were asked at the old u_k).
            again = sorted(set(dec.bad))
            cost = sum(conditioning_cost(d, H, affine, k, unit=unit) for k in again)
            if (
                cost > room
                or len(replaced) + len(again) > CONDITIONING_GROUPS
                or any(k in again for k, _ in asked_ties)
            ):
                break
            room -= cost
            # The redundant design turns each group's row toward one that stays; the square
            # design scales it (measured there: 6/10 learned at d = 8, H = 7, see above).
            partners = conditioning_partners(d, again, replaced) if wide else [None] * len(again)
            for k, j in zip(again, partners, strict=True):
                U, ans, old = _condition(oracle, U, B, ans, ratios, k, j)
                record: dict[str, Any] = {"k": k, "answers": old}
                if j is None:
                    record["factor"] = _CONDITIONING_FACTOR
                else:
                    record.update(factor=1.0, partner=j, angle=_CONDITIONING_ANGLE)
                replaced.append(record)
            fits = _refit_groups(f0, ans, t, H, unit, fits, again, Mt=Mt)
            fits, more, more_rank = _low_rank_restarts(f0, ans, t, H, fits, Mt)
            restarted, rank = restarted + more, max(rank, more_rank)
            dec = _decode_pooled(U, B, f0, ans, t, H, affine, oracle.arithmetic, ask_ties, fits)
        ambiguous = dec.ambiguous
        # The learning answers as rows (u, b, log k, F): F(0) rows carry log k = -inf.
        us = [np.zeros(d)] * ncols + [u for u, _ in pairs for _ in ratios]
        bs = [*B] + [B[j] for _, j in pairs for _ in ratios]
        logk = [-np.inf] * ncols + [math.log(k / m) for _ in pairs for k, m in ratios]
        ys = np.concatenate([f0, ans.ravel()])
        # Predictions are verified at rtol; the parameters are stated at the box's
        # parameter tolerance (rtol unless the box declares a looser one, e.g. float32).
        prtol = float(getattr(oracle.arithmetic, "parameter_rtol", oracle.arithmetic.rtol))
        polish = polish_count(d, H, affine, unit=unit)
        polish_seqs: list[np.ndarray] = []
        polish_ans = np.zeros(0)

        def sequence_polish(
            count: int, start: list[tuple[np.ndarray, ...]], start_beta: float
        ) -> tuple[list[tuple[np.ndarray, ...]], float, float, tuple[float, float], str]:
            # The heads start a fit of every parameter on every answer, the design's and
            # those of ``count`` random sequences, whose Jacobian is far better conditioned
            # than the u-groups' (sequence_fit); the figures are this fit's.
            nonlocal polish_seqs, polish_ans
            polish_seqs = polish_sequences(d, count, seed)
            with oracle.phase("polish"):
                polish_ans = np.array(oracle.query_many(polish_seqs), dtype=np.float64)
            design_seqs, design_ys = _design_answers(U, B, f0, ans, tie_answers, H, unit)
            seq_rows = compress([*design_seqs, *polish_seqs], [*design_ys, *polish_ans])
            fit = fit_sequences(start, start_beta, seq_rows, affine=affine)
            estimate, prediction, sigma_min = polish_figures(
                oracle.arithmetic, fit.heads, fit.beta, affine, seq_rows, seed, lengths
            )
            figure = (
                f"smallest singular value {sigma_min:.2e} of the Jacobian on all "
                f"{len(seq_rows)} answers, {count} of them on random sequences"
            )
            return fit.heads, fit.beta, estimate, prediction, figure

        def decoded_figures() -> tuple[
            list[tuple[np.ndarray, ...]], float, float, tuple[float, float], str, str
        ]:
            # The decoded heads with the figures of the joint polish (small boxes) or of the
            # u-groups; PrecisionExhausted over the parameter tolerance or the rule.
            if joint_polish(d, H, affine, len(ys)):
                # Small boxes: a dense joint polish on every answer (links and F(0) too).
                heads, beta_fit, residuals, sigma_min, sensitivity, rows = _refine(
                    dec.heads, dec.beta, (np.array(us), np.array(bs), np.array(logk), ys), affine
                )
                estimate = _parameter_error_estimate(
                    oracle.arithmetic, heads, beta_fit, residuals, ys, sigma_min, sensitivity, H
                )
                figure = f"smallest singular value {sigma_min:.2e} of the joint Jacobian"
                kind = "joint"
            else:
                heads, beta_fit, estimate = dec.heads, dec.beta, dec.estimate
                figure = f"smallest singular value {dec.sigma_min:.2e} of the u-group Jacobians"
                kind = "u-groups"
                # The same figure from the returned heads and the answers alone (what the
                # certificate checker recomputes): the stated tolerance covers both. (The
                # joint figure is not the u-groups' one: it uses every answer, links and
                # F(0) too, and is the smaller at (d, H) = (2, 3), 1.1e-6 against 1.6e-6.)
                estimate = max(
                    estimate,
                    heads_error_estimate(U, B, f0, ans, t, heads, beta_fit, unit, affine),
                )
            _within_parameter_tolerance(estimate, prtol, H, oracle.arithmetic, figure, dec.gap)
            # The predictions' own first-order bound, on the verification's sequences and
            # more from the same generator (none is asked): the parameter estimate bounds
            # each parameter, a prediction combines them all (the polish's: polish_figures).
            if kind == "joint":
                sequences = fresh_sequences(d, PREDICTION_SEQUENCES, seed=seed, lengths=lengths)
                noise = float(np.sqrt(np.sum(residuals**2) + np.sum((unit * np.abs(ys)) ** 2)))
                bounds = joint_prediction_bound(heads, sequences, affine, rows, noise, len(ys))
                prediction = _prediction_ratio(
                    oracle.arithmetic, heads, beta_fit if affine else 0.0, affine, sequences, bounds
                )
            else:
                prediction = prediction_check(
                    oracle.arithmetic, U, B, f0, ans, t, heads, beta_fit, affine, seed, lengths
                )
            return heads, beta_fit, estimate, prediction, figure, kind

        try:
            if dec.estimate is None:
                raise PrecisionExhausted(dec.failure)
            precision = precision_polish_count(d, H, affine, unit=unit)
            if polish:
                # A coarse (float32) box: always polished (the u-groups' figures are 1e-3).
                heads, beta_fit, estimate, prediction, figure = sequence_polish(
                    polish, dec.heads, dec.beta
                )
                kind = "sequences"
            else:
                try:
                    found = decoded_figures()
                except PrecisionExhausted as exc:
                    found, refusal = None, exc
                if polish_wanted(
                    None if found is None else found[2],
                    precision,
                    run.counts.learning,
                    bound,
                    follow_up_query_bound(d, H),
                ):
                    # The precision polish: the estimate asks for it, the rule allows it.
                    start = (found[0], found[1]) if found else (dec.heads, dec.beta)
                    heads, beta_fit, estimate, prediction, figure = sequence_polish(
                        precision, *start
                    )
                    kind = "sequences"
                elif found is None:
                    raise refusal
                else:
                    heads, beta_fit, estimate, prediction, figure, kind = found
            _within_parameter_tolerance(estimate, prtol, H, oracle.arithmetic, figure, dec.gap)
            heads.sort(key=lambda hd: tuple(hd[0].ravel()))  # the canonical order, by W row-major
            beta = beta_fit if affine else None
            candidate = MultiHeadAttention(
                [tuple(x.tolist() for x in hd) for hd in heads], beta=beta
            )
            try:
                where = "a learning query"
                _check_learning_fit(
                    oracle.arithmetic,
                    candidate,
                    f0,
                    ans,
                    tie_answers,
                    U,
                    B,
                    H,
                    affine,
                    (polish_seqs, polish_ans),
                )
                where = "a fresh sequence"
                checked = (
                    verify_model(
                        oracle,
                        candidate,
                        count=verify,
                        seed=seed,
                        lengths=lengths,
                        bias=beta if affine else 0.0,
                        what="the recovered canonical heads",
                    )
                    if verify
                    else None
                )
            except ModelClassMismatch as exc:
                # One miss shows the fit is wrong, not that the box is outside the class:
                # that needs a residual no H-head fit can remove (too_few_heads_float).
                raise _not_reproduced(
                    exc, where, H, oracle.arithmetic, estimate, figure, beta if affine else 0.0
                ) from exc
        except (ModelClassMismatch, PrecisionExhausted) as exc:
            if not ambiguous:
                raise
            # The fit failed after a matching step that was not clear-cut: that step is
            # the likelier reason, and the refusal names it.
            raise NotIdentifiable(
                f"{ambiguous[0]}"
                + (
                    f" (and {len(ambiguous) - 1} more ambiguous steps)"
                    if len(ambiguous) > 1
                    else ""
                )
                + f"; the fit from the best order then failed: {exc}; rerun with another seed"
            ) from exc
    counts = run.counts
    params: dict[str, Any] = {"heads": heads}
    if affine:
        params["beta"] = beta
    ties = counts.by_phase.get("tie links", 0)
    rtol = oracle.arithmetic.rtol
    extra = counts.by_phase.get("redundancy", 0)
    pilot = counts.by_phase.get("pilot", 0)
    conditioning = counts.by_phase.get("conditioning", 0)
    polished = counts.by_phase.get("polish", 0)
    over = counts.learning - follow_up_query_bound(oracle.d, H)
    why = (
        f"the coarse design's {wide} redundant probe columns"
        if wide and coarse(unit)
        else "the conditioning rounds" + (" and the precision polish" if polished else "")
    )
    past = f", not under it ({over:+d}) with {why}" if over >= 0 else ""
    notes = [
        f"canonical method (float ratio grid): {counts.learning} learning queries ({pilot} "
        f"pilot, {len(discarded)} rescaling rounds of {d} pairs discarded, u scale "
        f"{scale:.4g}; {conditioning} conditioning, {len(replaced)} u-groups asked again"
        + (
            f", {len(restarted)} restarted from the other groups' rank-{rank} head planes"
            if restarted
            else ""
        )
        + "; "
        f"{extra} redundant, {ties} tie links, {polished} polish), <= {bound} (without ties, "
        "rescaling or a precision polish "
        f"{float_query_bound(oracle.d, H, affine=affine, unit=unit)}; the follow-up's "
        "4Hd^2 - 2H + 1 = "
        f"{follow_up_query_bound(oracle.d, H)}{past}); float64 decoding, every learning "
        f"answer reproduced at rtol {rtol:g}",
        f"{H} canonical heads ({box_precision(oracle.arithmetic)} answers; not exact); "
        f"first-order parameter error estimate {estimate:.2e} relative (the worst case of "
        f"one parameter under the answers' noise; <= the parameter "
        f"tolerance {prtol:g} stated for the heads; predictions verified at rtol {rtol:g}, "
        f"and to first order on {PREDICTION_SEQUENCES} sequences of the verification's "
        f"generator ({PREDICTION_SIGMAS:g} standard deviations of the prediction error at most "
        f"{prediction[0]:.3g} x what the rule allows, the worst case {prediction[1]:.3g} x); "
        f"residual norm / {figure}; closest score gap {dec.gap:.2e})",
    ]
    certificate = functools.partial(
        _certificate_data,
        oracle.arithmetic,
        U,
        B,
        {
            "F0": list(f0),
            "F": ans.tolist(),
            "ties": tie_answers,
            "ratios": ratios,
            "pilot": discarded,
            "scale": scale,
            "conditioning": replaced,
            "restarts": {"groups": restarted, "rank": rank},
            "polish": polish_ans.tolist(),
        },
        heads,
        beta,
        H,
        affine,
        checked,
        seed,
        counts,
        bound,
        (prtol, estimate, kind),
        {
            "sequences": PREDICTION_SEQUENCES,
            "seed": seed,
            "lengths": list(lengths),
            "sigmas": PREDICTION_SIGMAS,
            "ratio": prediction[0],
            "worst_case": prediction[1],
        },
    )
    return MultiHeadRecovery.from_run(
        counts,
        theorem=THEOREM,
        method=METHOD,
        parameters=params,
        learned_model=candidate,
        arithmetic="float",
        precision=None,
        exact=False,
        bound=bound,
        parameter_count=parameter_count(oracle.d, H, affine),
        seed=seed,
        rounds=1 + (1 if ties else 0),
        verification=checked,
        notes=notes,
        certificate_data=certificate,
        parameter_rtol=prtol,
        parameter_error_estimate=estimate,
    )


def too_few_heads_float(
    oracle: Oracle, H: int, seed: int, affine: bool
) -> ModelClassMismatch | None:
    """After a float decoding failure: does the box have more than ``H`` heads?

    Asks the first pair's ``F(0..2H + 1)`` again plus one sample (phase ``"diagnosis"``,
    counted) and fits a degree-``H`` rational function to ``F(0..2H)``: with at most ``H``
    heads its value at ``k = 2H + 1`` misses the answer by a few units of the box's
    roundoff; a miss over 2^20 of them says the box has more heads (a float test: the
    residual is reported, not certified).
    None otherwise (the failure had another cause).
    """
    _, B, pairs = float_design(oracle.d, seed, affine)
    u, j = pairs[0]
    k = np.arange(2 * H + 2, dtype=np.float64)
    with oracle.phase("diagnosis"):
        F = np.array(
            oracle.query_many([B[j][None, :]] + [float_sequence(u, B[j], int(i)) for i in k[1:]]),
            dtype=np.float64,
        )
    m = H
    A = np.hstack(
        [
            k[: 2 * m + 1, None] ** np.arange(m + 1),
            -F[: 2 * m + 1, None] * k[: 2 * m + 1, None] ** np.arange(1, m + 1),
        ]
    )
    try:
        sol = np.linalg.solve(A, F[: 2 * m + 1])
    except np.linalg.LinAlgError:
        return None
    P = np.polynomial.Polynomial(sol[: m + 1])
    Q = np.polynomial.Polynomial(np.concatenate([[1.0], sol[m + 1 :]]))
    predicted = float(P(k[-1]) / Q(k[-1]))
    residual = float(F[-1]) - predicted
    scale = float(np.max(np.abs(F))) or 1.0
    unit = getattr(oracle.arithmetic, "unit_roundoff", None) or 2.0**-53
    threshold = 2**20 * unit * scale  # a correct fit misses by a few ulps, not a million
    if not abs(residual) > threshold:
        return None
    return ModelClassMismatch(
        f"the box has more than {H} heads (the fit with {H} heads leaves residual "
        f"{residual:.3g} at k = {2 * H + 1}, over 2^20 units of the box's roundoff "
        f"({threshold:.2g}); try heads={H + 1}, or max_heads= an upper bound in exact or "
        "certified mode)"
    )
