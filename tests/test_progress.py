"""progress= on every learner and on va.sweep: off by default and silent, a tqdm bar or a
callback when asked, validated, and never changing a count, an answer or a result."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
from tqdm import tqdm

import verified_attn as va
from verified_attn.cli import random_single_head
from verified_attn.errors import InvalidArgument
from verified_attn.low_rank.claims import random_low_rank_head
from verified_attn.multi_head import learn_orthogonal_heads
from verified_attn.multi_head.canonical_float import random_float_box
from verified_attn.multi_head.counterexamples import random_multi_head
from verified_attn.noisy import learn_from_labels, learn_stochastic
from verified_attn.oracle_wrappers import LabelOracle, NoisyOracle, StochasticOracle
from verified_attn.progress import Reporter, check_progress, reporting
from verified_attn.transformer.claims import random_transformer

# One small run of every public learner: (name, a fresh oracle, the call with its arguments).
Case = tuple[str, Callable[[], va.Oracle], Callable[..., Any]]


def _transformer() -> Any:
    return random_transformer(2, 2, np.random.default_rng(0))


def _noisy_oracle() -> va.Oracle:
    return NoisyOracle(va.Oracle(va.SingleHeadAttention([[0.5, 0], [0, -0.25]], [2, 1])), 1e-6)


CASES: list[Case] = [
    ("single-head", lambda: va.Oracle(random_single_head(3, seed=0), "certified"),
     lambda o, **kw: va.learn_single_head(o, **kw)),
    ("single-head affine float", lambda: va.Oracle(random_single_head(3, seed=1, affine=True), "float"),
     lambda o, **kw: va.learn_single_head(o, **kw)),
    ("low-rank", lambda: va.Oracle(random_low_rank_head(4, 1, 0), "exact"),
     lambda o, **kw: va.learn_low_rank(o, rank=1, **kw)),
    ("low-rank found", lambda: va.Oracle(random_low_rank_head(4, 1, 0), "float"),
     lambda o, **kw: va.learn_low_rank(o, **kw)),
    ("nuclear", lambda: va.Oracle(random_low_rank_head(4, 1, 0), "float"),
     lambda o, **kw: va.learn_low_rank(o, rank=1, method="nuclear", **kw)),
    ("noisy", _noisy_oracle,
     lambda o, **kw: va.learn_noisy(o, tolerance=1e-6, w_bound=1, margin=0.5, **kw)),
    ("stochastic", lambda: StochasticOracle(va.Oracle(va.SingleHeadAttention([[0.5]], [2])), 1e-3),
     lambda o, **kw: learn_stochastic(
         o, noise_scale=1e-3, target_error=0.05, w_bound=1, margin=1, **kw)),
    ("labels", lambda: LabelOracle(va.Oracle(va.SingleHeadAttention([[0.5]], [3]), "exact")),
     lambda o, **kw: learn_from_labels(o, w_bound=1, bits=8, **kw)),
    ("relu-ffn", lambda: va.Oracle(_transformer(), "exact"),
     lambda o, **kw: va.learn_relu_ffn(o, lengths=(1,), **kw)),
    ("transformer", lambda: va.Oracle(_transformer(), "certified"),
     lambda o, **kw: va.learn_transformer(o, **kw)),
    ("transformer direct", lambda: va.Oracle(_transformer(), "exact"),
     lambda o, **kw: va.learn_transformer(o, method="direct", **kw)),
    ("multi-head certified", lambda: va.Oracle(random_multi_head(2, 2, 0), "certified"),
     lambda o, **kw: va.learn_multi_head(o, heads=2, **kw)),
    ("multi-head float", lambda: va.Oracle(random_float_box(3, 2, 0), "float"),
     lambda o, **kw: va.learn_multi_head(o, heads=2, **kw)),
    ("multi-head max_heads", lambda: va.Oracle(random_float_box(3, 2, 0), "float"),
     lambda o, **kw: va.learn_multi_head(o, max_heads=3, **kw)),
    ("orthogonal heads", lambda: va.Oracle(va.MultiHeadAttention(
        [([[1, 0], [0, 0]], [1, 0]), ([[0, 0], [0, 2]], [0, 1])]), "exact"),
     lambda o, **kw: learn_orthogonal_heads(o, [[[1], [0]], [[0], [1]]], **kw)),
]
IDS = [c[0] for c in CASES]


def _record(oracle: va.Oracle) -> va.Oracle:
    """The oracle with its whole transcript kept (and the inner one of a wrapper)."""
    oracle.record = True
    inner = getattr(oracle, "inner", None)
    if isinstance(inner, va.Oracle):
        inner.record = True
    return oracle


def _fingerprint(oracle: va.Oracle, rec: Any) -> tuple[Any, ...]:
    """Everything a run produced, exactly: counts, the transcript, the result's fields."""
    transcript = [(e.phase, e.sequence, str(e.answer)) for e in oracle.transcript]
    return (oracle.queries_by_phase, transcript, rec.queries, rec.queries_by_phase,
            str(rec.to_dict()))


