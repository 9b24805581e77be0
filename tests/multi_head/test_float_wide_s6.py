"""The float design's redundant probe columns (six heads on): their count, the fit in (r, w)
with scores linear in b, its conditioning figure, and the learner and certificate on them."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from refine_pin import before_refine

# The sibling test modules' helpers (pytest puts this directory on sys.path).
from test_float_adaptive_s4 import _fresh_error, stall_first_decoding
from test_float_extraction_s3 import _box, _model

import verified_attn as va
from verified_attn.errors import CertificateError
from verified_attn.multi_head.canonical_bounds import parameter_count
from verified_attn.multi_head.canonical_learner import follow_up_query_bound, learn_multi_head
from verified_attn.multi_head.float_fit import (
    group_model,
    sigma_min_groups,
)
from verified_attn.multi_head.float_linear_fit import (
    fit_linear_groups,
    linear_jacobian,
    linear_start,
    sigma_min_linear,
)
from verified_attn.multi_head.float_pilot import MAX_ROUNDS, pilot_rounds
from verified_attn.multi_head.pipeline.budget import (
    PRECISION_REQUIRED,
    PRECISION_TARGET,
    REDUNDANT_FROM_HEADS,
    _limit_at,
    adaptive_room,
    base_query_limit,
    conditioning_cost,
    extra_columns,
    float_query_bound,
    float_query_limit,
    lean_design,
    precision_polish_count,
    probe_columns,
    redundancy,
)
from verified_attn.multi_head.pipeline.design import float_design, random_float_box
from verified_attn.multi_head.pipeline.pilot import conditioning_partners
from verified_attn.serialize import dump_number, load_number

SIZES = [
    (d, H, a)
    for d in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
    for H in range(1, 9)
    for a in (False, True)
]


@pytest.mark.parametrize(
    ("d", "H", "affine", "extra"),
    [
        (8, 2, False, 0),  # no room for a column: the square design
        (8, 3, False, 1),
        (8, 4, True, 1),
        (8, 5, False, 2),
        (16, 4, False, 6),
        (32, 4, False, 16),
        (8, 6, False, 1),  # the lean design (pipeline.budget.lean_design)
        (8, 6, True, 1),
        (8, 7, False, 1),
        (8, 8, False, 1),
        (16, 6, True, 7),
        (16, 8, True, 8),
        (16, 8, False, 9),  # past the lean design's 600 parameters: the full one
        (24, 6, False, 14),
        (32, 8, True, 21),
        (4, 6, False, 0),
        (2, 8, True, 0),
    ],
)
def test_extra_columns_golden(d: int, H: int, affine: bool, extra: int) -> None:
    assert extra_columns(d, H, affine) == extra
    assert probe_columns(d, H, affine) == d + int(affine) + extra
    assert len(float_design(d, 0, affine, extra=extra)[1]) == probe_columns(d, H, affine)


def test_golden_counts_of_the_wide_design() -> None:
    # d = 16, H = 6 affine (1729 parameters, past the lean design's 600): 24 columns,
    # 16 x 24 + 15 pairs x 13 + 24 F(0) = 5211.
    assert extra_columns(16, 6, True) == 7 and not lean_design(16, 6, True)
    assert float_query_bound(16, 6, affine=True) == 24 + (16 * 24 + 15) * 13 == 5211
    # No tie links in the redundant design; the conditioning's worst case on top: two
    # pilot rounds of 16 pairs and 8 u-groups of 24 pairs and 15 links, 13 queries each.
    assert base_query_limit(16, 6, affine=True) == 5211
    assert float_query_limit(16, 6, affine=True) == 5211 + 2 * 16 * 13 + 8 * 39 * 13 == 9683
    assert adaptive_room(16, 6, True) == 6133 - 1 - 5211 == 921
    # Plain d = 8, H = 6 takes the lean design: 9 columns, 2H = 12 ratios a pair (no
    # t = 1): 8 x 9 + 7 pairs x 12 + 9 F(0) = 957, the rest of the count the refinement's.
    assert lean_design(8, 6, False)
    assert float_query_bound(8, 6) == base_query_limit(8, 6) == 9 + (8 * 9 + 7) * 12 == 957
    assert float_query_limit(8, 6) == 957 + 2 * 8 * 12 + 8 * 16 * 12 == 2685
    assert adaptive_room(8, 6, False) == 1525 - 1 - 957 == 567
    # Affine d = 8, H = 6 too (from two heads on): 10 columns, 8 x 10 + 7 pairs x 12 + 10.
    assert lean_design(8, 6, True) and extra_columns(8, 6, True) == 1
    assert float_query_bound(8, 6, affine=True) == 10 + (8 * 10 + 7) * 12 == 1054
    assert float_query_limit(8, 6, affine=True) == 1054 + 2 * 8 * 12 + 8 * 17 * 12 == 2878
    assert adaptive_room(8, 6, True) == 1525 - 1 - 1054 == 470


def test_the_lean_design_count_is_its_formula() -> None:
    # The lean design (float64 boxes up to 600 parameters, plain from six heads on, affine
    # from two, where the full design has a redundant column): d + 1 (affine d + 2)
    # columns' F(0), then d (columns - 1) + d - 1 pairs of 2H ratios each, no tie links,
    # at least P / 8 under the follow-up's count.
    for affine in (False, True):
        cells = [(d, H) for d in range(1, 33) for H in range(1, 17) if lean_design(d, H, affine)]
        for d, H in cells:
            cols = d + 1 + int(affine)
            count = cols + 2 * H * (d * cols + d - 1)
            assert float_query_bound(d, H, affine=affine) == base_query_limit(d, H, affine=affine)
            assert float_query_bound(d, H, affine=affine) == count
            left = follow_up_query_bound(d, H) - 1 - count
            assert 8 * left >= parameter_count(d, H, affine)
            # The full design's t = 1 sample on every pair would miss the formula.
            assert count + (d * cols + d - 1) != float_query_bound(d, H, affine=affine)
    plain = [(d, H) for d in range(1, 33) for H in range(1, 17) if lean_design(d, H, False)]
    assert (8, 6) in plain and (8, 8) in plain and (16, 6) not in plain and (8, 5) not in plain
    # Affine: nn.MultiheadAttention E = 8, H = 4, E = 12, H = 3 and E = 16, H = 2; not
    # E = 8, H = 2 (the full design has no redundant column) nor E = 16, H = 8 (2305).
    assert lean_design(8, 4, True) and lean_design(12, 3, True) and lean_design(16, 2, True)
    assert not lean_design(8, 2, True) and not lean_design(16, 8, True)
    # Never for float32, plain boxes under six heads or past 600 parameters.
    assert not lean_design(8, 6, False, unit=2.0**-24) and not lean_design(8, 4, True, unit=2.0**-24)
    assert not lean_design(8, 5, False) and not lean_design(16, 8, False)
    assert redundancy(6, 16, True) == 1 and extra_columns(24, 6, False) == 14


@pytest.mark.parametrize(("d", "H", "affine"), SIZES)
def test_the_columns_leave_the_pilot_its_rounds_under_the_follow_up(
    d: int, H: int, affine: bool
) -> None:
    extra = extra_columns(d, H, affine)
    assert 0 <= extra <= d
    if H < REDUNDANT_FROM_HEADS:
        assert extra == 0
    if lean_design(d, H, affine):
        # One column, no t = 1 sample; the refinement gets at least P / 8 of the rest.
        assert extra == 1 and redundancy(H, d, affine) == 0
        left = follow_up_query_bound(d, H) - 1 - base_query_limit(d, H, affine=affine)
        assert 8 * left >= parameter_count(d, H, affine)
        return
    if not extra:
        return
    per_pair = 2 * H + redundancy(H)
    reserve = (MAX_ROUNDS - 1) * d * per_pair
    cap = follow_up_query_bound(d, H) - 1
    assert base_query_limit(d, H, affine=affine) + reserve <= cap
    assert pilot_rounds(d, H, affine) == MAX_ROUNDS
    # The sizing counts d tie links per column (as the design was measured), though the
    # redundant design asks none; one column more breaks the reserve (unless d binds).
    column = 1 + d * per_pair + d
    assert _limit_at(d, H, affine, 0) + extra * column + reserve <= cap
    if extra < d:
        assert _limit_at(d, H, affine, 0) + (extra + 1) * column + reserve > cap


def _plane(seed: int, J: int = 5, p: int = 3, H: int = 2) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    Mt = rng.standard_normal((J, p))
    r = rng.standard_normal((1, H)) * 2
    w = rng.standard_normal((1, p, H))
    lt = np.log(2.0 ** np.linspace(-6, 6, 2 * H + 1))
    return lt, Mt, r, w


def test_linear_jacobian_matches_finite_differences() -> None:
    lt, Mt, r, w = _plane(0)
    J = linear_jacobian(lt, Mt, r, w)[0]
    H, n = r.shape[1], r.shape[1] + w.size

    def f(theta: np.ndarray) -> np.ndarray:
        rr, ww = theta[:H][None], theta[H:].reshape(w.shape)
        return group_model(lt, rr, np.einsum("ja,gah->gjh", Mt, ww))[0].ravel()

    theta = np.concatenate([r[0], w.ravel()])
    fd = np.empty((J.shape[0], n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = 1e-6
        fd[:, i] = (f(theta + e) - f(theta - e)) / 2e-6
    assert np.abs(J - fd).max() < 1e-8
    # A wrong variant (w's columns in the other order, h * p + a) fails the same check.
    p = w.shape[1]
    wrong = np.concatenate(
        [J[:, :H], J[:, H:].reshape(-1, p, H).transpose(0, 2, 1).reshape(-1, p * H)], axis=1
    )
    assert np.abs(wrong - fd).max() > 1e-3


def test_fit_linear_groups_reaches_the_floor_of_noisy_answers() -> None:
    lt, Mt, r, w = _plane(1, J=7, p=3, H=3)
    Y = group_model(lt, r, np.einsum("ja,gah->gjh", Mt, w))
    noise = np.random.default_rng(2).standard_normal(Y.shape) * 1e-13
    fit = fit_linear_groups(lt, Y + noise, Mt, r + 0.03, w - 0.03)
    assert fit.residual[0] <= 2 * np.linalg.norm(noise)
    assert np.abs(fit.r - r).max() < 1e-9
    assert np.abs(fit.s - np.einsum("ja,gah->gjh", Mt, w)).max() < 1e-9


def test_linear_start_leaves_out_a_pair_off_the_plane() -> None:
    _, Mt, _, w = _plane(3, J=8, p=3, H=3)
    s = np.einsum("ja,gah->gjh", Mt, w)
    s[0, 5] = s[0, 5, [1, 0, 2]]  # pair 6's first two heads swapped (a wrong basin)
    assert np.abs(linear_start(Mt, s) - w).max() < 1e-12
    # The wrong variant: least squares over every pair is biased by the swapped pair.
    plain = np.linalg.lstsq(Mt, s[0], rcond=None)[0]
    assert np.abs(plain - w[0]).max() > 1e-2


def test_the_plane_pins_a_pair_with_close_scores() -> None:
    # One pair's two scores 1e-4 apart: the free fit's sigma_min (scores per pair) falls
    # with the gap, the linear fit's (w shared by the pairs) does not.
    lt, Mt, r, w = _plane(4, J=6, p=3, H=2)
    s = np.einsum("ja,gah->gjh", Mt, w)
    # Move w so that pair 1's two scores nearly coincide: w_2 += (s_1 - s_2 + 1e-4) m / |m|^2.
    m = Mt[0]
    w[0, :, 1] += (s[0, 0, 0] - s[0, 0, 1] + 1e-4) * m / (m @ m)
    s = np.einsum("ja,gah->gjh", Mt, w)
    assert abs(s[0, 0, 0] - s[0, 0, 1]) < 2e-4
    free = float(sigma_min_groups(lt, r, s)[0])
    lin = float(sigma_min_linear(lt, Mt, r, w)[0])
    assert lin > 100 * free


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_a_six_head_box_is_learned_with_the_wide_design_and_its_certificate_rechecks() -> None:
    model = random_float_box(8, 6, 0)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=6, seed=0)
    # The lean design (pipeline.budget.lean_design): one redundant column, no t = 1; the
    # precision polish (the decoded estimate is above 1e-12).
    polish = precision_polish_count(8, 6, False)
    assert before_refine(rec, 8, 6) == float_query_bound(8, 6) + polish == 957 + 54
    assert rec.parameter_error_estimate <= rec.parameter_rtol
    assert _fresh_error(rec, model, 8, 0) <= rec.verification.rtol
    cert = rec.certificate()
    assert len(cert["design"]["B"]) == probe_columns(8, 6, False) == 9
    assert va.verify_certificate(cert).ok
    # Without its redundant column the design is not this one: refused by name.
    bad = copy.deepcopy(cert)
    bad["design"]["B"] = bad["design"]["B"][:8]
    with pytest.raises(CertificateError, match=r"design\.B"):
        va.verify_certificate(bad)
    # The redundant column swapped with the last square one: the stored answers no longer
    # match the queries.
    moved = copy.deepcopy(cert)
    rows = moved["design"]["B"]
    rows[7], rows[8] = rows[8], rows[7]
    with pytest.raises(CertificateError):
        va.verify_certificate(moved)
    # A tie answer in it: the redundant design asks none (the plane fixes the head order).
    tied = copy.deepcopy(cert)
    tied["answers"]["ties"] = [{"k": 0, "j": 1, "answer": tied["answers"]["F0"][0]}]
    with pytest.raises(CertificateError, match="asks no tie links"):
        va.verify_certificate(tied)


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_the_plane_needs_no_tie_link_for_two_close_scores() -> None:
    # random_float_box(8, 6, 1): two true scores of one pair 4.8e-5 apart. The square design
    # finds a second solution there and asks a tie link (test_float_decoder_s4); with the
    # redundant columns the other pairs fix that pair's scores: no tie link, the design's
    # count. (Measured: fresh error 3.0e-11, estimate 3.9e-10.)
    model = random_float_box(8, 6, 1)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=6, seed=1)
    assert "tie links" not in rec.queries_by_phase
    # The design and the precision polish (the decoded estimate was above its target).
    assert before_refine(rec, 8, 6) == float_query_bound(8, 6) + precision_polish_count(8, 6, False)
    assert _fresh_error(rec, model, 8, 1) <= 1e-10


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_a_square_design_local_minimum_is_learned_at_once() -> None:
    # 7 heads at d = 8, heads from default_rng(5000) (the independent check's seed 0): the
    # square design needs two conditioning rounds (test_float_many_heads_s5); the lean one
    # (a redundant column, pipeline.budget.lean_design) learns it from its first decoding.
    model = _model(_box(8, 7, 5000))
    rec = learn_multi_head(va.Oracle(model, "float"), heads=7, seed=0)
    assert "conditioning" not in rec.queries_by_phase
    polish = precision_polish_count(8, 7, False)  # asked: the decoded estimate > target
    assert before_refine(rec, 8, 7) == float_query_bound(8, 7) + polish == 1115 + 63
    assert rec.queries < follow_up_query_bound(8, 7)
    assert _fresh_error(rec, model, 8, 0) <= 1e-10
    assert va.verify_certificate(rec.certificate()).ok


def test_the_structured_normal_equations_are_the_dense_ones() -> None:
    # _linear_normal forms J^T J and J^T R from the pairs' H x H blocks (the fit's inner
    # loop); they must equal the products of the dense linear_jacobian.
    from verified_attn.multi_head.float_linear_fit import (
        _linear_normal,
    )

    rng = np.random.default_rng(7)
    lt, Mt, r, w = _plane(5, J=7, p=4, H=3)
    r, w = np.repeat(r, 2, axis=0), np.concatenate([w, w + 0.1])
    R = rng.standard_normal((2, Mt.shape[0] * len(lt)))
    A, g = _linear_normal(lt, Mt, R, r, w)
    J = linear_jacobian(lt, Mt, r, w)
    assert np.abs(A - J.swapaxes(1, 2) @ J).max() < 1e-12
    assert np.abs(g - (J.swapaxes(1, 2) @ R[..., None])[..., 0]).max() < 1e-12
    # The wrong variant: the (r, w) block with w's columns in the other order (h * p + a).
    H, p = r.shape[1], w.shape[1]
    wrong = A.copy()
    wrong[:, :H, H:] = wrong[:, :H, H:].reshape(2, H, p, H).transpose(0, 1, 3, 2).reshape(2, H, -1)
    assert np.abs(wrong - J.swapaxes(1, 2) @ J).max() > 1e-3


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_a_conditioning_round_of_the_wide_design_turns_the_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # d = 8, H = 6 (learned at once with 957 queries): the first decoding is made to report
    # u_4 stalled. The redundant design's round turns u_4 by pi/4 toward u_1 (the lowest row
    # never asked again) at the same norm, asks its 9 pairs and its halved link again
    # (10 x 12 = 120 queries) and decodes once more; the result must still be the box, and
    # its certificate must hold U with the turned row.
    calls = stall_first_decoding(monkeypatch, (3,))
    model = random_float_box(8, 6, 0)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=6, seed=0)
    assert len(calls) == 2
    before, after = calls
    assert rec.queries_by_phase["conditioning"] == conditioning_cost(8, 6, False, 3) == 120
    polish = rec.queries_by_phase.get("polish", 0)
    assert polish in (0, precision_polish_count(8, 6, False))
    assert before_refine(rec, 8, 6) == float_query_bound(8, 6) + 120 + polish
    assert rec.queries <= rec.bound
    # The turned row: same norm, cos(pi/4) of the old row and sin(pi/4) of u_1 (scaled to
    # its norm), every other row unchanged. A scaled row (the square design's round) fails.
    norm = np.linalg.norm(before[3])
    assert np.isclose(np.linalg.norm(after[3]), norm, rtol=1e-14)
    turned = (before[3] + before[0] * norm / np.linalg.norm(before[0])) / np.sqrt(2)
    assert np.allclose(after[3], turned, rtol=0, atol=1e-14 * norm)
    assert not np.allclose(after[3], before[3] * 2**-0.5)
    assert np.array_equal(np.delete(after, 3, axis=0), np.delete(before, 3, axis=0))
    assert np.linalg.matrix_rank(after) == 8  # U stays invertible
    assert _fresh_error(rec, model, 8, 0) <= rec.verification.rtol
    cert = rec.certificate()
    assert va.verify_certificate(cert).ok
    (round_,) = cert["design"]["conditioning"]
    assert (round_["k"], round_["partner"]) == (3, 0)
    assert [float(load_number(x)) for x in cert["design"]["U"][3]] == after[3].tolist()
    # The row put back as it was: the stored answers no longer match its queries.
    back = copy.deepcopy(cert)
    back["design"]["U"][3] = [dump_number(float(x)) for x in before[3]]
    with pytest.raises(CertificateError):
        va.verify_certificate(back)


def test_the_partners_are_rows_that_stay_and_differ() -> None:
    got = conditioning_partners(16, [4, 7, 8], [{"k": 2, "partner": 0}])
    assert got == [0, 1, 3]
    assert not set(got) & {4, 7, 8, 2} and len(set(got)) == 3
    # A group asked again a second time gets a partner it has not had.
    assert conditioning_partners(16, [4], [{"k": 4, "partner": 0}]) == [1]


@pytest.mark.slow  # minutes of float multi-head learning: `pytest -m slow`
def test_the_wide_design_conditions_past_the_follow_up_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # d = 8, H = 6 again, the first decoding made to report u_2 to u_6 stalled: one round
    # of the five costs 5 x 120 = 600 queries, more than the 567 left under the follow-up's
    # count (the square design's rule would refuse). The redundant design asks them (its
    # bound holds every round's worst case) and the count says it is past the follow-up's.
    stall_first_decoding(monkeypatch, (1, 2, 3, 4, 5))
    model = random_float_box(8, 6, 0)
    rec = learn_multi_head(va.Oracle(model, "float"), heads=6, seed=0)
    assert 5 * conditioning_cost(8, 6, False, 3) == 600 > adaptive_room(8, 6, False) == 567
    assert rec.queries_by_phase["conditioning"] == 600
    # Past the follow-up's count already, with a decoded estimate within 1e-10: the
    # precision polish (54 sequences) is not asked (pipeline.budget.polish_wanted).
    assert "polish" not in rec.queries_by_phase
    assert PRECISION_TARGET < rec.parameter_error_estimate <= PRECISION_REQUIRED
    assert follow_up_query_bound(8, 6) < rec.queries == 957 + 600 <= rec.bound
    assert _fresh_error(rec, model, 8, 0) <= rec.verification.rtol
    assert va.verify_certificate(rec.certificate()).ok
    assert (
        "the follow-up's 4Hd^2 - 2H + 1 = 1525, not under it (+32) with the conditioning "
        "rounds)" in rec.notes[0]
    )


def test_gauss_newton_steps_in_blocks_of_groups_are_the_whole_batch_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The dense Jacobians are formed for blocks of groups (memory bounded at large d); each
    # group's step is its own, so blocks of one group give the whole batch's steps, and a
    # fit through them the same figures.
    from verified_attn.multi_head import float_linear_fit

    lt, Mt, _, _ = _plane(5, J=7, p=3, H=3)
    rng = np.random.default_rng(6)
    r = rng.standard_normal((5, 3)) * 2
    w = rng.standard_normal((5, 3, 3))
    Y = group_model(lt, r, np.einsum("ja,gah->gjh", Mt, w))
    Y = Y + rng.standard_normal(Y.shape) * 1e-9
    R = (group_model(lt, r + 0.01, np.einsum("ja,gah->gjh", Mt, w - 0.01)) - Y).reshape(5, -1)
    whole = float_linear_fit._gauss_newton_steps(lt, Mt, r + 0.01, w - 0.01, R)
    fit = fit_linear_groups(lt, Y, Mt, r + 0.02, w - 0.02)
    n = Mt.shape[0] * len(lt) * (3 + 9)
    for limit, blocks in [(n, 5), (2 * n, 3)]:
        monkeypatch.setattr(float_linear_fit, "_JACOBIAN_ENTRIES", limit)
        calls: list[int] = []

        def counted(*args: np.ndarray, calls: list[int] = calls) -> np.ndarray:
            calls.append(args[2].shape[0])  # the block's groups
            return linear_jacobian(*args)

        monkeypatch.setattr(float_linear_fit, "linear_jacobian", counted)
        blocked = float_linear_fit._gauss_newton_steps(lt, Mt, r + 0.01, w - 0.01, R)
        assert len(calls) == blocks and max(calls) <= limit // n
        assert whole is not None and blocked is not None
        assert np.array_equal(blocked, whole)
        again = fit_linear_groups(lt, Y, Mt, r + 0.02, w - 0.02)
        assert np.array_equal(again.s, fit.s) and np.array_equal(again.residual, fit.residual)
        monkeypatch.setattr(float_linear_fit, "linear_jacobian", linear_jacobian)
    # The wrong variant: a step solved from another group's Jacobian is not the group's.
    swapped = float_linear_fit._gauss_newton_steps(lt, Mt, (r + 0.01)[::-1], (w - 0.01)[::-1], R)
    assert swapped is not None and not np.allclose(swapped, whole)
