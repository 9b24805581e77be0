(** * The models of [verified_attn.models], over Coq's real numbers, for every d and N.

    Vectors are functions [nat -> R] read on the coordinates [0 .. d-1]; matrices are
    functions [nat -> nat -> R]; a sequence X of N tokens is [tokens := nat -> vec], token
    [t] being row [X t] for [t = 0 .. N-1]. The query token x_N is [X (N - 1)]. Nothing
    here fixes d or N: every theorem quantifies over them. *)

From Coq Require Import Reals Lra Lia List.
Open Scope R_scope.

(** ** Finite sums: [sum n f = f 0 + ... + f (n - 1)]. *)

Fixpoint sum (n : nat) (f : nat -> R) : R :=
  match n with
  | O => 0
  | S k => sum k f + f k
  end.

Lemma sum_ext : forall n f g, (forall i, (i < n)%nat -> f i = g i) -> sum n f = sum n g.
Proof.
  induction n as [|n IH]; intros f g H; simpl; [reflexivity|].
  rewrite (IH f g) by (intros; apply H; lia). rewrite (H n) by lia. reflexivity.
Qed.

Lemma sum_plus : forall n f g, sum n (fun i => f i + g i) = sum n f + sum n g.
Proof. induction n as [|n IH]; intros; simpl; [lra|]. rewrite IH. lra. Qed.

Lemma sum_minus : forall n f g, sum n (fun i => f i - g i) = sum n f - sum n g.
Proof. induction n as [|n IH]; intros; simpl; [lra|]. rewrite IH. lra. Qed.

Lemma sum_scal_l : forall n a f, sum n (fun i => a * f i) = a * sum n f.
Proof. induction n as [|n IH]; intros; simpl; [lra|]. rewrite IH. lra. Qed.

Lemma sum_scal_r : forall n a f, sum n (fun i => f i * a) = sum n f * a.
Proof. induction n as [|n IH]; intros; simpl; [lra|]. rewrite IH. lra. Qed.

Lemma sum_opp : forall n f, sum n (fun i => - f i) = - sum n f.
Proof. induction n as [|n IH]; intros; simpl; [lra|]. rewrite IH. lra. Qed.

Lemma sum_zero : forall n f, (forall i, (i < n)%nat -> f i = 0) -> sum n f = 0.
Proof.
  intros n f H. rewrite (sum_ext n f (fun _ => 0)) by exact H.
  clear H. induction n as [|n IH]; simpl; [reflexivity|]. rewrite IH. lra.
Qed.

Lemma sum_swap : forall n m (f : nat -> nat -> R),
  sum n (fun i => sum m (fun j => f i j)) = sum m (fun j => sum n (fun i => f i j)).
Proof.
  induction n as [|n IH]; intros m f; simpl.
  - symmetry. apply sum_zero. intros. reflexivity.
  - rewrite IH. rewrite <- sum_plus. reflexivity.
Qed.

Lemma sum_one : forall f, sum 1 f = f O.
Proof. intros. simpl. lra. Qed.

Lemma sum_two : forall f, sum 2 f = f O + f 1%nat.
Proof. intros. simpl. lra. Qed.

(** A sum that picks out one term. *)
Lemma sum_single : forall n i f, (i < n)%nat ->
  (forall k, (k < n)%nat -> k <> i -> f k = 0) -> sum n f = f i.
Proof.
  induction n as [|n IH]; intros i f Hi H; [lia|]. simpl.
  destruct (Nat.eq_dec i n) as [->|Hne].
  - rewrite sum_zero by (intros k Hk; apply H; lia). lra.
  - rewrite (IH i f) by (try lia; intros; apply H; lia). rewrite (H n) by lia. lra.
Qed.

(** ** Vectors and matrices. *)

Definition vec := nat -> R.
Definition mat := nat -> nat -> R.
Definition tokens := nat -> vec.

Definition zero_vec : vec := fun _ => 0.
(** [unit_vec i] is e_i. *)
Definition unit_vec (i : nat) : vec := fun k => if Nat.eq_dec k i then 1 else 0.
Definition vadd (x y : vec) : vec := fun i => x i + y i.
Definition vscale (a : R) (x : vec) : vec := fun i => a * x i.
Definition vopp (x : vec) : vec := fun i => - x i.
(** [dot d x y] is x^T y over the first d coordinates. *)
Definition dot (d : nat) (x y : vec) : R := sum d (fun i => x i * y i).
(** [mat_vec d W x] is W x for a d x d (or e x d) matrix. *)
Definition mat_vec (d : nat) (W : mat) (x : vec) : vec := fun i => sum d (fun k => W i k * x k).
(** [mat_mul n A B] is A B, the inner dimension being n. *)
Definition mat_mul (n : nat) (A B : mat) : mat := fun i j => sum n (fun k => A i k * B k j).
Definition transpose (A : mat) : mat := fun i j => A j i.
Definition identity : mat := fun i j => if Nat.eq_dec i j then 1 else 0.

