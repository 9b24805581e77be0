"""verified-attn: learning softmax attention from black-box queries, exactly and checkably.

>>> import verified_attn as va
>>> model = va.SingleHeadAttention([[1, 2], [0, -1]], [3, 0])
>>> rec = va.learn_single_head(va.Oracle(model, arithmetic="certified"))
>>> rec.W == model.W, rec.queries, rec.bound
(True, 6, 6)
"""

from __future__ import annotations

__version__ = "0.1.0"

from verified_attn import claims
from verified_attn.arithmetic import ARITHMETICS, get_arithmetic
from verified_attn.certificates import CertificateCheck, verify_certificate
from verified_attn.claims import check_claims
from verified_attn.counterexample import Counterexample
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
from verified_attn.sweep import sweep
from verified_attn.transformer import learn_relu_ffn, learn_transformer
from verified_attn.verification import Verification

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
    "sweep",
    "verify_certificate",
]
