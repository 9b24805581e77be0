"""Claims of kind "formal": the algebraic core of each theorem, proved in Coq for every d.

>>> from verified_attn.formal.claims import CLAIMS, THEOREMS
>>> CLAIMS[0].id, CLAIMS[0].level
('formal/softmax2-sigmoid', 'proved for all d (Coq: softmax2_sigmoid)')
>>> len(THEOREMS) >= 14
True

A check builds ``formal/`` (once per process), runs ``Print Assumptions`` on the claim's
theorems and passes iff they exist and rest only on :data:`~verified_attn.formal.ALLOWED_AXIOMS`.
Without ``coqc`` the result is *skipped* (``ClaimResult.skipped``), not failed, and
``verified-attn check`` says how many were skipped. What each theorem states is in
``formal/README.md`` and ``docs/formal.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from verified_attn import formal
from verified_attn.checks import Claim, ClaimResult

__all__ = ["CLAIMS", "THEOREMS", "FormalTheorem", "check_formal"]


@dataclass(frozen=True)
class FormalTheorem:
    """One registered formal claim: its id, the Coq file (module) and theorem names."""

    claim_id: str
    paper_ref: str
    module: str
    names: tuple[str, ...]
    statement: str
    covers: tuple[str, ...] = ()  # the instance/symbolic claims whose core it proves


THEOREMS: list[FormalTheorem] = [
    FormalTheorem(
        "formal/softmax2-sigmoid",
        "Thm 4.1",
        "Softmax",
        ("softmax2_sigmoid",),
        "On two tokens, softmax's first weight is sigmoid(s_1 - s_2), for all scores.",
        ("thm-4.1/sigmoid-reduction",),
    ),
    FormalTheorem(
        "formal/logit-sigmoid",
        "Thm 4.1",
        "Softmax",
        ("logit_sigmoid", "sigmoid_injective"),
        "logit(sigmoid(x)) = x for every real x, so sigmoid is injective.",
        ("thm-4.1/logit-identity",),
    ),
    FormalTheorem(
        "formal/probe-identity",
        "Thm 4.1",
        "Softmax",
        ("probe_identity",),
        "For every d, W, c, v, b, u, t, beta: on [b + t u; b], "
        "f = b^T v + sigmoid(t u^T (W b + c)) t u^T v + beta.",
        ("thm-4.1/sigmoid-reduction", "thm-4.1/logit-identity"),
    ),
    FormalTheorem(
        "formal/design-invertible",
        "Thm 4.1",
        "Thm41",
        ("design_invertible",),
        "For every d and v, with p an index of a largest |v_p|: the learner's design "
        "(u_k = e_k, or e_k + e_p where 4|v_k| < |v_p|) has the inverse I - e_p s^T, and if "
        "v != 0 then |u_k^T v| >= |v_p|/4 > 0 for every k.",
        ("thm-4.1/linear-system",),
    ),
    FormalTheorem(
        "formal/thm41-identifiable",
        "Thm 4.1",
        "Thm41",
        ("thm41_identifiable",),
        "For every d: if v != 0 and two heads give the same answers on the learner's "
        "d^2 + d queries ([e_i], then [e_j + u_k; e_j] with the design built from the "
        "answers), then W = W' and v = v'.",
        ("thm-4.1/exact-recovery", "thm-4.1/linear-system"),
    ),
    FormalTheorem(
        "formal/lemmaA1-lipschitz",
        "Lemma A.1",
        "LemmaA1",
        ("lemmaA1_lipschitz", "lemmaA1_constant_4_fails"),
        "logit is L-Lipschitz on [sigmoid(-1/2), sigmoid(1/2)] with L = 2 + e^(1/2) + "
        "e^(-1/2), and the same statement with 4 in place of L is false.",
        ("lemma-a.1/lipschitz",),
    ),
    FormalTheorem(
        "formal/lipschitz-constant-lt-5",
        "Lemma A.1",
        "LemmaA1",
        ("lipschitz_constant_lt_5",),
        "L = 2 + e^(1/2) + e^(-1/2) < 5 (the paper's constant).",
        ("lemma-a.1/lipschitz",),
    ),
    FormalTheorem(
        "formal/prop71-permutation",
        "Prop 7.1",
        "Prop71",
        ("prop71_permutation", "prop71_affine_permutation"),
        "For every d: any permutation of the heads (bias-free or affine) gives the same "
        "output on every sequence of every length N.",
        ("prop-7.1/permutation",),
    ),
    FormalTheorem(
        "formal/prop71-shared-split",
        "Prop 7.1",
        "Prop71",
        ("prop71_shared_split", "prop71_affine_shared_split"),
        "For every d: two heads with one W (and c) and values v1 + v2 = v1' + v2' give the "
        "same output on every sequence of every length.",
        ("prop-7.1/shared-score-split",),
    ),
    FormalTheorem(
        "formal/thm41-affine-identifiable",
        "Thm 4.1",
        "Thm41Affine",
        ("thm41_affine_identifiable", "answer_c_probe"),
        "For every d: if the design U has an inverse, the scales tc_k and t_kj are nonzero "
        "and u_k^T v != 0 for every k, two affine heads (W, c, v, beta) that give the same "
        "answers to the d^2 + 2d + 1 queries [0], [e_i], [tc_k u_k; 0] and "
        "[e_j + t_kj u_k; e_j] are equal on every coordinate below d.",
        ("thm-4.1/affine",),
    ),
    FormalTheorem(
        "formal/cert-head-identified",
        "Thm 4.1",
        "CertHead",
        ("plain_identified", "unique_in_spec", "brackets_spec"),
        "For every d: if a recorded design U has an inverse, each probe's answer interval "
        "lies strictly between the answers at two logit brackets, and the intervals "
        "the inverse transpose of U gives each W_ij and the answers give each v_i are narrower than 1/(D b) "
        "around the certified a/b, then the certified head answers inside the recorded "
        "intervals and every head with denominators <= D that does equals it.",
        ("thm-4.1/linear-system",),
    ),
    FormalTheorem(
        "formal/cert-affine-identified",
        "Thm 4.1",
        "CertAffine",
        ("affine_identified",),
        "For every d, the affine head (W, c, v, beta): if a recorded design U has an "
        "inverse, each probe's answer interval ([tc_k u_k; 0] and [e_j + t_kj u_k; e_j]) lies "
        "strictly between the answers at two logit brackets, and the intervals the answers "
        "give beta, each v_i, and (through the inverse transpose of U) each c_i and W_ij are "
        "narrower than 1/(D b) around the certified a/b, then the certified head answers "
        "inside the d^2 + 2d + 1 recorded intervals and every head with denominators <= D "
        "that does equals it.",
        ("thm-4.1/affine",),
    ),
    FormalTheorem(
        "formal/cert-exact-identified",
        "Thm 4.1",
        "CertExact",
        ("exact_plain_identified", "exact_affine_identified", "plain_w", "exact_w", "exact_c"),
        "For every d and every recorded design U with an inverse, nonzero probe scales and "
        "nonzero u_k^T v (checked over Q): if the certified rational head gives exactly the "
        "recorded answers to the d^2 + d queries [e_i] and [e_j + t_kj u_k; e_j] (affine: "
        "d^2 + 2d + 1, with [0] and [tc_k u_k; 0]), every head over the reals that gives "
        "them equals it (Theorem 4.1 in its affine form; no denominator bound); and the "
        "certified head's answer to each probe is a + s / (1 + exp(nl)) with a, s, nl the "
        "rationals of the head (the instance each exported exact single-head run proves).",
        ("thm-4.1/affine",),
    ),
    FormalTheorem(
        "formal/cert-pair-families",
        "Prop 7.1",
        "CertPair",
        (
            "multi_head_ext",
            "pair_permutation",
            "pair_shared_split",
            "pair_dead_head",
            "pair_cancelling",
        ),
        "For every d and every length N: two multi-head models with rational heads compute "
        "the same output on every sequence when the second rotates the first's heads, splits "
        "the summed v of two heads sharing one W differently, gives a head with v = 0 another "
        "W, or replaces a cancelling pair (W1, u1), (W1, -u1) by (W2, u2), (W2, -u2), the "
        "other heads agreeing entry by entry (the theorems an exported counterexample pair "
        "applies).",
        (
            "prop-7.1/permutation",
            "prop-7.1/shared-score-split",
            "prop-7.1/dead-head",
            "prop-7.1/cancelling-values",
        ),
    ),
    FormalTheorem(
        "formal/prop71-canonical-form",
        "Prop 7.1",
        "Canonical",
        ("canonical_same_map", "split_group"),
        "For every d and every number of heads: two multi-head models whose summed v over "
        "the heads sharing each W agree, for the W of every head of either model (the same "
        "canonical form), give the same output on every sequence of every length.",
        (
            "prop-7.1/permutation",
            "prop-7.1/shared-score-split",
            "prop-7.1/dead-head",
            "prop-7.1/cancelling-values",
        ),
    ),
    FormalTheorem(
        "formal/prop71-dead-head",
        "Prop 7.1",
        "Prop71",
        ("prop71_dead_head", "prop71_affine_dead_head"),
        "For every d: a head with v = 0 gives the same output whatever its W (and c), on "
        "every sequence of every length.",
        ("prop-7.1/dead-head",),
    ),
    FormalTheorem(
        "formal/prop71-cancelling",
        "Prop 7.1",
        "Prop71",
        ("prop71_cancelling", "prop71_affine_cancelling"),
        "For every d: heads (W1, u1), (W1, -u1) and (W2, u2), (W2, -u2) give the same output "
        "on every sequence of every length.",
        ("prop-7.1/cancelling-values",),
    ),
    FormalTheorem(
        "formal/transformer-antisymmetry",
        "docs/theory.md, The one-layer Transformer",
        "Transformer",
        ("transformer_antisymmetry", "transformer_antisymmetry_head"),
        "For every d, e, m, N: T(X) - T(-X) = alpha(X)^T X V A w_o for the one-layer "
        "Transformer with a bias-free ReLU FFN.",
        ("transformer/antisymmetry",),
    ),
    FormalTheorem(
        "formal/transformer-ffn-reduction",
        "docs/theory.md, The one-layer Transformer",
        "Transformer",
        ("transformer_ffn_reduction", "transformer_length1"),
        "For every d, e, m, N: T(X) = g(X^T alpha(X)) with g(x) = w_o^T ReLU(A^T V^T x), "
        "and a length-1 query [x] returns g(x).",
        ("transformer/composition",),
    ),
    FormalTheorem(
        "formal/transformer-heads-reduction",
        "docs/theory.md, The one-layer Transformer",
        "TransformerHeads",
        ("transformer_heads_reduction", "transformer_heads_piece"),
        "For every d, e, m, H, N, with score biases c_h and FFN biases a, b: where the ReLU "
        "activation pattern is a fixed s, T(X) = sum_h alpha_h(X)^T X V_h A_s w_o + "
        "(sum over k in s of w_k a_k) + b, H attention heads with the effective values V_h A_s w_o "
        "(V_h times the FFN's gradient on the piece) plus a constant.",
        ("transformer/biased-transformer",),
    ),
    FormalTheorem(
        "formal/transformer-heads-length1",
        "docs/theory.md, The one-layer Transformer",
        "TransformerHeads",
        ("transformer_heads_length1", "transformer_heads_single"),
        "For every d, e, m, H: a length-1 query [x] returns "
        "w_o^T ReLU(A^T sum_h V_h^T x + a) + b, the biased FFN at sum_h V_h^T x; with one "
        "head, c = 0, a = 0 and b = 0 the model is the bias-free one-layer Transformer.",
        ("transformer/biased-ffn-exact",),
    ),
    FormalTheorem(
        "formal/skeleton-identity",
        "Thm 5.1",
        "Skeleton",
        ("skeleton_identity", "skeleton_measurement_count"),
        "For every d, r: if W = C X (C spans the columns of W) and N (U_S^T C) = I_r, then "
        "W = C N U_S^T W; the skeleton's steps make sum_k (2(d - k) - 1) = 2dr - r^2 "
        "measurements.",
        ("thm-5.1/skeleton-identity", "thm-5.1/skeleton-count"),
    ),
    FormalTheorem(
        "formal/skeleton-determines",
        "Thm 5.1",
        "Skeleton",
        ("skeleton_determines",),
        "For every d, r: two d x d matrices whose columns are spanned by their measured "
        "columns W B (rank r), with the same measured columns W B and pivot rows U_S^T W "
        "(2dr - r^2 distinct numbers) and an inverse of the pivot block U_S^T W B, are equal.",
        ("thm-5.1/skeleton-identity",),
    ),
    FormalTheorem(
        "formal/cert-lowrank-identified",
        "Thm 5.1",
        "CertLowRank",
        ("lowrank_identified", "holds_comb"),
        "For every d, r: if a skeleton run's probes, read as linear equations in W B and "
        "U_S^T W (with the cross U_S^T (W B) = (U_S^T W) B), have a left inverse, the "
        "certified W has every recorded measurement u^T W b and W = (W B) X, and the pivot "
        "block U_S^T W B has an inverse, then every head (W', v') whose columns are spanned "
        "by W' B and that has the recorded answers to [e_i] and the 2dr - r^2 recorded "
        "measurements is the certified head (the instance each exported low-rank run proves).",
        ("thm-5.1/skeleton-identity",),
    ),
    FormalTheorem(
        "formal/cert-lowrank-certified",
        "Thm 5.1",
        "CertLowRankCert",
        ("lowrank_cert_identified", "answer_p"),
        "For every d, r: if the exact skeleton checks pass on a certified low-rank run's "
        "rationals, each answer to [e_i] pins v_i and each probe's answer interval lies "
        "strictly between its answers at two logit brackets narrower than 1/(D b) around "
        "the measurement m = u^T W b = a/b, then the certified head answers inside every "
        "recorded interval, and every head whose columns are spanned by W' B, whose v' "
        "entries and recorded measurements u^T W' b are rationals with denominators at most "
        "D, and that answers inside the intervals is the certified head (the measurement-level "
        "form; exported files use formal/cert-lowrank-entries).",
        ("thm-5.1/skeleton-identity",),
    ),
    FormalTheorem(
        "formal/measurement-denominator",
        "Thm 5.1",
        "CertLowRankCert",
        ("measure_den_le", "measure_den_D_fails"),
        "For every d, W, u, b: if every entry of W is a rational with denominator at most D "
        "and cu u, cb b are integer vectors (cu, cb positive integers), then u^T W b is a "
        "rational with denominator at most D^K cu cb, K the number of pairs (i, j) with "
        "u_i b_j nonzero; the bound D alone is false (entries 1/13 and 1/11, u = (1, 1), "
        "b = (1, 0) give 24/143).",
        ("thm-5.1/skeleton-identity",),
    ),
    FormalTheorem(
        "formal/cert-lowrank-entries",
        "Thm 5.1",
        "CertLowRankCert",
        ("lowrank_cert_entries", "lowrank_cert_core"),
        "For every d, r: if the exact skeleton checks pass on a certified low-rank run's "
        "rationals, the certified entries have denominators at most D, each answer to [e_i] "
        "pins v_i, and each probe's answer interval lies strictly between its answers at two "
        "logit brackets narrower than 1/(D_m b) around its measurement m = a/b, D_m = D^K cu cb, "
        "then the certified head answers inside every recorded interval, and every head whose "
        "columns are spanned by W' B, whose entries (of W' and v') are rationals with "
        "denominators at most D, and that answers inside the intervals is the certified head "
        "(the instance each exported certified low-rank run proves).",
        ("thm-5.1/skeleton-identity",),
    ),
    FormalTheorem(
        "formal/cert-multi-head-certified",
        "Prop 7.1",
        "CertMultiHead",
        ("mh_answers_in", "answer_seqk", "grid_determines_model"),
        "For every d and H0: on [b + u; ...; b + u; b] (k copies) a head answers "
        "b^T v + u^T v k / (k + exp(-u^T W b)); if a certified canonical run's per-head "
        "numbers are the rational heads' own and each recorded interval holds their sum, "
        "the heads answer every query the design generates inside its recorded interval "
        "(one interval per query) and their scores and residues at the design's pairs have "
        "denominators at most D; and with inverses of U and B, a model whose heads have "
        "the certified heads' scores and residues at the d^2 grid pairs gives the same "
        "output on every sequence. That a model answering inside the intervals has those "
        "scores and residues is formal/multi-head-interpolation-bound (for runs whose "
        "intervals are narrow enough for D); identification from exact answers is "
        "formal/multi-head-interpolation and formal/multi-head-labelling.",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/multi-head-interpolation",
        "Prop 7.1",
        "CertMultiHeadId",
        (
            "kprobe_identifies",
            "cauchy_groups_zero",
            "kprobe_fewer_fails",
            "mh_masses_determined",
            "atoms_permutation",
            "kprobe_pairs",
            "mh_pairs_determined",
        ),
        "For every d and H0: two models of at most H0 heads that give the same answers F(0), "
        "..., F(2 H0) at a pair (u, b) (F(k): k copies of b + u, then b) have, for every real "
        "s, the same sum of residues u^T v_h over their heads with score u^T W_h b = s "
        "(from: a sum of c_j / (x + z_j) over at most n pairs that vanishes at n distinct "
        "points with x + z_j > 0 has every group sum of the c_j at one z equal to 0); with "
        "F(0), ..., F(2 H0 - 1) only this is false (H0 = 1); so models of at most H0 heads "
        "with equal answers to every query a canonical run's design generates have equal "
        "score masses at every pair; if one model has H0 heads with pairwise distinct scores "
        "and nonzero residues at the pair, the other has the same (residue, score) pairs up "
        "to order (a run whose H0 certified heads are so at every pair: checked over Q). "
        "From exact answers (answers known to eps: formal/multi-head-interpolation-bound); "
        "the labelling of heads across pairs is formal/multi-head-labelling.",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/multi-head-labelling",
        "Prop 7.1",
        "CertMultiHeadLabel",
        ("labels_determine", "label_one", "mh_identified"),
        "For every d and H0: if at every pair of a canonical run's design another model has "
        "the reference model's (residue, score) pairs up to order, the reference pairs at "
        "(u_0, b_0) are distinct, the links (u_0 + u_k, b_0) are unambiguous and equal "
        "residues at u_k mean equal scores on row k (no ties), then, given inverses of U and "
        "B, the other model gives the reference model's output on every sequence (each of its "
        "heads has one reference head's grid scores and residues, and the labelling is a "
        "permutation); so for a run whose H0 certified heads pass these checks over Q, every "
        "model of at most H0 heads giving exactly the certified answers to the design's "
        "queries is the certified model. From exact answers (from the recorded intervals: "
        "formal/multi-head-interpolation-bound); runs with ties are not covered.",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/cert-multi-head-affine-answers",
        "Prop 7.1",
        "CertMultiHeadAffine",
        ("answer_seqk_affine", "amh_answers_in", "akprobe_identifies", "amh_masses_determined"),
        "For every d and H0: an affine head (W, c, v) answers b^T v + u^T v k / (k + exp(-u^T "
        "(W b + c))) on [b + u; ...; b + u; b] (k copies); if the per-head numbers recorded "
        "with each answer of a certified affine canonical run (d + 1 probes) are the "
        "certified heads' own (checked over Q) and each recorded interval holds their sum "
        "plus beta, the certified heads with beta answer every query of the design inside "
        "its interval, and their scores and residues at the pairs have denominators at most "
        "D; and two affine models of at most H0 heads, with any output biases, giving the "
        "same answers to the design's queries have the same score masses at every pair (the "
        "instance each exported affine run proves).",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/multi-head-exact-identified",
        "Prop 7.1",
        "CertMultiHeadExact",
        ("xrecs_gives", "mh_exact_masses", "mh_exact_identified"),
        "For every d and H0: if the per-head numbers (b^T v_h, u^T v_h, u^T W_h b) recorded "
        "with each answer of an exact canonical run are the certified heads' own (checked "
        "over Q) and sum, as b^T v + u^T v k / (k + exp(-u^T W b)) per head, to the recorded "
        "answer, then the certified heads give exactly the recorded answers to every query "
        "the design generates; every model of at most H0 heads giving them has the "
        "certified heads' residue sum at every score at every pair; and when the H0 "
        "certified heads pass the labelling checks over Q it is the certified model on "
        "every sequence (no denominator bound: the instance each exported exact canonical "
        "run proves).",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/multi-head-interpolation-bound",
        "Prop 7.1",
        "CertMultiHeadBound",
        (
            "cauchy_groups_bound",
            "kprobe_masses_close",
            "kprobe_masses_equal",
            "den_sep",
            "mass_den",
            "kprobe_pairs_den",
            "mh_pairs_close",
            "mh_identified_close",
        ),
        "For every n: if |sum_j c_j / (x_i + z_j)| <= eps at n points x_i at least g apart, "
        "over at most n pairs with 0 < x_i + z_j <= A and poles that differ at least delta "
        "apart, every group sum of the c_j at one pole is at most A (1 + 2 A^2 / (delta g))^n "
        "eps in absolute value (the elimination of cauchy_groups_zero, each step bounded). "
        "So, for every d and H0, two models of at most H0 heads whose answers F(0), ..., "
        "F(2 H0) at a pair differ by at most eps, with scores in [-S, S] that differ at least "
        "sigma apart, have score masses within 2 K eps, K = A (1 + 2 A^2 e^S / sigma)^(2 H0), "
        "A = 2 H0 + e^S; if every score and residue of both is a rational with denominator "
        "at most D (sigma = 1/D^2; a mass difference has denominator at most D^(2 H0)) and "
        "2 K eps D^(2 H0) < 1, a model of H0 heads with distinct scores and nonzero residues "
        "and the other have the same (residue, score) pairs up to order. For a certified "
        "run whose recorded intervals are at most eps wide with that inequality (checked "
        "over Q with e^S <= 3^S), every model of at most H0 heads meeting the assumption "
        "(scores and residues at the design's pairs of denominator at most D, scores in "
        "[-S, S]) and answering inside every interval has the certified pairs at every pair "
        "and, with the labelling checks, is the certified model. The inequality needs about "
        "301 bits of interval width at H0 = 2, S = 1, D = 2^22, and 805 at D = 2^64.",
        ("prop-7.1/canonical-recovery",),
    ),
    FormalTheorem(
        "formal/cert-hypothesis-pairs",
        "Thm 4.1, App B, Transformer",
        "CertHyp",
        ("hyp_zero_value", "hyp_positive_scale", "hyp_cancelling_neurons", "hyp_ffn_bias"),
        "For every d (and e, m), on every sequence of every length: two heads with rational "
        "W and v = 0 give the same output; heads (W, v) and (W, c v) with a rational c > 0 "
        "give f2 = c f1, hence the same sign; a one-layer Transformer whose FFN neurons lie "
        "on one ray a (column k of A is s_k a, s_k >= 0) with sum_k w_k s_k = 0 outputs 0, "
        "whatever W and V; for a biased FFN g and a rational x with D(2x) != 2 D(x), "
        "D(y) = g(y) - g(-y) over Q, no single head (W, v) has f([y]) - f([-y]) = D(y) at "
        "both y = x and y = 2x (the theorems the exported hypothesis counterexamples apply).",
        (
            "thm-4.1/hypothesis/v-zero",
            "app-b/hypothesis/positive-scale",
            "transformer/hypothesis/v-eff-zero",
            "transformer/hypothesis/ffn-bias",
        ),
    ),
    FormalTheorem(
        "formal/cert-transformer-pairs",
        "Transformer",
        "CertTransformerHyp",
        ("tf_dead_neuron", "tf_always_on_neuron", "tf_killed_head", "tf_colliding_heads"),
        "For every d, e, m and H, on every sequence of every length, for multi-head "
        "Transformers T(X) = w_o^T ReLU(A^T sum_h V_h^T X^T softmax(X (W_h x_N + c_h)) + a) + b "
        "with rational parameters: a last neuron with zero input weights and bias <= 0 "
        "changes nothing, whatever its output weight; a last neuron with zero input weights "
        "and bias a_m >= 0 is the same as w_m a_m added to b; a head p with V_p A = 0 may "
        "have any W_p and c_p; a last head with head p's W and c is the same as adding its V "
        "to V_p (the theorems the exported canonical-form pairs apply).",
        (
            "transformer/hypothesis/dead-neuron",
            "transformer/hypothesis/always-on-neuron",
            "transformer/hypothesis/killed-head",
            "transformer/hypothesis/colliding-heads",
        ),
    ),
    FormalTheorem(
        "formal/cert-recorded-queries",
        "Thm 4.1, Thm 5.1",
        "CertQueries",
        ("queries_agree", "answer_two"),
        "For every d: two heads with rational W1, W2 and the same v answer each query [x] "
        "alike, and a query [a; b] alike when (a - b)^T W1 b = (a - b)^T W2 b or "
        "(a - b)^T v = 0 (the answer is b^T v + sigmoid((a - b)^T W b) (a - b)^T v): the "
        "theorem the exported pairs that agree on a learner's recorded queries apply.",
        (
            "thm-4.1/hypothesis/one-query-short",
            "thm-4.1/hypothesis/design-orthogonal",
            "thm-5.1/hypothesis/rank-exceeds",
        ),
    ),
    FormalTheorem(
        "formal/thm61-entry-bound",
        "Thm 6.1",
        "Thm61",
        ("thm61_entry_bound", "clip_nonexpansive"),
        "For all reals: on the probe [b e_i + a e_j; a e_j] (a, b > 0, a b W_ij in "
        "[-1/2, 1/2]) with answers off by at most tau and |v_i| >= mu > tau, the estimate "
        "logit(clip alpha^) / (a b) is within L tau (1 + a + sigmoid(1/2) b) / "
        "(a b^2 (mu - tau)) of W_ij, L = 2 + e^(1/2) + e^(-1/2) (Lemma A.1's constant).",
        ("thm-6.1/error-bound",),
    ),
]


def _all_groups() -> list[tuple[str, tuple[str, ...]]]:
    return [(t.module, t.names) for t in THEOREMS]


def _failed(theorem: FormalTheorem, detail: str, *, skipped: bool = False) -> ClaimResult:
    """The theorem's claim, not passed (or skipped), with why."""
    return ClaimResult(
        theorem.claim_id,
        theorem.paper_ref,
        theorem.statement,
        passed=False,
        detail=detail,
        skipped=skipped,
    )