Lemma dot_unit_l : forall d i x, (i < d)%nat -> dot d (unit_vec i) x = x i.
Proof.
  intros d i x Hi. unfold dot. rewrite (sum_single d i); [ | exact Hi | intros k _ Hk; unfold unit_vec; destruct (Nat.eq_dec k i); [lia|lra] ].
  unfold unit_vec. destruct (Nat.eq_dec i i); [lra|congruence].
Qed.

Lemma mat_vec_unit : forall d W j i, (j < d)%nat -> mat_vec d W (unit_vec j) i = W i j.
Proof.
  intros d W j i Hj. unfold mat_vec. rewrite (sum_single d j); [ | exact Hj | intros k _ Hk; unfold unit_vec; destruct (Nat.eq_dec k j); [lia|lra] ].
  unfold unit_vec. destruct (Nat.eq_dec j j); [lra|congruence].
Qed.

Lemma sum_identity_l : forall n i f, (i < n)%nat -> sum n (fun k => identity i k * f k) = f i.
Proof.
  intros n i f Hi. rewrite (sum_single n i); [ | exact Hi | intros k _ Hk; unfold identity; destruct (Nat.eq_dec i k); [lia|lra] ].
  unfold identity. destruct (Nat.eq_dec i i); [lra|congruence].
Qed.

Lemma sum_identity_r : forall n j f, (j < n)%nat -> sum n (fun k => f k * identity k j) = f j.
Proof.
  intros n j f Hj. rewrite (sum_single n j); [ | exact Hj | intros k _ Hk; unfold identity; destruct (Nat.eq_dec k j); [lia|lra] ].
  unfold identity. destruct (Nat.eq_dec j j); [lra|congruence].
Qed.

