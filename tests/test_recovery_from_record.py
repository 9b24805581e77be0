"""Recovery.from_record: a result's run facts taken from the certificate's RunRecord."""

from __future__ import annotations

import verified_attn as va
from verified_attn.certificates.writer import RunRecord
from verified_attn.noisy import learn_stochastic
from verified_attn.oracle_wrappers import StochasticOracle
from verified_attn.recovery import SingleHeadRecovery
from verified_attn.verification import verify_model

HEAD = va.SingleHeadAttention([[1]], [2])


def _record() -> RunRecord:
    oracle = va.Oracle(HEAD, "certified", precision=128)
    with oracle.run() as run:
        oracle.query([[1]])
        checked = verify_model(oracle, HEAD, count=2, seed=3, lengths=(1, 2))
    return RunRecord(oracle.arithmetic, 3, run.counts, 7, checked, ["an assumption"])


def _result(record: RunRecord, **fields: object) -> SingleHeadRecovery:
    base = {"theorem": "thm-4.1", "parameters": {}, "learned_model": HEAD, "exact": False}
    return SingleHeadRecovery.from_record(record, **{**base, "parameter_count": 2, **fields})


def test_the_run_facts_come_from_the_record() -> None:
    record = _record()
    rec = _result(record)
    assert (rec.arithmetic, rec.precision, rec.seed, rec.bound) == ("certified", 128, 3, 7)
    assert rec.verification is record.verification and rec.verified
    assert (rec.queries, rec.verification_queries) == (1, 2)
    # The same list: an assumption added to the result is in the certificate's header too.
    assert rec.assumptions is record.assumptions


def test_a_field_given_is_the_results_own() -> None:
    rec = _result(_record(), bound=9, verification=None)
    assert rec.bound == 9 and rec.verification is None and not rec.verified


def test_a_stochastic_result_certificate_states_its_probabilistic_assumption() -> None:
    oracle = StochasticOracle(va.Oracle(va.SingleHeadAttention([[0.5]], [2]), "certified"), 1e-3)
    rec = learn_stochastic(oracle, noise_scale=1e-3, target_error=0.05, w_bound=1, margin=1)
    statement = rec.assumptions[0]
    assert statement.startswith("probabilistic")
    assert rec.certificate()["assumptions"][0] == statement
