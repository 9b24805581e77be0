(** * Proposition 7.1: multi-head attention is not identifiable.

    Each family of [verified_attn.multi_head.counterexamples] gives two parameterisations
    with the same output on every sequence X of every length N, for every d. *)

From Coq Require Import Reals Lra Lia List Permutation.
From VerifiedAttn Require Import Defs.
Open Scope R_scope.

(** A head's output is linear in v, and reads v only on the first d coordinates. *)
Lemma attention_add_v : forall d N X W v1 v2,
  attention d N X W v1 + attention d N X W v2 = attention d N X W (vadd v1 v2).
Proof.
  intros. unfold attention, attention_affine. rewrite !Rplus_0_r, <- sum_plus.
  apply sum_ext. intros. rewrite dot_vadd_r. ring.
Qed.

Lemma attention_ext_v : forall d N X W v v', (forall i, (i < d)%nat -> v i = v' i) ->
  attention d N X W v = attention d N X W v'.
Proof.
  intros. unfold attention, attention_affine. f_equal. apply sum_ext. intros.
  rewrite (dot_ext d (X i) (X i) v v'); [reflexivity | reflexivity | assumption].
Qed.

Lemma attention_zero_v : forall d N X W v, (forall i, (i < d)%nat -> v i = 0) ->
  attention d N X W v = 0.
Proof.
  intros. rewrite (attention_ext_v d N X W v zero_vec) by assumption.
  unfold attention, attention_affine. rewrite Rplus_0_r. apply sum_zero. intros.
  rewrite dot_zero_r. ring.
Qed.

Lemma attention_opp_v : forall d N X W v,
  attention d N X W (vopp v) = - attention d N X W v.
Proof.
  intros. unfold attention, attention_affine. rewrite !Rplus_0_r, <- sum_opp.
  apply sum_ext. intros. rewrite dot_vopp_r. ring.
Qed.

(** (a) Permuting the heads (any permutation of the list) leaves the map unchanged. *)
Theorem prop71_permutation : forall d (hs hs' : list head), Permutation hs hs' ->
  forall N X, multi_head d N X hs = multi_head d N X hs'.
Proof.
  intros d hs hs' P N X. induction P as [|[W v] l l' P IH|[W v] [W' v'] l|l l' l'' P1 IH1 P2 IH2].
  - reflexivity.
  - simpl. rewrite IH. reflexivity.
  - simpl. ring.
  - rewrite IH1, IH2. reflexivity.
Qed.

(** (b) Two heads sharing one W may split their summed v in any way. *)
Theorem prop71_shared_split : forall d (W : mat) (v1 v2 v1' v2' : vec) (rest : list head),
  (forall i, (i < d)%nat -> v1 i + v2 i = v1' i + v2' i) ->
  forall N X, multi_head d N X ((W, v1) :: (W, v2) :: rest) =
              multi_head d N X ((W, v1') :: (W, v2') :: rest).
Proof.
  intros d W v1 v2 v1' v2' rest H N X. simpl.
  rewrite <- !Rplus_assoc, !attention_add_v.
  rewrite (attention_ext_v d N X W (vadd v1 v2) (vadd v1' v2')) by (unfold vadd; exact H).
  reflexivity.
Qed.

(** (c) A head with v = 0 may have any W. *)
Theorem prop71_dead_head : forall d (W W' : mat) (v : vec) (rest : list head),
  (forall i, (i < d)%nat -> v i = 0) ->
  forall N X, multi_head d N X ((W, v) :: rest) = multi_head d N X ((W', v) :: rest).
Proof.
  intros. simpl. rewrite !(attention_zero_v d N X _ v) by assumption. reflexivity.
Qed.

(** (d) Two equal-W heads with values u and -u vanish, whatever W and u are. *)
Theorem prop71_cancelling : forall d (W1 W2 : mat) (u1 u2 : vec) (rest : list head),
  forall N X, multi_head d N X ((W1, u1) :: (W1, vopp u1) :: rest) =
              multi_head d N X ((W2, u2) :: (W2, vopp u2) :: rest).
Proof. intros. simpl. rewrite !attention_opp_v. ring. Qed.

(** The same families for affine heads (W_h, c_h, v_h) with one output bias beta. *)

Lemma attention_affine_add_v : forall d N X W c v1 v2,
  attention_affine d N X W c v1 0 + attention_affine d N X W c v2 0 =
  attention_affine d N X W c (vadd v1 v2) 0.
Proof.
  intros. unfold attention_affine. rewrite !Rplus_0_r, <- sum_plus.
  apply sum_ext. intros. rewrite dot_vadd_r. ring.
Qed.

Lemma attention_affine_ext_v : forall d N X W c v v', (forall i, (i < d)%nat -> v i = v' i) ->
  attention_affine d N X W c v 0 = attention_affine d N X W c v' 0.
Proof.
  intros. unfold attention_affine. f_equal. apply sum_ext. intros.
  rewrite (dot_ext d (X i) (X i) v v'); [reflexivity | reflexivity | assumption].
Qed.

Lemma attention_affine_zero_v : forall d N X W c v, (forall i, (i < d)%nat -> v i = 0) ->
  attention_affine d N X W c v 0 = 0.
Proof.
  intros. rewrite (attention_affine_ext_v d N X W c v zero_vec) by assumption.
  unfold attention_affine. rewrite Rplus_0_r. apply sum_zero. intros.
  rewrite dot_zero_r. ring.
Qed.

Lemma attention_affine_opp_v : forall d N X W c v,
  attention_affine d N X W c (vopp v) 0 = - attention_affine d N X W c v 0.
Proof.
  intros. unfold attention_affine. rewrite !Rplus_0_r, <- sum_opp.
  apply sum_ext. intros. rewrite dot_vopp_r. ring.
Qed.

Theorem prop71_affine_permutation : forall d (hs hs' : list affine_head) beta,
  Permutation hs hs' ->
  forall N X, multi_head_affine d N X hs beta = multi_head_affine d N X hs' beta.
Proof.
  intros d hs hs' beta P N X. unfold multi_head_affine. f_equal.
  induction P as [|[[W c] v] l l' P IH|[[W c] v] [[W' c'] v'] l|l l' l'' P1 IH1 P2 IH2].
  - reflexivity.
  - simpl. rewrite IH. reflexivity.
  - simpl. ring.
  - rewrite IH1, IH2. reflexivity.
Qed.

Theorem prop71_affine_shared_split : forall d (W : mat) (c v1 v2 v1' v2' : vec) rest beta,
  (forall i, (i < d)%nat -> v1 i + v2 i = v1' i + v2' i) ->
  forall N X, multi_head_affine d N X ((W, c, v1) :: (W, c, v2) :: rest) beta =
              multi_head_affine d N X ((W, c, v1') :: (W, c, v2') :: rest) beta.
Proof.
  intros. unfold multi_head_affine. simpl.
  rewrite <- !Rplus_assoc, !attention_affine_add_v.
  rewrite (attention_affine_ext_v d N X W c (vadd v1 v2) (vadd v1' v2')) by (unfold vadd; assumption).
  reflexivity.
Qed.

Theorem prop71_affine_dead_head : forall d (W W' : mat) (c c' v : vec) rest beta,
  (forall i, (i < d)%nat -> v i = 0) ->
  forall N X, multi_head_affine d N X ((W, c, v) :: rest) beta =
              multi_head_affine d N X ((W', c', v) :: rest) beta.
Proof.
  intros. unfold multi_head_affine. simpl.
  rewrite !(attention_affine_zero_v d N X _ _ v) by assumption. reflexivity.
Qed.

Theorem prop71_affine_cancelling : forall d (W1 W2 : mat) (c1 c2 u1 u2 : vec) rest beta,
  forall N X,
  multi_head_affine d N X ((W1, c1, u1) :: (W1, c1, vopp u1) :: rest) beta =
  multi_head_affine d N X ((W2, c2, u2) :: (W2, c2, vopp u2) :: rest) beta.
Proof. intros. unfold multi_head_affine. simpl. rewrite !attention_affine_opp_v. ring. Qed.