@pytest.mark.parametrize(("name", "make", "learn"), CASES, ids=IDS)
def test_progress_changes_nothing_and_counts_every_query(name, make, learn, capsys) -> None:
    off_oracle = _record(make())
    off = _fingerprint(off_oracle, learn(off_oracle))
    assert capsys.readouterr().err == ""  # off by default: not a byte on stderr

    seen: list[tuple[str, int, int | None]] = []
    on_oracle = _record(make())
    rec = learn(on_oracle, progress=lambda *a: seen.append(a))
    assert _fingerprint(on_oracle, rec) == off
    assert capsys.readouterr().err == ""  # a callback, not a bar

    # One report per counted batch; the last says every query of the call, once (a learner
    # calling another on the same oracle does not count twice).
    assert seen and seen[-1][1] == on_oracle.queries == rec.queries + rec.verification_queries
    assert [n for _, n, _ in seen] == sorted({n for _, n, _ in seen})
    assert {p for p, _, _ in seen} <= set(on_oracle.queries_by_phase)
    totals = {t for _, _, t in seen}
    assert len(totals) == 1  # fixed before the first query
    total = totals.pop()
    assert total is None or total >= on_oracle.queries


@pytest.mark.parametrize(("name", "make", "learn"), CASES, ids=IDS)
def test_every_learner_validates_progress(name, make, learn) -> None:
    oracle = make()
    for bad in (1, "yes", 0.5, [True]):
        with pytest.raises(InvalidArgument, match="progress must be True, False, None"):
            learn(oracle, progress=bad)
    assert oracle.queries == 0  # refused before any query


def test_a_bar_on_stderr_when_asked(monkeypatch) -> None:
    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    rec = va.learn_single_head(va.Oracle(random_single_head(3, seed=0)), progress=True)
    text = fake.getvalue()
    # Title, the total (12 learning + 8 verification) and the unit; closed (leave=False).
    assert "learn_single_head" in text and "/20" in text and "query" in text
    assert rec.queries == 12
    fake.truncate(0)
    va.learn_single_head(va.Oracle(random_single_head(3, seed=0)))
    assert fake.getvalue() == ""


def test_the_bar_ticks_between_steps_and_stops(monkeypatch) -> None:
    import threading
    import time

    import verified_attn.progress as progress

    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    monkeypatch.setattr(progress, "TICK_SECONDS", 0.01)
    before = set(threading.enumerate())
    r = Reporter(True, desc="ticking", total=5)
    time.sleep(0.2)  # no step counted: the bar is redrawn all the same
    assert fake.getvalue().count("ticking") >= 3
    r.close()
    assert set(threading.enumerate()) == before  # the ticker has stopped
    quiet = Reporter(lambda *a: None, desc="d", total=None)  # a callback: no thread
    assert set(threading.enumerate()) == before
    quiet.close()


