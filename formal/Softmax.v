(** * Two-token softmax, sigmoid and logit, and the two-token probe identity. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs.
Open Scope R_scope.

Lemma sum_exp_pos : forall N s, (0 < N)%nat -> 0 < sum N (fun u => exp (s u)).
Proof.
  induction N as [|N IH]; intros s HN; [lia|]. simpl.
  destruct N as [|N'].
  - simpl. pose proof (exp_pos (s O)). lra.
  - pose proof (IH s ltac:(lia)). pose proof (exp_pos (s (S N'))). lra.
Qed.

(** The softmax weights sum to one (N >= 1). *)
Lemma softmax_sum : forall N s, (0 < N)%nat -> sum N (softmax N s) = 1.
Proof.
  intros N s HN. unfold softmax, Rdiv.
  rewrite (sum_scal_r N (/ sum N (fun u => exp (s u))) (fun t => exp (s t))).
  pose proof (sum_exp_pos N s HN). field. lra.
Qed.

(** On two tokens, softmax's first weight is the sigmoid of the score difference. *)
Theorem softmax2_sigmoid : forall s : nat -> R,
  softmax 2 s O = sigmoid (s O - s 1%nat).
Proof.
  intros s. unfold softmax, sigmoid. rewrite sum_two.
  replace (- (s O - s 1%nat)) with (s 1%nat + - s O) by ring.
  rewrite exp_plus, exp_Ropp.
  pose proof (exp_pos (s O)). pose proof (exp_pos (s 1%nat)).
  assert (0 < exp (s 1%nat) * / exp (s O)) by
    (apply Rmult_lt_0_compat; [lra | apply Rinv_0_lt_compat; lra]).
  field. repeat split; lra.
Qed.

Lemma softmax2_second : forall s : nat -> R,
  softmax 2 s 1%nat = 1 - softmax 2 s O.
Proof.
  intros s. unfold softmax. rewrite sum_two.
  pose proof (exp_pos (s O)). pose proof (exp_pos (s 1%nat)). field. lra.
Qed.

Lemma sigmoid_pos : forall x, 0 < sigmoid x.
Proof. intros. unfold sigmoid. apply Rinv_0_lt_compat. pose proof (exp_pos (- x)). lra. Qed.

Lemma sigmoid_lt_1 : forall x, sigmoid x < 1.
Proof.
  intros. unfold sigmoid. pose proof (exp_pos (- x)).
  rewrite <- Rinv_1. apply Rinv_lt_contravar; lra.
Qed.

(** 1 - sigmoid x = sigmoid (-x). *)
Lemma one_minus_sigmoid : forall x, 1 - sigmoid x = sigmoid (- x).
Proof.
  intros. unfold sigmoid. rewrite Ropp_involutive, exp_Ropp.
  pose proof (exp_pos x). field. split; lra.
Qed.

(** logit o sigmoid = id. *)
Theorem logit_sigmoid : forall x, logit (sigmoid x) = x.
Proof.
  intros x. unfold logit. rewrite one_minus_sigmoid.
  replace (sigmoid x / sigmoid (- x)) with (exp x).
  - apply ln_exp.
  - unfold sigmoid. rewrite Ropp_involutive, exp_Ropp.
    pose proof (exp_pos x). field. split; lra.
Qed.

(** sigmoid is injective. *)
Theorem sigmoid_injective : forall x y, sigmoid x = sigmoid y -> x = y.
Proof.
  intros x y H. rewrite <- (logit_sigmoid x), <- (logit_sigmoid y), H. reflexivity.
Qed.

(** sigmoid o logit = id on (0, 1). *)
Lemma sigmoid_logit : forall y, 0 < y < 1 -> sigmoid (logit y) = y.
Proof.
  intros y Hy. unfold sigmoid, logit.
  rewrite <- ln_Rinv by (apply Rdiv_lt_0_compat; lra).
  rewrite exp_ln by (apply Rinv_0_lt_compat; apply Rdiv_lt_0_compat; lra).
  field. lra.
Qed.

(** A length-1 query [x]: softmax over one position is 1, so f = x^T v + beta. *)
Lemma attention_length1 : forall d x W c v beta,
  attention_affine d 1 (seq1 x) W c v beta = dot d x v + beta.
Proof.
  intros. unfold attention_affine. rewrite sum_one. unfold softmax. rewrite sum_one.
  unfold seq1. pose proof (exp_pos (scores_affine d 1 (fun _ => x) W c O)). field. lra.
Qed.

(** The two-token probe: on [b + t u; b],
    f = b^T v + sigmoid (t u^T (W b + c)) * t u^T v + beta. *)
Theorem probe_identity : forall d (W : mat) (c v b u : vec) (t beta : R),
  attention_affine d 2 (seq2 (vadd b (vscale t u)) b) W c v beta =
  dot d b v + sigmoid (t * dot d u (vadd (mat_vec d W b) c)) * (t * dot d u v) + beta.
Proof.
  intros. unfold attention_affine. rewrite sum_two.
  rewrite softmax2_second, softmax2_sigmoid.
  unfold scores_affine, seq2, query_token. simpl pred.
  rewrite !dot_vadd_l, !dot_vscale_l.
  replace (dot d b (vadd (mat_vec d W b) c) + t * dot d u (vadd (mat_vec d W b) c)
           - dot d b (vadd (mat_vec d W b) c))
    with (t * dot d u (vadd (mat_vec d W b) c)) by ring.
  ring.
Qed.

(** The bias-free form: on [b + t u; b], f = b^T v + sigmoid (t u^T W b) * t u^T v. *)
Corollary probe_identity_bias_free : forall d (W : mat) (v b u : vec) (t : R),
  attention d 2 (seq2 (vadd b (vscale t u)) b) W v =
  dot d b v + sigmoid (t * dot d u (mat_vec d W b)) * (t * dot d u v).
Proof.
  intros. unfold attention. rewrite probe_identity, Rplus_0_r.
  rewrite dot_vadd_r, dot_zero_r, Rplus_0_r. reflexivity.
Qed.

(** The unscaled probe [b + u; b] (t = 1), as the Thm 4.1 learner sends it. *)
Corollary probe_identity_unscaled : forall d (W : mat) (c v b u : vec) (beta : R),
  attention_affine d 2 (seq2 (vadd b u) b) W c v beta =
  dot d b v + sigmoid (dot d u (vadd (mat_vec d W b) c)) * dot d u v + beta.
Proof.
  intros. unfold attention_affine. rewrite sum_two.
  rewrite softmax2_second, softmax2_sigmoid.
  unfold scores_affine, seq2, query_token. simpl pred.
  rewrite !dot_vadd_l.
  replace (dot d b (vadd (mat_vec d W b) c) + dot d u (vadd (mat_vec d W b) c)
           - dot d b (vadd (mat_vec d W b) c))
    with (dot d u (vadd (mat_vec d W b) c)) by ring.
  ring.
Qed.
