"""HuggingFace transformers attention modules as oracles: mapping, recovery, detection.

>>> GOLDEN_SINGLE[4], GOLDEN_MULTI[(4, 2)]
(25, 120)

Every module is built from a small config with seeded random weights (nothing is
downloaded). Every test needs the optional extra (``pip install 'verified-attn[hf]'``);
without transformers the whole module is skipped, so the rest of the suite still runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import itertools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the hf extra needs torch")
pytest.importorskip(
    "transformers", reason="needs the optional extra: pip install 'verified-attn[hf]'"
)

from transformers import BertConfig, GPT2Config, LlamaConfig  # noqa: E402
from transformers.models.bert.modeling_bert import (  # noqa: E402
    BertAttention,
    BertLayer,
    BertSelfAttention,
)
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaAttention,
    LlamaDecoderLayer,
)

import verified_attn as va  # noqa: E402
from verified_attn.adapters.hf import (  # noqa: E402
    HeadParameters,
    attention_oracle,
    attention_parameters,
)
from verified_attn.adapters.torch import sequence_oracle  # noqa: E402
from verified_attn.multi_head.canonical_float import precision_polish_count  # noqa: E402
from verified_attn.multi_head.pipeline.refine import refine_count  # noqa: E402

pytestmark = pytest.mark.hf

# Learning queries, written out (not computed): d^2 + 2d + 1 for one affine head,
# d + 1 + 2H (d^2 + 2d - 1) for H canonical affine heads.
GOLDEN_SINGLE = {3: 16, 4: 25, 6: 49}
GOLDEN_MULTI = {(4, 2): 120, (6, 2): 242}  # float design: E + 1 + 5 (E^2 + 2E - 1)
# The precision polish, ceil((2 (E^2 + 2E) + 1) / 8) queries, in the runs whose decoded
# estimate is above its target (1e-12): (E, seed, kind) of those, measured.
GOLDEN_POLISH = {4: 7, 6: 13}
POLISHED = {(4, 1, "bert"), (6, 3, "gpt2"), (6, 3, "bert"), (6, 4, "gpt2"), (6, 4, "bert")}
VERIFY = 8
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    old = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny modules: threads only add overhead on a shared machine
    yield
    torch.set_num_threads(old)


def _randomize(module: torch.nn.Module, E: int, seed: int) -> torch.nn.Module:
    """Every weight and bias N(0, 1/E): GPT-2 and Llama start biases at 0 (which would leave
    c and beta untested) and GPT-2's weights at N(0, 0.02^2) (scores ~1e-3)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 1.0 / np.sqrt(E))
    return module


def _gpt2(E: int, heads: int = 1, seed: int = 0, **config: Any) -> GPT2Attention:
    layer_idx = config.pop("layer_idx", 0)
    attn = GPT2Attention(GPT2Config(n_embd=E, n_head=heads, **config), layer_idx=layer_idx)
    return _randomize(attn, E, seed)


def _bert(E: int, heads: int = 1, seed: int = 0) -> BertSelfAttention:
    return _randomize(
        BertSelfAttention(BertConfig(hidden_size=E, num_attention_heads=heads)), E, seed
    )


def _llama_config(E: int, heads: int, kv_heads: int, bias: bool = True) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=E,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=2 * E,
        num_hidden_layers=1,
        attention_bias=bias,
    )


def _llama(E: int, heads: int = 1, kv_heads: int = 1, seed: int = 0, bias: bool = True) -> Any:
    return _randomize(LlamaAttention(_llama_config(E, heads, kv_heads, bias), layer_idx=0), E, seed)


def _module(kind: str, E: int, heads: int, seed: int = 0) -> torch.nn.Module:
    return {"gpt2": _gpt2, "bert": _bert}[kind](E, heads, seed=seed)


def _readout(kind: str, E: int, seed: int = 1) -> Any:
    torch.manual_seed(seed)
    if kind == "linear":
        return torch.nn.Linear(E, 1)
    return np.random.default_rng(seed).standard_normal(E)


