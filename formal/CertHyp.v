(** * Counterexamples to hypotheses: the general theorems an exported pair applies.

    [verified_attn.hypotheses] lists, for each theorem's hypothesis, a pair of models that
    shows it is needed. Three of them are statements about every sequence of every length,
    proved here for every d (and e, m) from finite checks over Q run by computation:
    - [hyp_zero_value] (Theorem 4.1, v != 0): two heads with v = 0 are equal on every
      sequence, whatever their W;
    - [hyp_positive_scale] (Appendix B, labels sign f): heads (W, v) and (W, c v) with a
      rational c > 0 satisfy f2 = c f1, so they give the same sign on every sequence;
    - [hyp_cancelling_neurons] (Transformer, v_eff != 0): a Transformer whose FFN neurons
      lie on one ray a (column k of A is s_k a, s_k >= 0) with sum_k w_k s_k = 0 is 0 on
      every sequence, whatever W and V; two such are equal;
    - [hyp_ffn_bias] (Transformer, a bias-free FFN): for a biased FFN g and a rational x
      with D(2x) <> 2 D(x), D(y) = g(y) - g(-y) computed over Q, no single head (W, v)
      has f([y]) - f([-y]) = D(y) at both y = x and y = 2x (a head's is 2 y^T v, linear).
      On length-1 queries a Transformer with V = I answers g(y)
      ([TransformerHeads.transformer_heads_length1]), so its antisymmetrised map is no
      single head's. *)

From Coq Require Import Reals QArith Qreals Lra Lia Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead CertPair Thm41 TransformerHeads.
Open Scope R_scope.

Definition qmat_agree (n m : nat) (A B : qmat) : bool :=
  all_lt n (fun i => all_lt m (fun j => Qeq_bool (A i j) (B i j))).

Lemma qmat_agree_spec : forall n m A B, qmat_agree n m A B = true ->
  forall i j, (i < n)%nat -> (j < m)%nat -> rmat A i j = rmat B i j.
Proof.
  intros n m A B H i j Hi Hj. apply qeq_spec, (all_lt_spec _ _ (all_lt_spec _ _ H i Hi) j Hj).
Qed.

Definition qvec_agree (n : nat) (x y : qvec) : bool := all_lt n (fun i => Qeq_bool (x i) (y i)).

(** ** v = 0. *)

Theorem hyp_zero_value : forall d (W1 W2 : qmat) (v1 v2 : qvec),
  all_lt d (fun i => Qeq_bool (v1 i) 0) = true -> all_lt d (fun i => Qeq_bool (v2 i) 0) = true ->
  forall N X, attention d N X (rmat W1) (rvec v1) = attention d N X (rmat W2) (rvec v2).
Proof.
  intros d W1 W2 v1 v2 H1 H2 N X.
  rewrite !attention_zero_v; [reflexivity| |]; intros i Hi; unfold rvec;
    [rewrite (qeq_spec _ _ (all_lt_spec _ _ H2 i Hi)) | rewrite (qeq_spec _ _ (all_lt_spec _ _ H1 i Hi))];
    unfold Q2R; simpl; lra.
Qed.

(** ** A positive scale of v. *)

Lemma attention_scale_v : forall d N X W v c,
  attention d N X W (vscale c v) = c * attention d N X W v.
Proof.
  intros. unfold attention, attention_affine. rewrite !Rplus_0_r, <- sum_scal_l.
  apply sum_ext. intros t Ht. unfold dot, vscale.
  rewrite (sum_ext d (fun i => X t i * (c * v i)) (fun i => c * (X t i * v i))) by (intros; ring).
  rewrite sum_scal_l. ring.
Qed.

Theorem hyp_positive_scale : forall d (W1 W2 : qmat) (v1 v2 : qvec) (c : Q),
  qlt 0 c = true -> qmat_agree d d W1 W2 = true ->
  all_lt d (fun i => Qeq_bool (v2 i) (c * v1 i)) = true ->
  forall N X,
    let f1 := attention d N X (rmat W1) (rvec v1) in
    let f2 := attention d N X (rmat W2) (rvec v2) in
    f2 = Q2R c * f1 /\ (0 < f2 <-> 0 < f1) /\ (f2 < 0 <-> f1 < 0) /\ (f2 = 0 <-> f1 = 0).
Proof.
  intros d W1 W2 v1 v2 c Hc HW Hv N X f1 f2.
  assert (Hc' : 0 < Q2R c) by (pose proof (qlt_spec _ _ Hc) as E; unfold Q2R in E at 1; simpl in E; lra).
  assert (E : f2 = Q2R c * f1).
  { unfold f1, f2. rewrite (attention_ext_W d N X (rmat W2) (rmat W1))
      by (intros; symmetry; apply qmat_agree_spec with (n := d) (m := d); assumption).
    rewrite (attention_ext_v d N X (rmat W1) (rvec v2) (vscale (Q2R c) (rvec v1))).
    - apply attention_scale_v.
    - intros i Hi. unfold rvec, vscale. rewrite (qeq_spec _ _ (all_lt_spec _ _ Hv i Hi)).
      apply Q2R_mult. }
  rewrite E. repeat split; intros; nra.
Qed.

(** ** Cancelling FFN neurons. *)

Lemma relu_scale : forall s z, 0 <= s -> relu (s * z) = s * relu z.
Proof.
  intros s z Hs. unfold relu, Rmax.
  destruct (Rle_dec 0 (s * z)), (Rle_dec 0 z); nra.
Qed.

(** Column k of A is s_k a, s_k >= 0, and sum_k w_k s_k = 0. *)
Definition one_ray (e m : nat) (A : qmat) (w a s : qvec) : bool :=
  all_lt e (fun j => all_lt m (fun k => Qeq_bool (A j k) (s k * a j))) &&
  all_lt m (fun k => qle 0 (s k)) && Qeq_bool (qsum m (fun k => w k * s k)%Q) 0.

Lemma ffn_one_ray_zero : forall e m (A : qmat) (w a s : qvec), one_ray e m A w a s = true ->
  forall x, ffn e m (rmat A) (rvec w) x = 0.
Proof.
  intros e m A w a s H x. unfold one_ray in H. apply andb_true_iff in H as [H Hsum].
  apply andb_true_iff in H as [HA Hs].
  apply qeq_spec in Hsum. rewrite Q2R_qsum in Hsum.
  unfold ffn. rewrite (sum_ext m _ (fun k => (Q2R (w k) * Q2R (s k)) * relu (sum e (fun j => Q2R (a j) * x j)))).
  - rewrite sum_scal_r, (sum_ext m _ (fun k => Q2R (w k * s k)%Q)) by (intros; rewrite Q2R_mult; reflexivity).
    rewrite Hsum. unfold Q2R at 1. simpl. ring.
  - intros k Hk. unfold rvec.
    assert (Hs0 : 0 <= Q2R (s k))
      by (pose proof (qle_spec _ _ (all_lt_spec _ _ Hs k Hk)) as E; unfold Q2R in E at 1; simpl in E; lra).
    rewrite Rmult_assoc, <- (relu_scale _ _ Hs0). f_equal. f_equal.
    rewrite <- sum_scal_l. apply sum_ext. intros j Hj.
    unfold rmat. rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HA j Hj) k Hk)).
    rewrite Q2R_mult. ring.