def check_formal(theorem: FormalTheorem) -> ClaimResult:
    """Build ``formal/`` and check the theorem's names and assumptions (skipped sans Coq)."""
    level = f"Coq: {', '.join(theorem.names)} in formal/{theorem.module}.v"
    if not formal.coq_available():
        missing = "coqc" if formal.coqc_path() is None else "formal/ (the Coq sources)"
        return _failed(
            theorem,
            f"skipped: needs Coq ({formal.COQ_INSTALL_HINT}); {missing} not found",
            skipped=True,
        )
    build = formal.build()
    if not build.ok:
        return _failed(theorem, f"formal/ does not build: {build.log[-500:]}")
    axioms = sorted(formal.assumptions(_all_groups())[(theorem.module, theorem.names)])
    bad = sorted(set(axioms) - formal.ALLOWED_AXIOMS)
    detail = f"{level}; built in {build.seconds:.1f} s; Print Assumptions: " + (
        ", ".join(axioms) if axioms else "closed"
    )
    if bad:
        detail += f"; NOT ALLOWED: {bad}"
    return ClaimResult(
        theorem.claim_id,
        theorem.paper_ref,
        theorem.statement,
        passed=not bad,
        detail=detail,
        data={"theorems": list(theorem.names), "axioms": axioms, "covers": list(theorem.covers)},
    )


def _claim(theorem: FormalTheorem) -> Claim:
    def check(seed: int) -> ClaimResult:  # the seed does not matter: a proof is a proof
        return check_formal(theorem)

    return Claim(
        theorem.claim_id,
        theorem.paper_ref,
        theorem.statement,
        check,
        level=f"proved for all d (Coq: {', '.join(theorem.names[:1])})",
    )


CLAIMS = [_claim(t) for t in THEOREMS]