def _sequences(E: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, E)) for n in (1, 2, 3, 5, 8) for _ in range(3)]


def _rel(a: Any, b: Any, ref: float) -> float:
    return float(np.max(np.abs(np.asarray(a, dtype=np.float64) - np.asarray(b))) / ref)


def _errors(rec: va.Recovery, truth: HeadParameters) -> dict[str, float]:
    """Relative errors; c in W's units (scores), beta in v's (outputs), as in test_torch."""
    W, c, v, beta = truth.W[0], truth.c[0], truth.v[0], truth.beta
    w_ref, v_ref = float(np.abs(W).max()), float(np.abs(v).max())
    return {
        "W": _rel(rec.W, W, w_ref),
        "c": _rel(rec.c, c, max(float(np.abs(c).max()), w_ref)),
        "v": _rel(rec.v, v, v_ref),
        "beta": _rel(rec.beta, beta, max(abs(beta), v_ref)),
    }


def _worst_disagreement(oracle: va.Oracle, params: HeadParameters, seed: int) -> float:
    worst = 0.0
    for X in _sequences(oracle.d, seed):
        observed = oracle.query(X)
        expected = float(params.evaluate_batch(X[None])[0])
        worst = max(worst, abs(observed - expected) / max(1.0, abs(expected)))
    return worst


def _llama_without_rotary(module: Any, readout: np.ndarray, Xs: np.ndarray) -> np.ndarray:
    """The Llama module's own answers with every rotation the identity (cos 1, sin 0)."""
    box = _float64_sdpa(module)
    x = torch.from_numpy(Xs)
    ones = torch.ones(*Xs.shape[:2], box.head_dim, dtype=torch.float64)
    with torch.no_grad():
        out = box(x, position_embeddings=(ones, torch.zeros_like(ones)))[0]
    return out[:, -1, :].numpy() @ readout


def _float64_sdpa(module: Any) -> Any:
    import copy

    box = copy.deepcopy(module).double().eval()
    box.config._attn_implementation = "sdpa"
    return box


# ---------------------------------------------------------------------------------------
# Import hygiene.
# ---------------------------------------------------------------------------------------


