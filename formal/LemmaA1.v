(** * Lemma A.1: logit is Lipschitz on [sigmoid(-1/2), sigmoid(1/2)], with the sharp
    constant L = 2 + e^{1/2} + e^{-1/2} = 1 / (sigmoid(1/2) sigmoid(-1/2)) < 5. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax.
Open Scope R_scope.

Definition lipschitz_L : R := 2 + exp (1/2) + exp (- (1/2)).

(** logit y = ln y - ln (1 - y) on (0, 1): a form whose derivative the library knows. *)
Definition logit_split (y : R) : R := ln y - ln (1 - y).

Lemma logit_split_eq : forall y, 0 < y < 1 -> logit y = logit_split y.
Proof.
  intros y Hy. unfold logit, logit_split. unfold Rdiv. rewrite ln_mult.
  - rewrite ln_Rinv by lra. ring.
  - lra.
  - apply Rinv_0_lt_compat. lra.
Qed.

Lemma logit_split_derivative : forall c, 0 < c < 1 ->
  derivable_pt_lim logit_split c (/ c + / (1 - c)).
Proof.
  intros c Hc.
  replace (/ c + / (1 - c)) with (/ c - (/ (1 - c) * (0 - 1))) by ring.
  change logit_split with (minus_fct ln (comp ln (fun y => 1 - y))).
  apply derivable_pt_lim_minus.
  - apply derivable_pt_lim_ln. lra.
  - apply derivable_pt_lim_comp.
    + change (fun y => 1 - y) with (minus_fct (fct_cte 1) id).
      apply derivable_pt_lim_minus.
      * apply derivable_pt_lim_const.
      * apply derivable_pt_lim_id.
    + apply derivable_pt_lim_ln. lra.
Qed.

Lemma sigmoid_half_pair : sigmoid (1/2) = 1 - sigmoid (- (1/2)).
Proof. rewrite one_minus_sigmoid, Ropp_involutive. reflexivity. Qed.

(** 1 / (a (1 - a)) = L for a = sigmoid(-1/2). *)
Lemma lipschitz_L_eq :
  / (sigmoid (- (1/2)) * (1 - sigmoid (- (1/2)))) = lipschitz_L.
Proof.
  unfold lipschitz_L, sigmoid. rewrite Ropp_involutive. rewrite (exp_Ropp (1/2)).
  pose proof (exp_pos (1/2)). field. split; lra.
Qed.

Lemma exp_half_gt_1 : 1 < exp (1/2).
Proof. pose proof (exp_increasing 0 (1/2) ltac:(lra)) as H. rewrite exp_0 in H. exact H. Qed.

Lemma sigmoid_neg_half_bounds : 0 < sigmoid (- (1/2)) < 1/2.
Proof.
  split; [apply sigmoid_pos|]. unfold sigmoid. rewrite Ropp_involutive.
  assert (1 < exp (1/2)) by exact exp_half_gt_1.
  apply (Rmult_lt_reg_r (1 + exp (1/2))); [lra|]. rewrite Rinv_l by lra. lra.
Qed.

(** On [a, 1 - a] with 0 < a < 1/2, c (1 - c) >= a (1 - a). *)
Lemma derivative_bound : forall a c, 0 < a < 1/2 -> a <= c <= 1 - a ->
  / c + / (1 - c) <= / (a * (1 - a)).
Proof.
  intros a c Ha Hc.
  replace (/ c + / (1 - c)) with (/ (c * (1 - c))) by (field; split; lra).
  apply Rinv_le_contravar.
  - apply Rmult_lt_0_compat; lra.
  - assert (0 <= (c - a) * (1 - a - c)) by (apply Rmult_le_pos; lra). nra.
Qed.

(** Lemma A.1: |logit y1 - logit y2| <= L |y1 - y2| on [sigmoid(-1/2), sigmoid(1/2)]. *)
Theorem lemmaA1_lipschitz : forall y1 y2,
  sigmoid (- (1/2)) <= y1 <= sigmoid (1/2) ->
  sigmoid (- (1/2)) <= y2 <= sigmoid (1/2) ->
  Rabs (logit y1 - logit y2) <= lipschitz_L * Rabs (y1 - y2).
Proof.
  assert (key : forall y1 y2,
    sigmoid (- (1/2)) <= y1 <= sigmoid (1/2) ->
    sigmoid (- (1/2)) <= y2 <= sigmoid (1/2) -> y1 < y2 ->
    Rabs (logit y1 - logit y2) <= lipschitz_L * Rabs (y1 - y2)).
  { intros y1 y2 H1 H2 Hlt. rewrite sigmoid_half_pair in H1, H2.
    pose proof sigmoid_neg_half_bounds as Ha.
    set (a := sigmoid (- (1/2))) in *.
    destruct (MVT_cor2 logit_split (fun c => / c + / (1 - c)) y1 y2 Hlt) as [c [Hc Hcin]].
    { intros c Hc. apply logit_split_derivative. lra. }
    rewrite (logit_split_eq y1), (logit_split_eq y2) by lra.
    rewrite Rabs_minus_sym, (Rabs_minus_sym y1), Hc.
    rewrite Rabs_mult, (Rabs_right (y2 - y1)) by lra.
    rewrite Rabs_right by (apply Rle_ge; apply Rplus_le_le_0_compat;
      left; apply Rinv_0_lt_compat; lra).
    apply Rmult_le_compat_r; [lra|].
    rewrite <- lipschitz_L_eq. fold a. apply derivative_bound; lra. }
  intros y1 y2 H1 H2.
  destruct (Rtotal_order y1 y2) as [Hlt|[Heq|Hgt]].
  - apply key; assumption.
  - subst. unfold Rminus. rewrite !Rplus_opp_r, Rabs_R0. lra.
  - rewrite Rabs_minus_sym, (Rabs_minus_sym y1). apply key; assumption.
Qed.

(** L < 5, from e = exp 1 <= 3: e^{1/2} < 2 and e^{-1/2} < 1. *)
Theorem lipschitz_constant_lt_5 : lipschitz_L < 5.
Proof.
  unfold lipschitz_L.
  assert (Hsq : exp (1/2) * exp (1/2) <= 3).
  { rewrite <- exp_plus. replace (1/2 + 1/2) with 1 by field. exact exp_le_3. }
  assert (Hgt1 : 1 < exp (1/2)) by exact exp_half_gt_1.
  assert (Hlt2 : exp (1/2) < 2) by nra.
  assert (exp (- (1/2)) < 1).
  { rewrite exp_Ropp. apply (Rmult_lt_reg_r (exp (1/2))); [lra|]. rewrite Rinv_l by lra. lra. }
  lra.
Qed.

(** L is also > 4 ... *)
Lemma lipschitz_constant_gt_4 : 4 < lipschitz_L.
Proof.
  unfold lipschitz_L. rewrite exp_Ropp.
  assert (Hgt1 : 1 < exp (1/2)) by exact exp_half_gt_1.
  set (e := exp (1/2)) in *.
  assert (0 < (e - 1) * (e - 1)) by (apply Rmult_lt_0_compat; lra).
  assert (e + / e - 2 = (e - 1) * (e - 1) / e) by (field; lra).
  assert (0 < (e - 1) * (e - 1) / e) by (apply Rdiv_lt_0_compat; lra). lra.
Qed.

(** ... and no constant 4 works: the statement with 4 in place of L is false. *)
Theorem lemmaA1_constant_4_fails : ~ (forall y1 y2,
  sigmoid (- (1/2)) <= y1 <= sigmoid (1/2) ->
  sigmoid (- (1/2)) <= y2 <= sigmoid (1/2) ->
  Rabs (logit y1 - logit y2) <= 4 * Rabs (y1 - y2)).
Proof.
  intros H. pose proof sigmoid_neg_half_bounds as Ha.
  set (a := sigmoid (- (1/2))) in *.
  assert (Hb : sigmoid (1/2) = 1 - a) by exact sigmoid_half_pair.
  specialize (H a (1/2)). rewrite Hb in H.
  assert (Hlt : a < 1/2) by lra.
  destruct (MVT_cor2 logit_split (fun c => / c + / (1 - c)) a (1/2) Hlt) as [c [Hc Hcin]].
  { intros c Hc. apply logit_split_derivative. lra. }
  assert (Hd : 4 < / c + / (1 - c)).
  { replace (/ c + / (1 - c)) with (/ (c * (1 - c))) by (field; split; lra).
    replace 4 with (/ (1/4)) by field.
    apply Rinv_lt_contravar.
    - apply Rmult_lt_0_compat; [apply Rmult_lt_0_compat|]; lra.
    - assert (0 < (1/2 - c) * (1/2 - c)) by (apply Rmult_lt_0_compat; lra). nra. }
  assert (Hle : Rabs (logit a - logit (1/2)) <= 4 * Rabs (a - 1/2)) by (apply H; lra).
  rewrite (logit_split_eq a), (logit_split_eq (1/2)) in Hle by lra.
  rewrite Rabs_minus_sym, (Rabs_minus_sym a), Hc in Hle.
  rewrite Rabs_mult, (Rabs_right (1/2 - a)) in Hle by lra.
  rewrite Rabs_right in Hle by (apply Rle_ge; apply Rplus_le_le_0_compat;
      left; apply Rinv_0_lt_compat; lra).
  assert (0 < 1/2 - a) by lra. nra.
Qed.
