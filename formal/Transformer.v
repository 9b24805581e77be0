(** * The one-layer Transformer: antisymmetrisation gives a single head, and length-1
    queries give the FFN. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax.
Open Scope R_scope.

Lemma relu_antisym : forall z, relu z - relu (- z) = z.
Proof. intros. unfold relu, Rmax. destruct (Rle_dec 0 z), (Rle_dec 0 (- z)); lra. Qed.

Lemma mat_vec_vopp : forall d W x i, mat_vec d W (vopp x) i = - mat_vec d W x i.
Proof. intros. unfold mat_vec, vopp. rewrite <- sum_opp. apply sum_ext. intros. ring. Qed.

(** Scores are even in X: alpha(-X) = alpha(X). *)
Lemma scores_neg : forall d N X W t, scores d N (neg_tokens X) W t = scores d N X W t.
Proof.
  intros. unfold scores, scores_affine, query_token, neg_tokens.
  rewrite (dot_ext d (vopp (X t)) (vopp (X t)) _ (vopp (vadd (mat_vec d W (X (pred N))) zero_vec)));
    [| reflexivity | intros; unfold vadd, zero_vec; cbv beta; rewrite mat_vec_vopp; unfold vopp; ring].
  rewrite dot_vopp_l, dot_vopp_r. ring.
Qed.

Lemma softmax_neg : forall d N X W t,
  softmax N (scores d N (neg_tokens X) W) t = softmax N (scores d N X W) t.
Proof.
  intros. unfold softmax. rewrite scores_neg.
  rewrite (sum_ext N (fun u => exp (scores d N (neg_tokens X) W u)) (fun u => exp (scores d N X W u)))
    by (intros; rewrite scores_neg; reflexivity).
  reflexivity.
Qed.

(** h(-X) = -h(X). *)
Lemma attn_readout_neg : forall d N X W V j,
  attn_readout d N (neg_tokens X) W V j = - attn_readout d N X W V j.
Proof.
  intros. unfold attn_readout. rewrite <- sum_opp. apply sum_ext. intros t _.
  rewrite softmax_neg. unfold neg_tokens, vopp.
  rewrite (sum_ext d (fun i => - X t i * V i j) (fun i => - (X t i * V i j))) by (intros; ring).
  rewrite sum_opp. ring.
Qed.

(** T(X) - T(-X) = alpha(X)^T X V A w_o = alpha(X)^T X v_eff, for the bias-free FFN. *)
Theorem transformer_antisymmetry : forall d e m N (X : tokens) (W V A : mat) (w_o : vec),
  transformer d e m N X W V A w_o - transformer d e m N (neg_tokens X) W V A w_o =
  sum N (fun t => softmax N (scores d N X W) t * dot d (X t) (v_eff e m V A w_o)).
Proof.
  intros. unfold transformer, ffn. rewrite <- sum_minus.
  set (h := attn_readout d N X W V).
  rewrite (sum_ext m _ (fun k => w_o k * sum e (fun j => A j k * h j))).
  2: { intros k _.
       rewrite (sum_ext e (fun j => A j k * attn_readout d N (neg_tokens X) W V j)
                  (fun j => - (A j k * h j))) by (intros; rewrite attn_readout_neg; unfold h; ring).
       rewrite sum_opp, <- Rmult_minus_distr_l, relu_antisym. reflexivity. }
  (* sum_k w_k sum_j A_jk h_j = sum_j h_j sum_k A_jk w_k *)
  rewrite (sum_ext m _ (fun k => sum e (fun j => h j * (A j k * w_o k))))
    by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
  rewrite sum_swap.
  rewrite (sum_ext e _ (fun j => h j * sum m (fun k => A j k * w_o k)))
    by (intros; rewrite sum_scal_l; reflexivity).
  unfold h, attn_readout.
  rewrite (sum_ext e _ (fun j => sum N (fun t => softmax N (scores d N X W) t *
             sum d (fun i => X t i * (V i j * sum m (fun k => A j k * w_o k))))))
    by (intros; rewrite <- sum_scal_r; apply sum_ext; intros; rewrite Rmult_assoc, <- sum_scal_r;
        f_equal; apply sum_ext; intros; ring).
  rewrite sum_swap. apply sum_ext. intros t _.
  rewrite sum_scal_l. unfold dot, v_eff. f_equal. rewrite sum_swap.
  apply sum_ext. intros i _. rewrite <- sum_scal_l. reflexivity.
Qed.

(** The same as a single attention head with value vector v_eff = V A w_o. *)
Corollary transformer_antisymmetry_head : forall d e m N X W V A w_o,
  transformer d e m N X W V A w_o - transformer d e m N (neg_tokens X) W V A w_o =
  attention d N X W (v_eff e m V A w_o).
Proof.
  intros. rewrite transformer_antisymmetry. unfold attention, attention_affine.
  rewrite Rplus_0_r. reflexivity.
Qed.

(** The FFN reduction: T(X) = g(X^T alpha(X)) with g(x) = w_o^T ReLU(A^T V^T x) ... *)
Theorem transformer_ffn_reduction : forall d e m N X W V A w_o,
  transformer d e m N X W V A w_o =
  ffn e m A w_o (fun j => sum d (fun i =>
     sum N (fun t => softmax N (scores d N X W) t * X t i) * V i j)).
Proof.
  intros. unfold transformer. unfold ffn. apply sum_ext. intros k _. f_equal. f_equal.
  apply sum_ext. intros j _. f_equal. unfold attn_readout.
  rewrite (sum_ext N _ (fun t => sum d (fun i => softmax N (scores d N X W) t * X t i * V i j)))
    by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
  rewrite sum_swap. apply sum_ext. intros. rewrite sum_scal_r. reflexivity.
Qed.

(** ... and a length-1 query [x] returns g(x) itself. *)
Theorem transformer_length1 : forall d e m x W V A w_o,
  transformer d e m 1 (seq1 x) W V A w_o =
  ffn e m A w_o (fun j => sum d (fun i => x i * V i j)).
Proof.
  intros. unfold transformer, ffn. apply sum_ext. intros k _. f_equal. f_equal.
  apply sum_ext. intros j _. f_equal. unfold attn_readout. rewrite sum_one.
  unfold softmax. rewrite sum_one. unfold seq1.
  pose proof (exp_pos (scores d 1 (fun _ => x) W O)). field. lra.
Qed.