def test_importing_verified_attn_does_not_import_transformers() -> None:
    code = (
        "import sys, verified_attn, verified_attn.adapters\n"
        "assert 'transformers' not in sys.modules, 'transformers was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_missing_transformers_gives_an_import_error_naming_the_extra() -> None:
    code = (
        "import sys\n"
        "sys.modules['transformers'] = None  # as if transformers were not installed\n"
        "try:\n"
        "    import verified_attn.adapters.hf\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
    )
    assert "verified-attn[hf]" in out.stdout


# ---------------------------------------------------------------------------------------
# The weight mapping agrees with the module itself (float64, 1e-12).
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
@pytest.mark.parametrize("heads", [1, 2, 3])
@pytest.mark.parametrize("readout", ["vector", "linear"])
def test_mapping_reproduces_module_outputs(kind: str, heads: int, readout: str) -> None:
    E = 6
    module = _module(kind, E, heads, seed=heads)
    r = _readout(readout, E)
    truth = attention_parameters(module, r)
    assert truth.heads == heads
    oracle = attention_oracle(module, r)
    assert _worst_disagreement(oracle, truth, seed=heads) <= 1e-12
    if heads == 1:  # the same parameters as our own model class, evaluated in float64
        X = _sequences(E, seed=0)[-1]
        assert abs(truth.model()(X) - oracle.query(X)) <= 1e-12 * max(1.0, abs(oracle.query(X)))


@pytest.mark.parametrize(
    "config",
    [
        {"scale_attn_by_inverse_layer_idx": True, "layer_idx": 2},
        {"scale_attn_weights": False},
    ],
)
def test_gpt2_score_scale_options_are_mapped(config: dict[str, Any]) -> None:
    E = 4
    module = _gpt2(E, 2, seed=5, **config)
    r = _readout("linear", E)
    assert (
        _worst_disagreement(attention_oracle(module, r), attention_parameters(module, r), 0)
        <= 1e-12
    )


@pytest.mark.parametrize(("heads", "kv_heads"), [(1, 1), (2, 2), (2, 1), (4, 2), (4, 1)])
@pytest.mark.parametrize("bias", [True, False])
def test_llama_mapping_without_rotary_reproduces_the_module(
    heads: int, kv_heads: int, bias: bool
) -> None:
    """Grouped-query heads: query head k reads key/value head k // (heads / kv_heads)."""
    E = 8
    module = _llama(E, heads, kv_heads, seed=heads + kv_heads, bias=bias)
    r = _readout("vector", E)
    truth = attention_parameters(module, r, ignore_rotary=True)
    assert truth.heads == heads
    if not bias:
        assert truth.beta == 0.0 and not truth.c.any()
    for n in (1, 2, 5, 8):
        Xs = np.random.default_rng(n).standard_normal((4, n, E))
        observed = _llama_without_rotary(module, r, Xs)
        expected = truth.evaluate_batch(Xs)
        assert np.max(np.abs(observed - expected) / np.maximum(1.0, np.abs(expected))) <= 1e-12


def test_a_wrong_grouping_of_query_heads_is_caught() -> None:
    """Query head k -> key/value head k % kv_heads (interleaved) instead of k // group."""
    E, H, Hkv = 8, 4, 2
    module = _llama(E, H, Hkv, seed=3)
    r = _readout("vector", E)
    truth = attention_parameters(module, r, ignore_rotary=True)
    # Heads 1 and 2 read key/value heads 0 and 1; the interleaved rule swaps their keys.
    hd = E // H
    Wq = module.q_proj.weight.detach().double().numpy()
    Wk = module.k_proj.weight.detach().double().numpy()
    bq = module.q_proj.bias.detach().double().numpy()
    W = truth.W.copy()
    c = truth.c.copy()
    for k in (1, 2):
        g = k % Hkv
        W[k] = module.scaling * Wk[g * hd : (g + 1) * hd].T @ Wq[k * hd : (k + 1) * hd]
        c[k] = module.scaling * Wk[g * hd : (g + 1) * hd].T @ bq[k * hd : (k + 1) * hd]
    wrong = HeadParameters(W, c, truth.v, truth.beta)
    Xs = np.random.default_rng(0).standard_normal((8, 5, E))
    observed = _llama_without_rotary(module, r, Xs)
    assert np.max(np.abs(observed - truth.evaluate_batch(Xs))) <= 1e-12
    assert np.max(np.abs(observed - wrong.evaluate_batch(Xs))) > 1e-6


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_a_wrong_mapping_is_caught_by_the_same_check(kind: str) -> None:
    """W transposed (Conv1D's (in, out) read as nn.Linear's) or no 1/sqrt(h): rejected."""
    E = 4
    module = _module(kind, E, 1)
    r = _readout("vector", E)
    truth = attention_parameters(module, r)
    oracle = attention_oracle(module, r)
    for wrong in (
        HeadParameters(truth.W.transpose(0, 2, 1), truth.c, truth.v, truth.beta),
        HeadParameters(truth.W * 2.0, truth.c * 2.0, truth.v, truth.beta),  # E = 4: sqrt(h) = 2
    ):
        assert _worst_disagreement(oracle, wrong, seed=0) > 1e-6


def test_gpt2_key_bias_cancels_and_query_bias_does_not() -> None:
    E = 4
    module = _gpt2(E, 1, seed=2)
    r = _readout("vector", E)
    before = attention_oracle(module, r)
    with torch.no_grad():
        module.c_attn.bias[E : 2 * E] += 3.0  # the key bias: the same shift of every score
    after = attention_oracle(module, r)
    Xs = _sequences(E, seed=3)
    for X in Xs:
        a = before.query(X)
        assert abs(a - after.query(X)) <= 1e-12 * max(1.0, abs(a))
    with torch.no_grad():
        module.c_attn.bias[:E] += 3.0  # the query bias is c
    moved = attention_oracle(module, r)
    assert abs(moved.query(Xs[-1]) - before.query(Xs[-1])) > 1e-6


def test_readout_bias_goes_into_beta() -> None:
    E = 4
    module = _bert(E, 1)
    lin = _readout("linear", E)
    with_bias = attention_parameters(module, lin)
    no_bias = attention_parameters(module, lin.weight.detach()[0])
    assert with_bias.beta - no_bias.beta == pytest.approx(float(lin.bias.item()), abs=1e-15)
    assert np.array_equal(with_bias.W, no_bias.W) and np.array_equal(with_bias.v, no_bias.v)


# ---------------------------------------------------------------------------------------
# Recovery: one head (learn_single_head), several heads (learn_multi_head).
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
@pytest.mark.parametrize(("E", "seed"), [(3, 0), (4, 1), (6, 2)])
@pytest.mark.parametrize("readout", ["vector", "linear"])
def test_learn_single_head_float64(kind: str, E: int, seed: int, readout: str) -> None:
    module = _module(kind, E, 1, seed=seed)
    r = _readout(readout, E, seed=seed + 1)
    oracle = attention_oracle(module, r)
    rec = va.learn_single_head(oracle)
    assert rec.queries == GOLDEN_SINGLE[E]
    assert rec.verification_queries == VERIFY
    assert oracle.queries == GOLDEN_SINGLE[E] + VERIFY
    assert rec.verified
    errors = _errors(rec, attention_parameters(module, r))
    assert max(errors.values()) <= 1e-9, errors


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
@pytest.mark.parametrize("E", [4, 8])
def test_float32_recovery_verifies_at_its_declared_precision(kind: str, E: int) -> None:
    """Measured (benchmarks/hf.py, seeds 0-9, E = 4, 8, 16): parameter errors <= 2.6e-5."""
    module = _module(kind, E, 1, seed=7)
    r = _readout("linear", E)
    oracle = attention_oracle(module, r, dtype="float32")
    assert oracle.arithmetic.rtol == 1e-4
    rec = va.learn_single_head(oracle)
    # the rule's allowance (rtol of the head's part + bias rounding in float32 ulps)
    assert rec.verified and rec.verification.max_ratio <= 1
    errors = _errors(rec, attention_parameters(module, r))
    assert max(errors.values()) <= 1e-3, errors  # regression guard on the measured ~1e-5
    assert errors["W"] > 1e-9  # really float32, not float64


def test_float32_answers_are_float32_accurate() -> None:
    E = 4
    module = _gpt2(E, 1, seed=7)
    r = _readout("linear", E)
    truth = attention_parameters(module, r)
    oracle = attention_oracle(module, r, dtype="float32")
    diffs = []
    for X in _sequences(E, seed=5):
        expected = float(truth.evaluate_batch(X[None])[0])
        scale = float(np.abs(truth.v[0]).sum() * np.abs(X).max() + abs(truth.beta))
        diffs.append(abs(oracle.query(X) - expected) / scale)
    assert 1e-12 < max(diffs) <= 8 * 2.0**-24


def _heads_of(rec: va.Recovery) -> HeadParameters:
    heads = rec.parameters["heads"]
    return HeadParameters(
        np.stack([np.asarray(W, dtype=np.float64) for W, _, _ in heads]),
        np.stack([np.asarray(c, dtype=np.float64) for _, _, c in heads]),
        np.stack([np.asarray(v, dtype=np.float64) for _, v, _ in heads]),
        float(rec.parameters["beta"]),
    )


# BERT at E = 6 takes 13-21 s a run, GPT-2's seed 4 6 s (float multi-head): in the slow step.
@pytest.mark.parametrize(
    ("kind", "E", "seed"),
    [
        *[(kind, E, seed) for kind in ("gpt2", "bert") for E, seed in ((4, 0), (4, 1), (4, 2))],
        ("gpt2", 6, 3),
        pytest.param("gpt2", 6, 4, marks=pytest.mark.slow),
        pytest.param("bert", 6, 3, marks=pytest.mark.slow),
        pytest.param("bert", 6, 4, marks=pytest.mark.slow),
    ],
)
def test_two_heads_are_learned_or_refused_never_wrong(kind: str, E: int, seed: int) -> None:
    """Measured (seeds 0-9, E = 4 and 6, both kinds): 40/40 learned, predictions on fresh
    sequences within 1.1e-10 relative of the module. A refusal is allowed, a wrong answer
    is not: whatever returns must predict the module on sequences it never saw."""
    module = _module(kind, E, 2, seed=seed)
    r = _readout("linear", E, seed=seed + 1)
    oracle = attention_oracle(module, r)
    try:
        rec = va.learn_multi_head(oracle, heads=2)
    except (va.NotIdentifiable, va.PrecisionExhausted):
        return
    polish = GOLDEN_POLISH[E] if (E, seed, kind) in POLISHED else 0
    assert GOLDEN_POLISH[E] == precision_polish_count(E, 2, True)
    assert rec.queries_by_phase.get("polish", 0) == polish
    # The refinement asks what the follow-up's count leaves after the other phases.
    refined = rec.queries_by_phase.get("refinement", 0)
    asked = rec.queries - refined
    assert refined == refine_count(E, 2, True, asked, rec.bound, unit=2.0**-53)
    assert asked == GOLDEN_MULTI[(E, 2)] + polish
    learned = _heads_of(rec)
    assert _worst_disagreement(attention_oracle(module, r), learned, seed=seed + 50) <= 1e-6
    # ... and the heads are the mapped heads, in some order.
    truth = attention_parameters(module, r)
    w_ref, v_ref = float(np.abs(truth.W).max()), float(np.abs(truth.v).max())
    best = min(
        max(
            max(_rel(learned.W[i], truth.W[j], w_ref), _rel(learned.v[i], truth.v[j], v_ref))
            for i, j in enumerate(order)
        )
        for order in itertools.permutations(range(2))
    )
    assert best <= 1e-6
    assert abs(learned.beta - truth.beta) <= 1e-6 * max(abs(truth.beta), v_ref)


# ---------------------------------------------------------------------------------------
# Outside the model class: rotary embeddings, positions inside the box, whole blocks.
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_llama_rotary_is_a_mismatch(seed: int, bias: bool) -> None:
    oracle = attention_oracle(_llama(4, 1, 1, seed=seed, bias=bias), _readout("linear", 4))
    with pytest.raises(va.ModelClassMismatch):
        va.learn_single_head(oracle)


@pytest.mark.parametrize("seed", [0, 1])
def test_llama_grouped_heads_are_not_learned(seed: int) -> None:
    """Two query heads sharing one key/value head, with rotary: never returned. (The float
    multi-head learner reports it as a pole it cannot place, PrecisionExhausted.)"""
    oracle = attention_oracle(_llama(4, 2, 1, seed=seed), _readout("linear", 4))
    with pytest.raises((va.ModelClassMismatch, va.PrecisionExhausted, va.NotIdentifiable)):
        va.learn_multi_head(oracle, heads=2)


def test_rotary_answers_depend_on_positions_in_class_answers_do_not() -> None:
    """The witness behind the mismatch: our model class is invariant under permuting the
    context x_1 .. x_{N-1}; GPT-2's last position is, Llama's rotary attention is not."""
    E = 4
    rng = np.random.default_rng(0)
    X = rng.standard_normal((5, E))
    Y = X[[2, 0, 3, 1, 4]]  # the same tokens, the context at other positions
    gpt2 = attention_oracle(_gpt2(E, 1, seed=1), _readout("vector", E))
    assert abs(gpt2.query(X) - gpt2.query(Y)) <= 1e-12 * max(1.0, abs(gpt2.query(X)))
    llama = attention_oracle(_llama(E, 1, 1, seed=1), _readout("vector", E))
    assert abs(llama.query(X) - llama.query(Y)) > 1e-3


def test_llama_attention_parameters_refuse_without_ignore_rotary() -> None:
    with pytest.raises(va.ModelClassMismatch, match="rotary position embeddings"):
        attention_parameters(_llama(4), np.ones(4))


def test_absolute_positions_inside_the_box_are_a_mismatch() -> None:
    """BertSelfAttention alone is in the class; adding position embeddings inside the box
    (as BertEmbeddings does before the layer) puts it out, and the learner says so."""

    class WithPositions(torch.nn.Module):
        def __init__(self, attn: BertSelfAttention, positions: torch.Tensor) -> None:
            super().__init__()
            self.attn = attn
            self.positions = torch.nn.Parameter(positions)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x + self.positions[: x.shape[1]])[0]

    E = 4
    attn = _bert(E, 1, seed=4)
    r = _readout("linear", E)
    torch.manual_seed(0)
    boxed = WithPositions(attn, torch.randn(16, E))
    with pytest.raises(va.ModelClassMismatch):
        va.learn_single_head(sequence_oracle(boxed, r, d=E, batch_first=True))
    # The wrapper itself is not what rejects: with zero position embeddings it learns.
    zero = WithPositions(attn, torch.zeros(16, E))
    rec = va.learn_single_head(sequence_oracle(zero, r, d=E, batch_first=True))
    assert max(_errors(rec, attention_parameters(attn, r)).values()) <= 1e-9