Qed.

Theorem hyp_cancelling_neurons : forall d e m (W1 V1 A1 W2 V2 A2 : qmat) (w1 w2 a1 s1 a2 s2 : qvec),
  one_ray e m A1 w1 a1 s1 = true -> one_ray e m A2 w2 a2 s2 = true ->
  forall N X, transformer d e m N X (rmat W1) (rmat V1) (rmat A1) (rvec w1) =
              transformer d e m N X (rmat W2) (rmat V2) (rmat A2) (rvec w2).
Proof.
  intros. unfold transformer. rewrite (ffn_one_ray_zero e m A1 w1 a1 s1 H), (ffn_one_ray_zero e m A2 w2 a2 s2 H0).
  reflexivity.
Qed.

(** ** An FFN bias: the antisymmetrised map is not linear. *)

Definition qrelu (z : Q) : Q := if Qle_bool 0 z then z else 0.

(** g(x) = w^T ReLU(A^T x + a) over Q (A is d x m). *)
Definition qffn (d m : nat) (A : qmat) (a w x : qvec) : Q :=
  qsum m (fun k => w k * qrelu (qsum d (fun j => A j k * x j) + a k))%Q.

Definition qneg (x : qvec) : qvec := fun i => (- x i)%Q.
Definition qtwice (x : qvec) : qvec := fun i => (2 * x i)%Q.

