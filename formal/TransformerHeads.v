(** * The one-layer Transformer with H heads and a biased ReLU FFN.

    T(X) = w_o^T ReLU(A^T h(X) + a) + b with h(X) = sum_h V_h^T X^T alpha_h(X) and
    alpha_h = softmax(X (W_h x_N + c_h)), as [verified_attn.ffn_heads.MultiHeadTransformer]
    computes it. Head h is given by [Ws h] (d x d), [cs h] (score bias) and [Vs h] (d x e),
    for h = 0 .. H-1; nothing fixes d, e, m, H or N.

    - [transformer_heads_reduction]: where the FFN's activation pattern is a fixed s (neuron
      k active, pre-activation >= 0, iff s k), T is a sum of H attention heads with the
      effective values V_h A_s w_o (= V_h times the FFN's gradient on that piece) plus the
      constant sum_{k in s} w_k a_k + b.
    - [transformer_heads_length1]: a length-1 query [x] returns g(sum_h V_h^T x), g the
      biased FFN.
    - [transformer_heads_single]: one head, c = 0, a = 0, b = 0 is [transformer] of Defs.v. *)

From Coq Require Import Reals Lra Lia.
From VerifiedAttn Require Import Defs Softmax Transformer.
Open Scope R_scope.

(** V_h^T X^T alpha_h(X): head h's readout, in R^e. *)
Definition head_readout (d N : nat) (X : tokens) (W : mat) (c : vec) (V : mat) : vec :=
  fun j => sum N (fun t => softmax N (scores_affine d N X W c) t * sum d (fun i => X t i * V i j)).

(** h(X) = sum_h V_h^T X^T alpha_h(X). *)
Definition heads_readout (d H N : nat) (X : tokens) (Ws : nat -> mat) (cs : nat -> vec)
  (Vs : nat -> mat) : vec :=
  fun j => sum H (fun h => head_readout d N X (Ws h) (cs h) (Vs h) j).

(** The pre-activation z_k = (A^T x + a)_k. *)
Definition pre_activation (e : nat) (A : mat) (a : vec) (x : vec) (k : nat) : R :=
  sum e (fun j => A j k * x j) + a k.

(** g(x) = w_o^T ReLU(A^T x + a) + b. *)
Definition ffn_biased (e m : nat) (A : mat) (a w_o : vec) (b : R) (x : vec) : R :=
  sum m (fun k => w_o k * relu (pre_activation e A a x k)) + b.

Definition transformer_heads (d e m H N : nat) (X : tokens) (Ws : nat -> mat)
  (cs : nat -> vec) (Vs : nat -> mat) (A : mat) (a w_o : vec) (b : R) : R :=
  ffn_biased e m A a w_o b (heads_readout d H N X Ws cs Vs).

(** x lies in the linear piece of pattern s: neuron k has z_k >= 0 if s k, else z_k <= 0. *)
Definition in_piece (e m : nat) (A : mat) (a : vec) (s : nat -> bool) (x : vec) : Prop :=
  forall k, (k < m)%nat ->
    if s k then 0 <= pre_activation e A a x k else pre_activation e A a x k <= 0.

(** w_o restricted to the active neurons of s. *)
Definition mask (s : nat -> bool) (w : vec) : vec := fun k => if s k then w k else 0.

(** The constant of the piece: sum_{k in s} w_k a_k + b. *)
Definition piece_const (m : nat) (s : nat -> bool) (a w_o : vec) (b : R) : R :=
  sum m (fun k => mask s w_o k * a k) + b.

(** On the piece, g is affine: g(x) = (A_s w_o)^T x + const. *)
Lemma ffn_biased_piece : forall e m A a w_o b s x, in_piece e m A a s x ->
  ffn_biased e m A a w_o b x =
  sum e (fun j => x j * sum m (fun k => A j k * mask s w_o k)) + piece_const m s a w_o b.
Proof.
  intros e m A a w_o b s x Hp. unfold ffn_biased, piece_const.
  rewrite (sum_ext m _ (fun k => mask s w_o k * sum e (fun j => A j k * x j) + mask s w_o k * a k)).
  2: { intros k Hk. specialize (Hp k Hk). unfold mask, relu, pre_activation in *.
       set (z := sum e (fun j => A j k * x j)) in *.
       destruct (s k); unfold Rmax; destruct (Rle_dec 0 (z + a k)); try ring.
       - lra.
       - replace (z + a k) with 0 by lra. ring. }
  rewrite sum_plus, Rplus_assoc. f_equal.
  rewrite (sum_ext m _ (fun k => sum e (fun j => x j * (A j k * mask s w_o k))))
    by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
  rewrite sum_swap. apply sum_ext. intros. apply sum_scal_l.
Qed.

(** One head's readout against a vector u of R^e is the head with value V u. *)
Lemma head_readout_dot : forall d e N X W c V (u : vec),
  sum e (fun j => head_readout d N X W c V j * u j) =
  attention_affine d N X W c (fun i => sum e (fun j => V i j * u j)) 0.
Proof.
  intros. unfold head_readout, attention_affine. rewrite Rplus_0_r.
  rewrite (sum_ext e _ (fun j => sum N (fun t => softmax N (scores_affine d N X W c) t *
             sum d (fun i => X t i * (V i j * u j)))))
    by (intros; rewrite <- sum_scal_r; apply sum_ext; intros; rewrite Rmult_assoc, <- sum_scal_r;
        f_equal; apply sum_ext; intros; ring).
  rewrite sum_swap. apply sum_ext. intros t _.
  rewrite sum_scal_l. unfold dot. f_equal. rewrite sum_swap.
  apply sum_ext. intros i _. rewrite <- sum_scal_l. reflexivity.
Qed.

(** The reduction: inside one linear piece s of the FFN, T is the sum of H attention heads
    with the effective values v_h = V_h A_s w_o (V_h times the gradient of g on the piece)
    plus the constant sum_{k in s} w_k a_k + b. *)
Theorem transformer_heads_reduction : forall d e m H N X Ws cs Vs A a w_o b s,
  in_piece e m A a s (heads_readout d H N X Ws cs Vs) ->
  transformer_heads d e m H N X Ws cs Vs A a w_o b =
  sum H (fun h => attention_affine d N X (Ws h) (cs h) (v_eff e m (Vs h) A (mask s w_o)) 0)
  + piece_const m s a w_o b.
Proof.
  intros d e m H N X Ws cs Vs A a w_o b s Hp. unfold transformer_heads.
  rewrite (ffn_biased_piece e m A a w_o b s _ Hp). f_equal. unfold heads_readout.
  rewrite (sum_ext e _ (fun j => sum H (fun h => head_readout d N X (Ws h) (cs h) (Vs h) j *
             sum m (fun k => A j k * mask s w_o k))))
    by (intros; rewrite sum_scal_r; reflexivity).
  rewrite sum_swap. apply sum_ext. intros h _.
  rewrite head_readout_dot. reflexivity.
Qed.

(** The same over a set S of sequences on which the pattern is s. *)
Corollary transformer_heads_piece : forall d e m H N (S : tokens -> Prop) Ws cs Vs A a w_o b s,
  (forall X, S X -> in_piece e m A a s (heads_readout d H N X Ws cs Vs)) ->
  forall X, S X ->
  transformer_heads d e m H N X Ws cs Vs A a w_o b =
  sum H (fun h => attention_affine d N X (Ws h) (cs h) (v_eff e m (Vs h) A (mask s w_o)) 0)
  + piece_const m s a w_o b.
Proof. intros. apply transformer_heads_reduction. auto. Qed.

(** Length 1: every head's softmax is 1, so T([x]) = g(sum_h V_h^T x). *)
Theorem transformer_heads_length1 : forall d e m H x Ws cs Vs A a w_o b,
  transformer_heads d e m H 1 (seq1 x) Ws cs Vs A a w_o b =
  ffn_biased e m A a w_o b (fun j => sum H (fun h => sum d (fun i => x i * Vs h i j))).
Proof.
  intros. unfold transformer_heads, ffn_biased. f_equal. apply sum_ext. intros k _.
  f_equal. f_equal. unfold pre_activation. f_equal. apply sum_ext. intros j _. f_equal.
  unfold heads_readout. apply sum_ext. intros h _.
  unfold head_readout. rewrite sum_one. unfold softmax. rewrite sum_one. unfold seq1.
  pose proof (exp_pos (scores_affine d 1 (fun _ => x) (Ws h) (cs h) O)). field. lra.
Qed.

(** One head with c = 0 and an FFN without biases is the model of Defs.v. *)
Theorem transformer_heads_single : forall d e m N X W V A w_o,
  transformer_heads d e m 1 N X (fun _ => W) (fun _ => zero_vec) (fun _ => V) A zero_vec w_o 0 =
  transformer d e m N X W V A w_o.
Proof.
  intros. unfold transformer_heads, ffn_biased, transformer, ffn. rewrite Rplus_0_r.
  apply sum_ext. intros k _. f_equal. f_equal. unfold pre_activation, zero_vec.
  rewrite Rplus_0_r. apply sum_ext. intros j _. f_equal.
  unfold heads_readout, head_readout, attn_readout. rewrite sum_one. reflexivity.
Qed.