def _blocks(E: int) -> list[torch.nn.Module]:
    bert = BertConfig(hidden_size=E, num_attention_heads=1, intermediate_size=2 * E)
    blocks = [
        GPT2Block(GPT2Config(n_embd=E, n_head=1, n_inner=2 * E), layer_idx=0),
        BertAttention(bert),
        BertLayer(bert),
        LlamaDecoderLayer(_llama_config(E, 1, 1), layer_idx=0),
    ]
    return [_randomize(b, E, seed=i) for i, b in enumerate(blocks)]


@pytest.mark.parametrize("index", range(4))
def test_whole_blocks_are_a_mismatch(index: int) -> None:
    E = 4
    block = _blocks(E)[index]
    r = _readout("linear", E)
    oracle = attention_oracle(block, r)
    oracle.query(np.ones((3, E)))  # the block is queried as it is called in its model
    with pytest.raises(va.ModelClassMismatch):
        va.learn_single_head(oracle)
    with pytest.raises(va.ModelClassMismatch, match="whole block"):
        attention_parameters(block, r)


def test_a_blocks_attention_is_learned() -> None:
    """The block's own attention module, taken out, is in the class (GPT-2 and BERT)."""
    E = 4
    gpt2_block, _, bert_layer, _ = _blocks(E)
    r = _readout("linear", E)
    for attn in (gpt2_block.attn, bert_layer.attention.self):
        rec = va.learn_single_head(attention_oracle(attn, r))
        assert max(_errors(rec, attention_parameters(attn, r)).values()) <= 1e-9