def test_a_tqdm_object_is_advanced_and_shows_the_phase() -> None:
    out = io.StringIO()
    with tqdm(file=out, mininterval=0) as bar:
        oracle = va.Oracle(random_float_box(3, 2, 0), "float")
        rec = va.learn_multi_head(oracle, heads=2, progress=bar)
        assert bar.n == oracle.queries == rec.queries + rec.verification_queries
    assert "phase F(t)" in out.getvalue()


def test_nested_reports_and_totals() -> None:
    oracle = va.Oracle(random_single_head(2, seed=0), "exact")
    calls: list[tuple[str, int, int | None]] = []
    with reporting(oracle, lambda *a: calls.append(a), "outer"):
        with reporting(oracle, True, "inner"):  # inside: reports nothing of its own
            assert oracle.progress_hook is not None
            oracle.require_remaining(5, 1, "demo")
            with oracle.run():
                oracle.require_remaining(99, 0, "a part")  # inside a run: not the total
                with oracle.phase("x"):
                    oracle.query_many([[[1, 0]], [[0, 1]]])
    assert oracle.progress_hook is None
    assert calls == [("x", 2, 6)]
    # Without a total of its own, a call keeps none: a part's worst case (asked inside the
    # call's run) would make the bar's end a lie.
    calls.clear()
    with reporting(oracle, lambda *a: calls.append(a), "outer"), oracle.run():
        oracle.require_remaining(99, 0, "a part")
        oracle.query([[1, 1]])
    assert calls == [("other", 1, None)]


def test_reporter_wrong_variants_are_caught() -> None:
    # A reporter that took every expectation (an inner learner's) would change the total.
    r = Reporter(lambda *a: None, desc="d", total=None)
    r.expect(6)
    r.expect(99)
    assert r.total == 6
    assert check_progress(None) is False and check_progress(False) is False
    with pytest.raises(InvalidArgument, match="progress must be"):
        check_progress(np.bool_(True))


def test_sweep_progress_over_cells(capsys) -> None:
    seen: list[tuple[str, int, int | None]] = []
    kw: dict[str, Any] = {"sizes": [2, 3], "seeds": [0, 1]}
    off = va.sweep("thm-4.1/query-count", **kw)
    assert capsys.readouterr().err == ""
    on = va.sweep("thm-4.1/query-count", progress=lambda *a: seen.append(a), **kw)
    same = [(c["d"], c["seed"], c["passed"], c["detail"]) for c in on["cells"]]
    assert same == [(c["d"], c["seed"], c["passed"], c["detail"]) for c in off["cells"]]
    assert seen == [
        ("d = 2, seed 0", 1, 4), ("d = 2, seed 1", 2, 4), ("d = 3, seed 0", 3, 4),
        ("d = 3, seed 1", 4, 4),
    ]
    seen.clear()
    with ThreadPoolExecutor(2) as pool:
        va.sweep("thm-4.1/query-count", executor=pool, progress=lambda *a: seen.append(a), **kw)
    assert sorted(label for label, _, _ in seen) == sorted(label for label, _, _ in
                                                          [(f"d = {d}, seed {s}", 0, 0)
                                                           for d in (2, 3) for s in (0, 1)])
    assert [n for _, n, _ in seen] == [1, 2, 3, 4]
    with pytest.raises(InvalidArgument, match="progress must be"):
        va.sweep("thm-4.1/query-count", progress=2, **kw)


def test_sweep_bar_when_asked(monkeypatch) -> None:
    fake = io.StringIO()
    monkeypatch.setattr(sys, "stderr", fake)
    va.sweep("thm-4.1/query-count", sizes=[2], seeds=[0, 1], progress=True)
    assert "thm-4.1/query-count" in fake.getvalue() and "cell" in fake.getvalue()