Lemma dot_ext : forall d x x' y y', (forall i, (i < d)%nat -> x i = x' i) ->
  (forall i, (i < d)%nat -> y i = y' i) -> dot d x y = dot d x' y'.
Proof. intros. unfold dot. apply sum_ext. intros i Hi. rewrite H, H0 by exact Hi. reflexivity. Qed.

Lemma dot_vadd_l : forall d x y z, dot d (vadd x y) z = dot d x z + dot d y z.
Proof. intros. unfold dot, vadd. rewrite <- sum_plus. apply sum_ext. intros. lra. Qed.

Lemma dot_vadd_r : forall d x y z, dot d x (vadd y z) = dot d x y + dot d x z.
Proof. intros. unfold dot, vadd. rewrite <- sum_plus. apply sum_ext. intros. lra. Qed.

Lemma dot_vscale_l : forall d a x y, dot d (vscale a x) y = a * dot d x y.
Proof. intros. unfold dot, vscale. rewrite <- sum_scal_l. apply sum_ext. intros. lra. Qed.

Lemma dot_vopp_l : forall d x y, dot d (vopp x) y = - dot d x y.
Proof. intros. unfold dot, vopp. rewrite <- sum_opp. apply sum_ext. intros. lra. Qed.

Lemma dot_vopp_r : forall d x y, dot d x (vopp y) = - dot d x y.
Proof. intros. unfold dot, vopp. rewrite <- sum_opp. apply sum_ext. intros. lra. Qed.

Lemma dot_zero_r : forall d x, dot d x zero_vec = 0.
Proof. intros. unfold dot, zero_vec. apply sum_zero. intros. lra. Qed.

Lemma dot_zero_l : forall d x, dot d zero_vec x = 0.
Proof. intros. unfold dot, zero_vec. apply sum_zero. intros. lra. Qed.

Lemma mat_mul_assoc : forall n m A B C i j,
  mat_mul n (mat_mul m A B) C i j = mat_mul m A (mat_mul n B C) i j.
Proof.
  intros. unfold mat_mul.
  rewrite (sum_ext n _ (fun k => sum m (fun l => A i l * B l k * C k j)))
    by (intros; rewrite <- sum_scal_r; reflexivity).
  rewrite sum_swap. apply sum_ext. intros l _.
  rewrite <- sum_scal_l. apply sum_ext. intros. lra.
Qed.

(** ** The model, as [verified_attn.models.attention_output] defines it. *)

(** The query token x_N: the last of the N tokens. *)
Definition query_token (N : nat) (X : tokens) : vec := X (pred N).

(** Affine scores s_t = x_t^T (W x_N + c); the bias-free scores have c = 0. *)
Definition scores_affine (d N : nat) (X : tokens) (W : mat) (c : vec) : nat -> R :=
  fun t => dot d (X t) (vadd (mat_vec d W (query_token N X)) c).
Definition scores (d N : nat) (X : tokens) (W : mat) : nat -> R :=
  scores_affine d N X W zero_vec.

(** softmax over all N positions (the query token included). *)
Definition softmax (N : nat) (s : nat -> R) : nat -> R :=
  fun t => exp (s t) / sum N (fun u => exp (s u)).

(** f(X) = alpha^T X v + beta, alpha = softmax(s). *)
Definition attention_affine (d N : nat) (X : tokens) (W : mat) (c v : vec) (beta : R) : R :=
  sum N (fun t => softmax N (scores_affine d N X W c) t * dot d (X t) v) + beta.

(** The bias-free single head: scores x_t^T W x_N, output alpha^T X v. *)
Definition attention (d N : nat) (X : tokens) (W : mat) (v : vec) : R :=
  attention_affine d N X W zero_vec v 0.

(** [attention_output] computes sum_t e^{s_t} x_t^T v / sum_t e^{s_t} + beta: the same. *)
Lemma attention_affine_ratio : forall d N X W c v beta,
  attention_affine d N X W c v beta =
  sum N (fun t => exp (scores_affine d N X W c t) * dot d (X t) v)
    / sum N (fun t => exp (scores_affine d N X W c t)) + beta.
Proof.
  intros. unfold attention_affine, softmax. f_equal. unfold Rdiv.
  rewrite <- sum_scal_r. apply sum_ext. intros. lra.
Qed.

(** ** Multi-head attention: the sum of the heads (plus one beta in the affine form). *)

Definition head := (mat * vec)%type.

Fixpoint multi_head (d N : nat) (X : tokens) (hs : list head) : R :=
  match hs with
  | nil => 0
  | (W, v) :: rest => attention d N X W v + multi_head d N X rest
  end.

(** Affine heads (W_h, c_h, v_h) and one output bias beta. *)
Definition affine_head := (mat * vec * vec)%type.

Fixpoint affine_heads_sum (d N : nat) (X : tokens) (hs : list affine_head) : R :=
  match hs with
  | nil => 0
  | (W, c, v) :: rest => attention_affine d N X W c v 0 + affine_heads_sum d N X rest
  end.

Definition multi_head_affine (d N : nat) (X : tokens) (hs : list affine_head) (beta : R) : R :=
  affine_heads_sum d N X hs + beta.

(** ** The one-layer Transformer with a bias-free ReLU FFN. *)

Definition relu (z : R) : R := Rmax 0 z.

(** g(x) = w_o^T ReLU(A^T x): A is e x m (input dimension e, width m). *)
Definition ffn (e m : nat) (A : mat) (w_o : vec) (x : vec) : R :=
  sum m (fun k => w_o k * relu (sum e (fun j => A j k * x j))).

(** h(X) = V^T X^T alpha(X): the attention readout at the last token (V is d x e). *)
Definition attn_readout (d N : nat) (X : tokens) (W V : mat) : vec :=
  fun j => sum N (fun t => softmax N (scores d N X W) t * sum d (fun i => X t i * V i j)).

(** T(X) = w_o^T ReLU(A^T V^T X^T softmax(X W x_N)). *)
Definition transformer (d e m N : nat) (X : tokens) (W V A : mat) (w_o : vec) : R :=
  ffn e m A w_o (attn_readout d N X W V).

(** v_eff = V A w_o. *)
Definition v_eff (e m : nat) (V A : mat) (w_o : vec) : vec :=
  fun i => sum e (fun j => V i j * sum m (fun k => A j k * w_o k)).

Definition neg_tokens (X : tokens) : tokens := fun t => vopp (X t).

(** ** Sigmoid and logit. *)

Definition sigmoid (x : R) : R := / (1 + exp (- x)).
Definition logit (y : R) : R := ln (y / (1 - y)).

(** ** Queries: a length-1 sequence [x] and a length-2 sequence [a; b]. *)

Definition seq1 (x : vec) : tokens := fun _ => x.
Definition seq2 (a b : vec) : tokens := fun t => match t with O => a | _ => b end.

(** ** The Thm 4.1 learner's design (verified_attn.exact_recovery.learner._default_design).

    p is an index of a largest |v_p|; column k is u_k = e_k + e_p when k <> p and
    4 |v_k| < |v_p|, else u_k = e_k. So U = I + e_p s^T with s_k in {0, 1}, s_p = 0. *)

Definition design_shift (v : vec) (p : nat) : vec :=
  fun k => if Nat.eq_dec k p then 0
           else if Rlt_dec (4 * Rabs (v k)) (Rabs (v p)) then 1 else 0.

Definition design (v : vec) (p : nat) : mat :=
  fun i k => identity i k + unit_vec p i * design_shift v p k.

(** The explicit inverse I - e_p s^T. *)
Definition design_inverse (v : vec) (p : nat) : mat :=
  fun i k => identity i k - unit_vec p i * design_shift v p k.

(** u_k, column k of the design. *)
Definition design_col (v : vec) (p : nat) (k : nat) : vec := fun i => design v p i k.

(** The first index of a largest |v_i| among 0 .. n-1 ([np.argmax] of the magnitudes). *)
Fixpoint argmax_abs (v : vec) (n : nat) : nat :=
  match n with
  | O => O
  | S k => let p := argmax_abs v k in
           match k with
           | O => O
           | _ => if Rlt_dec (Rabs (v p)) (Rabs (v k)) then k else p
           end
  end.