# ---------------------------------------------------------------------------------------
# Attention implementations, dtypes, the caller's module.
# ---------------------------------------------------------------------------------------


def test_llama_eager_rounds_the_softmax_to_float32_and_declares_it() -> None:
    E = 8
    module = _llama(E, 2, 1, seed=1)
    assert attention_oracle(module, np.ones(E)).arithmetic.rtol == 1e-6
    module.config._attn_implementation = "eager"
    eager = attention_oracle(module, np.ones(E))
    assert eager.arithmetic.rtol == 1e-4
    module.config._attn_implementation = "sdpa"
    sdpa = attention_oracle(module, np.ones(E))
    X = np.random.default_rng(0).standard_normal((6, E))
    gap = abs(eager.query(X) - sdpa.query(X))
    assert 1e-13 < gap <= 1e-5  # float32 softmax rounding, no more


def test_eager_and_sdpa_agree_in_float64_for_gpt2_and_bert() -> None:
    E = 4
    for module in (_gpt2(E, 2, seed=1), _bert(E, 2, seed=1)):
        answers = []
        for impl in ("eager", "sdpa"):
            module.config._attn_implementation = impl
            answers.append(
                [attention_oracle(module, np.ones(E)).query(X) for X in _sequences(E, 1)]
            )
        assert np.max(np.abs(np.subtract(*answers))) <= 1e-13