(** D(x) = g(x) - g(-x) over Q. *)
Definition qodd (d m : nat) (A : qmat) (a w x : qvec) : Q :=
  (qffn d m A a w x - qffn d m A a w (qneg x))%Q.

Lemma relu_q : forall z, relu (Q2R z) = Q2R (qrelu z).
Proof.
  intros z. unfold relu, qrelu, Rmax. destruct (Qle_bool 0 z) eqn:E.
  - pose proof (qle_spec _ _ E) as L. unfold Q2R in L at 1. simpl in L.
    destruct (Rle_dec 0 (Q2R z)); [reflexivity | lra].
  - assert (L : Q2R z < 0).
    { assert (Hz : (z < 0)%Q).
      { apply Qnot_le_lt. intros Hle. apply Qle_bool_iff in Hle. congruence. }
      apply Qlt_Rlt in Hz. unfold Q2R at 2 in Hz. simpl in Hz. lra. }
    destruct (Rle_dec 0 (Q2R z)); [lra|]. unfold Q2R. simpl. ring.
Qed.

Lemma ffn_biased_q : forall d m A a w x,
  ffn_biased d m (rmat A) (rvec a) (rvec w) 0 (rvec x) = Q2R (qffn d m A a w x).
Proof.
  intros. unfold ffn_biased, qffn. rewrite Q2R_qsum, Rplus_0_r. apply sum_ext. intros k _.
  rewrite Q2R_mult, <- relu_q, Q2R_plus, Q2R_qsum. unfold pre_activation, rvec, rmat.
  f_equal. f_equal. f_equal. apply sum_ext. intros. rewrite Q2R_mult. reflexivity.
Qed.

Lemma dot_qneg : forall d x v, dot d (rvec (qneg x)) v = - dot d (rvec x) v.
Proof.
  intros. unfold dot, rvec, qneg. rewrite <- sum_opp. apply sum_ext. intros.
  rewrite Q2R_opp. ring.
Qed.

Lemma dot_qtwice : forall d x v, dot d (rvec (qtwice x)) v = 2 * dot d (rvec x) v.
Proof.
  intros. unfold dot, rvec, qtwice. rewrite <- sum_scal_l. apply sum_ext. intros.
  rewrite Q2R_mult. replace (Q2R 2) with 2 by (unfold Q2R; simpl; field). ring.
Qed.

Theorem hyp_ffn_bias : forall d m (A : qmat) (a w x : qvec),
  Qeq_bool (qodd d m A a w (qtwice x)) (2 * qodd d m A a w x) = false ->
  forall W v, ~ (
    ffn_biased d m (rmat A) (rvec a) (rvec w) 0 (rvec x) -
    ffn_biased d m (rmat A) (rvec a) (rvec w) 0 (rvec (qneg x)) =
      attention d 1 (seq1 (rvec x)) W v - attention d 1 (seq1 (rvec (qneg x))) W v /\
    ffn_biased d m (rmat A) (rvec a) (rvec w) 0 (rvec (qtwice x)) -
    ffn_biased d m (rmat A) (rvec a) (rvec w) 0 (rvec (qneg (qtwice x))) =
      attention d 1 (seq1 (rvec (qtwice x))) W v -
      attention d 1 (seq1 (rvec (qneg (qtwice x)))) W v).
Proof.
  intros d m A a w x H W v [E1 E2].
  rewrite !ffn_biased_q, !attention_length1_bias_free, !dot_qneg in *.
  rewrite dot_qtwice in E2. rewrite <- !Q2R_minus in E1, E2.
  assert (E : Q2R (qodd d m A a w (qtwice x)) = Q2R (2 * qodd d m A a w x)%Q).
  { unfold qodd. rewrite E2, Q2R_mult, E1. replace (Q2R 2) with 2 by (unfold Q2R; simpl; field).
    ring. }
  apply eqR_Qeq, Qeq_bool_iff in E. rewrite E in H. discriminate.
Qed.
