"""verified-attn: learning softmax attention from black-box queries, exactly and checkably.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0])
>>> rec = va.learn_single_head(va.Oracle(model, arithmetic="certified"))
>>> rec.W == model.W, rec.queries, rec.bound
(True, 6, 6)

The public names load on first use (PEP 562), so ``import verified_attn`` and
``verified-attn --version`` do not import SymPy, NumPy or SciPy; ``from verified_attn
import X`` and ``dir(verified_attn)`` work as for any package.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from verified_attn.errors import (
    CertificateError,
    InvalidArgument,
    ModelClassMismatch,
    NotIdentifiable,
    OracleError,
    PrecisionExhausted,
    QueryBudgetExceeded,
    VerifiedAttnError,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from verified_attn import claims
    from verified_attn.arithmetic import ARITHMETICS, get_arithmetic
    from verified_attn.certificates import CertificateCheck, verify_certificate
    from verified_attn.claims import check_claims
    from verified_attn.counterexample import Counterexample
    from verified_attn.exact_recovery import learn_single_head
    from verified_attn.formal.export import export_coq
    from verified_attn.hypotheses import counterexample, hypotheses
    from verified_attn.low_rank import learn_low_rank
    from verified_attn.models import (
        MultiHeadAttention,
        OneLayerTransformer,
        ReluFFN,
        SingleHeadAttention,
        attention_output,
    )
    from verified_attn.multi_head import canonical_form, equivalent, learn_multi_head
    from verified_attn.noisy import learn_noisy
    from verified_attn.oracle import Oracle
    from verified_attn.oracle_wrappers import LabelOracle, NoisyOracle, StochasticOracle
    from verified_attn.recovery import (
        LabelRecovery,
        LowRankRecovery,
        MultiHeadRecovery,
        NoisyRecovery,
        Recovery,
        ReluFFNRecovery,
        SingleHeadRecovery,
        TransformerRecovery,
    )
    from verified_attn.recovery_io import load_recovery
    from verified_attn.sweep import sweep
    from verified_attn.transformer import learn_relu_ffn, learn_transformer
    from verified_attn.verification import Verification

#: public name -> the module that defines it (imported on first access).
_LAZY: dict[str, str] = {
    "claims": "verified_attn.claims",
    "ARITHMETICS": "verified_attn.arithmetic",
    "get_arithmetic": "verified_attn.arithmetic",
    "CertificateCheck": "verified_attn.certificates",
    "verify_certificate": "verified_attn.certificates",
    "check_claims": "verified_attn.claims",
    "Counterexample": "verified_attn.counterexample",
    "learn_single_head": "verified_attn.exact_recovery",
    "export_coq": "verified_attn.formal.export",
    "counterexample": "verified_attn.hypotheses",
    "hypotheses": "verified_attn.hypotheses",
    "learn_low_rank": "verified_attn.low_rank",
    "MultiHeadAttention": "verified_attn.models",
    "OneLayerTransformer": "verified_attn.models",
    "ReluFFN": "verified_attn.models",
    "SingleHeadAttention": "verified_attn.models",
    "attention_output": "verified_attn.models",
    "canonical_form": "verified_attn.multi_head",
    "equivalent": "verified_attn.multi_head",
    "learn_multi_head": "verified_attn.multi_head",
    "learn_noisy": "verified_attn.noisy",
    "Oracle": "verified_attn.oracle",
    "LabelOracle": "verified_attn.oracle_wrappers",
    "NoisyOracle": "verified_attn.oracle_wrappers",
    "StochasticOracle": "verified_attn.oracle_wrappers",
    "LabelRecovery": "verified_attn.recovery",
    "LowRankRecovery": "verified_attn.recovery",
    "MultiHeadRecovery": "verified_attn.recovery",
    "NoisyRecovery": "verified_attn.recovery",
    "Recovery": "verified_attn.recovery",
    "ReluFFNRecovery": "verified_attn.recovery",
    "SingleHeadRecovery": "verified_attn.recovery",
    "TransformerRecovery": "verified_attn.recovery",
    "load_recovery": "verified_attn.recovery_io",
    "sweep": "verified_attn.sweep",
    "learn_relu_ffn": "verified_attn.transformer",
    "learn_transformer": "verified_attn.transformer",
    "Verification": "verified_attn.verification",
}

#: Public functions named like the submodule that defines them: the function is the
#: package's attribute (``va.sweep(...)``), even after the submodule is imported.
_FUNCTION_OVER_MODULE = frozenset({"counterexample", "hypotheses", "sweep"})


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    loaded = importlib.import_module(module)
    is_submodule = module == f"{__name__}.{name}" and name not in _FUNCTION_OVER_MODULE
    value = loaded if is_submodule else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The package's module type: importing a submodule named like a public function
    (the import system then sets it on the package) leaves the function in place."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTION_OVER_MODULE and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

__all__ = [
    "ARITHMETICS",
    "CertificateCheck",
    "CertificateError",
    "Counterexample",
    "InvalidArgument",
    "LabelOracle",
    "LabelRecovery",
    "LowRankRecovery",
    "ModelClassMismatch",
    "MultiHeadAttention",
    "MultiHeadRecovery",
    "NoisyOracle",
    "NoisyRecovery",
    "NotIdentifiable",
    "OneLayerTransformer",
    "Oracle",
    "OracleError",
    "PrecisionExhausted",
    "QueryBudgetExceeded",
    "Recovery",
    "ReluFFN",
    "ReluFFNRecovery",
    "SingleHeadAttention",
    "SingleHeadRecovery",
    "StochasticOracle",
    "TransformerRecovery",
    "Verification",
    "VerifiedAttnError",
    "__version__",
    "attention_output",
    "canonical_form",
    "check_claims",
    "claims",
    "counterexample",
    "equivalent",
    "export_coq",
    "get_arithmetic",
    "hypotheses",
    "learn_low_rank",
    "learn_multi_head",
    "learn_noisy",
    "learn_relu_ffn",
    "learn_single_head",
    "learn_transformer",
    "load_recovery",
    "sweep",
    "verify_certificate",
]