def test_callers_module_is_left_unchanged() -> None:
    module = _gpt2(4, 1).train()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    va.learn_single_head(attention_oracle(module, np.ones(4)))
    assert module.training and module.c_attn.weight.dtype == torch.float32
    assert module.config._attn_implementation is None  # the private copy got sdpa
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


def test_budget_is_respected() -> None:
    oracle = attention_oracle(_bert(4, 1), np.ones(4), budget=32)
    with pytest.raises(va.QueryBudgetExceeded):
        va.learn_single_head(oracle)
    assert oracle.queries == 0


# ---------------------------------------------------------------------------------------
# Bad arguments.
# ---------------------------------------------------------------------------------------


def test_unsupported_modules_name_the_right_adapter() -> None:
    for module in (torch.nn.Linear(4, 4), torch.nn.MultiheadAttention(4, 1)):
        with pytest.raises(va.InvalidArgument, match=r"adapters\.torch\.attention_oracle"):
            attention_oracle(module, np.ones(4))
        with pytest.raises(va.InvalidArgument, match="module must be a transformers"):
            attention_parameters(module, np.ones(4))


def test_cross_attention_is_refused() -> None:
    attn = GPT2Attention(GPT2Config(n_embd=4, n_head=1), is_cross_attention=True, layer_idx=0)
    with pytest.raises(va.InvalidArgument, match="cross-attention GPT2Attention"):
        attention_oracle(attn, np.ones(4))
    bert = BertAttention(BertConfig(hidden_size=4, num_attention_heads=1), is_cross_attention=True)
    with pytest.raises(va.InvalidArgument, match="cross-attention BertAttention"):
        attention_parameters(bert, np.ones(4))


def test_bad_readout_dtype_and_flag() -> None:
    module = _gpt2(4, 1)
    with pytest.raises(va.InvalidArgument, match=r"readout must have shape \(4,\)"):
        attention_oracle(module, np.ones(5))
    with pytest.raises(va.InvalidArgument, match=r"got nn.Linear\(4, 2\)"):
        attention_parameters(module, torch.nn.Linear(4, 2))
    with pytest.raises(va.InvalidArgument, match="dtype must be 'float64' or 'float32'"):
        attention_oracle(module, np.ones(4), dtype="bfloat16")
    with pytest.raises(va.InvalidArgument, match="ignore_rotary must be True or False"):
        attention_parameters(module, np.ones(4), ignore_rotary="yes")


def test_oracle_of_a_module_names_the_adapters() -> None:
    """va.Oracle(module) with a torch or transformers module points to the adapters."""
    for module in (torch.nn.MultiheadAttention(4, 1), _gpt2(4, 1)):
        with pytest.raises(va.InvalidArgument) as info:
            va.Oracle(module)
        message = str(info.value)
        assert "verified_attn.adapters.torch.attention_oracle(module, readout)" in message
        assert "verified_attn.adapters.hf.attention_oracle(module, readout)" in message


# ---------------------------------------------------------------------------------------
# The docs page and the example.
# ---------------------------------------------------------------------------------------


def test_docs_page_snippets_run() -> None:
    """Every ``python`` block of docs/huggingface.md runs, in order, in one namespace."""
    text = (ROOT / "docs" / "huggingface.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert len(blocks) >= 3
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for block in blocks:
            exec(compile(block, "docs/huggingface.md", "exec"), namespace)
    assert namespace["rec"].queries == GOLDEN_SINGLE[4] == 25
    assert out.getvalue().count("ModelClassMismatch") >= 2


def test_example_script_runs() -> None:
    spec = importlib.util.spec_from_file_location(
        "example_extract_hf_head", ROOT / "examples" / "extract_hf_head.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert example.main(["--d", "4"]) == 0
    printed = out.getvalue()
    assert "GPT2Attention" in printed and "LlamaAttention" in printed
    assert printed.count("ModelClassMismatch") >= 2


def test_benchmark_quick(tmp_path: Path) -> None:
    """benchmarks/hf.py --quick: counts equal the bound, nothing outside the class learned."""
    spec = importlib.util.spec_from_file_location("bench_hf", ROOT / "benchmarks" / "hf.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    spec.loader.exec_module(bench)
    with contextlib.redirect_stdout(io.StringIO()):
        data = bench.main(["--quick", "--out", str(tmp_path), "--no-plots"])
    assert data["all_checks_passed"] is True
    written = json.loads((tmp_path / "hf.json").read_text())
    assert written["quick"] is True and written["checks"] == data["checks"]
    single = [r for r in written["learned"] if r["H"] == 1 and r["dtype"] == "float64"]
    assert {r["module"] for r in single} == {"GPT2Attention", "BertSelfAttention"}
    for r in single:
        assert r["learning_queries"] == [GOLDEN_SINGLE[4]] and r["outcomes"] == {"learned": 2}
        assert r["max_parameter_error"] <= 1e-9
    two = [r for r in written["learned"] if r["H"] == 2]
    # Each run's count: the design's, plus the precision polish's where it was asked.
    counts = {GOLDEN_MULTI[(4, 2)], GOLDEN_MULTI[(4, 2)] + GOLDEN_POLISH[4]}
    assert all(set(r["learning_queries"]) <= counts for r in two)
    assert {r["module"] for r in written["outside"]} >= {"LlamaAttention", "GPT2Block"}


@pytest.mark.slow  # 30 s: a float two-head run of GPT-2
def test_readme_pytorch_and_huggingface_snippets_run() -> None:
    """The README's two adapter blocks (the tour test runs only its first block)."""
    text = (ROOT / "README.md").read_text()
    blocks = [
        b for b in re.findall(r"^```python\n(.*?)^```", text, re.S | re.M) if "adapters." in b
    ]
    assert len(blocks) == 2
    namespace: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["rec"].queries == 81 and namespace["rec2"].queries == 404 + 104
    assert "LlamaAttention: ModelClassMismatch" in out.getvalue()


def test_float32_boxes_declare_the_parameter_tolerance_of_the_torch_adapter() -> None:
    """A float32 HuggingFace box (or one whose eager softmax rounds to float32) states the
    multi-head decoding's parameter tolerance 1e-3, as ``nn.MultiheadAttention`` boxes do;
    float64 keeps rtol. Before, these boxes held the parameters to rtol (1e-4), which the
    float32 multi-head decoding's estimates (8e-5 .. 4e-3 at E = 8, H = 2) cannot meet."""
    import torch

    from verified_attn.adapters.torch import attention_oracle as torch_oracle

    E = 8
    mha = torch.nn.MultiheadAttention(E, 2, batch_first=True)
    for dtype in ("float32", "float64"):
        hf = attention_oracle(_gpt2(E, 2, seed=3), np.ones(E), dtype=dtype).arithmetic
        pt = torch_oracle(mha, np.ones(E), dtype=dtype).arithmetic
        assert (hf.rtol, hf.parameter_rtol) == (pt.rtol, pt.parameter_rtol)
    f32 = attention_oracle(_gpt2(E, 2, seed=3), np.ones(E), dtype="float32").arithmetic
    assert (f32.rtol, f32.parameter_rtol) == (1e-4, 1e-3)
    f64 = attention_oracle(_gpt2(E, 2, seed=3), np.ones(E)).arithmetic
    assert (f64.rtol, f64.parameter_rtol) == (1e-6, 1e-6)
    llama = _llama(E, 2, 1, seed=1)
    llama.config._attn_implementation = "eager"
    eager = attention_oracle(llama, np.ones(E)).arithmetic
    assert (eager.rtol, eager.parameter_rtol) == (1e-4, 1e-3)
    # A stated tolerance is kept, and one below rtol is refused by name.
    kept = attention_oracle(_gpt2(E, 2, seed=3), np.ones(E), dtype="float32", parameter_rtol=2e-4)
    assert kept.arithmetic.parameter_rtol == 2e-4
    with pytest.raises(va.InvalidArgument, match="parameter_rtol"):
        attention_oracle(_gpt2(E, 2, seed=3), np.ones(E), dtype="float32", parameter_rtol=1e-5)
