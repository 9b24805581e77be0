(** * The multi-head Transformer's canonical-form counterexamples, for every size.

    Four pairs of [verified_attn.hypotheses] (theorem "transformer") show why a multi-head
    Transformer T(X) = w_o^T ReLU(A^T h(X) + a) + b ([TransformerHeads.transformer_heads])
    is learned only in canonical form. Each is a statement about every sequence X of every
    length N, proved here for every d, e, m and H from finite checks over Q (run by
    computation in an exported file):

    - [tf_dead_neuron]: a last neuron m with zero input weights and bias a_m <= 0 is never
      active: with it (any output weight) or without it, the same map;
    - [tf_always_on_neuron]: a last neuron m with zero input weights and bias a_m >= 0 is
      always active and adds w_m a_m: with it, or with w_m a_m added to b, the same map;
    - [tf_killed_head]: a head p whose values the FFN's first layer annihilates
      (V_p A = 0) adds nothing to any pre-activation: its W_p and c_p are free;
    - [tf_colliding_heads]: a last head H with the (W, c) of head p shares its softmax:
      the H + 1 heads give the map of the H heads where head p has V_p + V_H.

    The models are rational tables [qtf]; what the two models of a pair share is checked
    entry by entry on the coordinates the model reads (below d, e, m and H). *)

From Coq Require Import Reals QArith Qreals Lra Lia Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead CertHyp TransformerHeads.
Open Scope R_scope.

(** ** The rational model. *)

(** Heads h = 0 .. H-1 (W_h d x d, c_h, V_h d x e), then A (e x m), a, w_o and b. *)
Record qtf := { tW : nat -> qmat; tc : nat -> qvec; tV : nat -> qmat;
                tA : qmat; ta : qvec; tw : qvec; tb : Q }.

Definition tf (d e m H N : nat) (X : tokens) (T : qtf) : R :=
  transformer_heads d e m H N X (fun h => rmat (tW T h)) (fun h => rvec (tc T h))
    (fun h => rmat (tV T h)) (rmat (tA T)) (rvec (ta T)) (rvec (tw T)) (Q2R (tb T)).

(** Head h of F and head h' of G have the same W, c and V. *)
Definition head_same (d e : nat) (F G : qtf) (h h' : nat) : bool :=
  qmat_agree d d (tW F h) (tW G h') && qvec_agree d (tc F h) (tc G h') &&
  qmat_agree d e (tV F h) (tV G h').

(** The FFNs' first m neurons and the output biases agree. *)
Definition ffn_same (e m : nat) (F G : qtf) : bool :=
  qmat_agree e m (tA F) (tA G) && qvec_agree m (ta F) (ta G) && qvec_agree m (tw F) (tw G).

(** The two models' sizes and tables agree entry by entry (what an exported pair states
    to be false: their parameters differ). *)
Definition tf_agree (d e m m' H H' : nat) (F G : qtf) : bool :=
  Nat.eqb m m' && Nat.eqb H H' && all_lt H (fun h => head_same d e F G h h) &&
  ffn_same e m F G && Qeq_bool (tb F) (tb G).

Lemma qvec_agree_spec : forall n x y, qvec_agree n x y = true ->
  forall i, (i < n)%nat -> rvec x i = rvec y i.
Proof. intros n x y H i Hi. apply qeq_spec, (all_lt_spec _ _ H i Hi). Qed.

(** ** Extensionality: a model reads its tables only below d, e, m and H. *)

Lemma head_readout_ext : forall d e N X W W' c c' V V',
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j) ->
  (forall i, (i < d)%nat -> c i = c' i) ->
  (forall i j, (i < d)%nat -> (j < e)%nat -> V i j = V' i j) ->
  forall j, (j < e)%nat -> head_readout d N X W c V j = head_readout d N X W' c' V' j.
Proof.
  intros d e N X W W' c c' V V' HW Hc HV j Hj. unfold head_readout, softmax.
  assert (Sc : forall t, scores_affine d N X W c t = scores_affine d N X W' c' t).
  { intros t. unfold scores_affine. apply dot_ext; [reflexivity|]. intros i Hi.
    unfold vadd, mat_vec. rewrite Hc by exact Hi. f_equal. apply sum_ext. intros k Hk.
    rewrite HW by assumption. reflexivity. }
  rewrite (sum_ext N (fun u => exp (scores_affine d N X W c u))
             (fun u => exp (scores_affine d N X W' c' u))) by (intros; rewrite Sc; reflexivity).
  apply sum_ext. intros t _. rewrite Sc. f_equal. apply sum_ext. intros i Hi.
  rewrite HV by assumption. reflexivity.
Qed.

Lemma head_same_readout : forall d e F G h h' N X, head_same d e F G h h' = true ->
  forall j, (j < e)%nat ->
  head_readout d N X (rmat (tW F h)) (rvec (tc F h)) (rmat (tV F h)) j =
  head_readout d N X (rmat (tW G h')) (rvec (tc G h')) (rmat (tV G h')) j.
Proof.
  intros d e F G h h' N X H. unfold head_same in H.
  apply andb_true_iff in H as [H HV]. apply andb_true_iff in H as [HW Hc].
  apply head_readout_ext.
  - intros. apply (qmat_agree_spec d d); assumption.
  - intros. apply (qvec_agree_spec d); assumption.
  - intros. apply (qmat_agree_spec d e); assumption.
Qed.

(** Two models whose pre-activations agree at every neuron, with the same output weights
    and b, are one map. *)
Lemma tf_pre_ext : forall d e m H H' N X F G,
  (forall k, (k < m)%nat ->
     pre_activation e (rmat (tA F)) (rvec (ta F))
       (heads_readout d H N X (fun h => rmat (tW F h)) (fun h => rvec (tc F h))
          (fun h => rmat (tV F h))) k =
     pre_activation e (rmat (tA G)) (rvec (ta G))
       (heads_readout d H' N X (fun h => rmat (tW G h)) (fun h => rvec (tc G h))
          (fun h => rmat (tV G h))) k) ->
  qvec_agree m (tw F) (tw G) = true -> Qeq_bool (tb F) (tb G) = true ->
  tf d e m H N X F = tf d e m H' N X G.
Proof.
  intros d e m H H' N X F G Hp Hw Hb. unfold tf, transformer_heads, ffn_biased.
  rewrite (qeq_spec _ _ Hb). f_equal. apply sum_ext. intros k Hk.
  rewrite (qvec_agree_spec m _ _ Hw k Hk), Hp by exact Hk. reflexivity.
Qed.

(** Readouts that agree on the e coordinates, through one FFN, give one map. *)
Lemma tf_readout_ext : forall d e m H H' N X F G,
  (forall j, (j < e)%nat ->
     heads_readout d H N X (fun h => rmat (tW F h)) (fun h => rvec (tc F h))
       (fun h => rmat (tV F h)) j =
     heads_readout d H' N X (fun h => rmat (tW G h)) (fun h => rvec (tc G h))
       (fun h => rmat (tV G h)) j) ->
  ffn_same e m F G = true -> Qeq_bool (tb F) (tb G) = true ->
  tf d e m H N X F = tf d e m H' N X G.
Proof.
  intros d e m H H' N X F G Hr Hf Hb. unfold ffn_same in Hf.
  apply andb_true_iff in Hf as [Hf Hw]. apply andb_true_iff in Hf as [HA Ha].
  apply tf_pre_ext; [|exact Hw|exact Hb]. intros k Hk. unfold pre_activation.
  rewrite (qvec_agree_spec m _ _ Ha k Hk). f_equal. apply sum_ext. intros j Hj.
  rewrite Hr by exact Hj. f_equal. apply (qmat_agree_spec e m); assumption.
Qed.

Lemma heads_same_readout : forall d e H N X F G,
  all_lt H (fun h => head_same d e F G h h) = true ->
  forall j, (j < e)%nat ->
  heads_readout d H N X (fun h => rmat (tW F h)) (fun h => rvec (tc F h))
    (fun h => rmat (tV F h)) j =
  heads_readout d H N X (fun h => rmat (tW G h)) (fun h => rvec (tc G h))
    (fun h => rmat (tV G h)) j.
Proof.
  intros d e H N X F G Hh j Hj. unfold heads_readout. apply sum_ext. intros h Hh'.
  apply (head_same_readout d e); [exact (all_lt_spec _ _ Hh h Hh') | exact Hj].
Qed.

(** ** One more neuron. *)

Lemma tf_last_neuron : forall d e m H N X T,
  tf d e (S m) H N X T = tf d e m H N X T +
  Q2R (tw T m) * relu (pre_activation e (rmat (tA T)) (rvec (ta T))
     (heads_readout d H N X (fun h => rmat (tW T h)) (fun h => rvec (tc T h))
        (fun h => rmat (tV T h))) m).
Proof. intros. unfold tf, transformer_heads, ffn_biased. cbn [sum]. unfold rvec. ring. Qed.

(** A neuron with zero input weights has pre-activation a_m whatever the input. *)
Lemma pre_activation_zero_column : forall e (A : qmat) (a : qvec) m x,
  all_lt e (fun j => Qeq_bool (A j m) 0) = true ->
  pre_activation e (rmat A) (rvec a) x m = Q2R (a m).
Proof.
  intros e A a m x H. unfold pre_activation. rewrite sum_zero; [unfold rvec; ring|].
  intros j Hj. unfold rmat. rewrite (qeq_spec _ _ (all_lt_spec _ _ H j Hj)).
  unfold Q2R. simpl. ring.
Qed.

Theorem tf_dead_neuron : forall d e m H (F G : qtf),
  all_lt H (fun h => head_same d e F G h h) = true -> ffn_same e m F G = true ->
  Qeq_bool (tb F) (tb G) = true ->
  all_lt e (fun j => Qeq_bool (tA G j m) 0) = true -> qle (ta G m) 0 = true ->
  forall N X, tf d e m H N X F = tf d e (S m) H N X G.
Proof.
  intros d e m H F G Hh Hf Hb Hz Hn N X. rewrite tf_last_neuron.
  rewrite (pre_activation_zero_column e _ _ m _ Hz).
  assert (R0 : relu (Q2R (ta G m)) = 0).
  { pose proof (qle_spec _ _ Hn) as E. unfold Q2R in E at 2. simpl in E.
    unfold relu, Rmax. destruct (Rle_dec 0 (Q2R (ta G m))); lra. }
  rewrite R0, Rmult_0_r, Rplus_0_r.
  apply tf_readout_ext; [|exact Hf|exact Hb]. apply heads_same_readout. exact Hh.
Qed.

Theorem tf_always_on_neuron : forall d e m H (F G : qtf),
  all_lt H (fun h => head_same d e F G h h) = true -> ffn_same e m F G = true ->
  all_lt e (fun j => Qeq_bool (tA F j m) 0) = true -> qle 0 (ta F m) = true ->
  Qeq_bool (tb F + tw F m * ta F m) (tb G) = true ->
  forall N X, tf d e (S m) H N X F = tf d e m H N X G.
Proof.
  intros d e m H F G Hh Hf Hz Hp Hb N X. rewrite tf_last_neuron.
  rewrite (pre_activation_zero_column e _ _ m _ Hz).
  assert (R0 : relu (Q2R (ta F m)) = Q2R (ta F m)).
  { pose proof (qle_spec _ _ Hp) as E. unfold Q2R in E at 1. simpl in E.
    unfold relu, Rmax. destruct (Rle_dec 0 (Q2R (ta F m))); lra. }
  rewrite R0. apply qeq_spec in Hb. rewrite Q2R_plus, Q2R_mult in Hb.
  transitivity (tf d e m H N X {| tW := tW F; tc := tc F; tV := tV F; tA := tA F;
                                 ta := ta F; tw := tw F; tb := tb G |}).
  - unfold tf, transformer_heads, ffn_biased. simpl. rewrite <- Hb. ring.
  - apply tf_readout_ext; [| exact Hf | apply Qeq_bool_refl].
    apply (heads_same_readout d e H N X F G Hh).
Qed.

(** ** A head the FFN does not see. *)

(** Head h's contribution to pre-activation k: V_h A's column k as the head's value. *)
Lemma pre_activation_heads : forall d e H N X Ws cs Vs A a k,
  pre_activation e A a (heads_readout d H N X Ws cs Vs) k =
  sum H (fun h => attention_affine d N X (Ws h) (cs h)
                    (fun i => sum e (fun j => Vs h i j * A j k)) 0) + a k.
Proof.
  intros. unfold pre_activation, heads_readout. f_equal.
  rewrite (sum_ext e _ (fun j => sum H (fun h => head_readout d N X (Ws h) (cs h) (Vs h) j * A j k)))
    by (intros; rewrite sum_scal_r; ring).
  rewrite sum_swap. apply sum_ext. intros h _. apply head_readout_dot.
Qed.

(** V_p A = 0 over Q (every i < d, k < m). *)
Definition killed (d e m : nat) (V A : qmat) : bool :=
  all_lt d (fun i => all_lt m (fun k => Qeq_bool (qsum e (fun j => V i j * A j k)%Q) 0)).

Lemma killed_value : forall d e m V A, killed d e m V A = true ->
  forall k, (k < m)%nat -> forall i, (i < d)%nat ->
  sum e (fun j => rmat V i j * rmat A j k) = 0.
Proof.
  intros d e m V A H k Hk i Hi. pose proof (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ H i Hi) k Hk)) as E.
  rewrite Q2R_qsum in E. transitivity (sum e (fun j => Q2R (V i j * A j k)%Q)).
  - apply sum_ext. intros. unfold rmat. rewrite Q2R_mult. reflexivity.
  - rewrite E. unfold Q2R. simpl. ring.
Qed.

Theorem tf_killed_head : forall d e m H p (F G : qtf), (p < H)%nat ->
  all_lt H (fun h => Nat.eqb h p || head_same d e F G h h) = true ->
  qmat_agree d e (tV F p) (tV G p) = true -> killed d e m (tV F p) (tA F) = true ->
  ffn_same e m F G = true -> Qeq_bool (tb F) (tb G) = true ->
  forall N X, tf d e m H N X F = tf d e m H N X G.
Proof.
  intros d e m H p F G Hp Hh HV Hkill Hf Hb N X. pose proof Hf as Hf'. unfold ffn_same in Hf'.
  apply andb_true_iff in Hf' as [Hf' Hw]. apply andb_true_iff in Hf' as [HA Ha].
  apply tf_pre_ext; [|exact Hw|exact Hb]. intros k Hk. rewrite !pre_activation_heads.
  rewrite (qvec_agree_spec m _ _ Ha k Hk). f_equal. apply sum_ext. intros h Hh'.
  destruct (Nat.eq_dec h p) as [->|Hne].
  - rewrite !attention_affine_zero_v; [reflexivity| |]; intros i Hi.
    + rewrite <- (killed_value d e m _ _ Hkill k Hk i Hi). apply sum_ext. intros j Hj.
      rewrite (qmat_agree_spec d e _ _ HV i j Hi Hj), (qmat_agree_spec e m _ _ HA j k Hj Hk).
      reflexivity.
    + exact (killed_value d e m _ _ Hkill k Hk i Hi).
  - pose proof (all_lt_spec _ _ Hh h Hh') as E. apply orb_true_iff in E as [E|E].
    + apply Nat.eqb_eq in E. contradiction.
    + rewrite <- !head_readout_dot. apply sum_ext. intros j Hj.
      rewrite (head_same_readout d e F G h h N X E j Hj), (qmat_agree_spec e m _ _ HA j k Hj Hk).
      reflexivity.
Qed.

(** ** Two heads with one softmax. *)

Lemma head_readout_add : forall d N X W c V1 V2 j,
  head_readout d N X W c V1 j + head_readout d N X W c V2 j =
  head_readout d N X W c (fun i j => V1 i j + V2 i j) j.
Proof.
  intros. unfold head_readout. rewrite <- sum_plus. apply sum_ext. intros t _.
  rewrite <- Rmult_plus_distr_l, <- sum_plus. f_equal. apply sum_ext. intros. ring.
Qed.

(** Head H of F has the W and c of head p < H; G has F's heads below H, head p with
    V_p + V_H. *)
Definition collide (d e H p : nat) (F G : qtf) : bool :=
  qmat_agree d d (tW F H) (tW F p) && qvec_agree d (tc F H) (tc F p) &&
  all_lt H (fun h => Nat.eqb h p || head_same d e F G h h) &&
  qmat_agree d d (tW F p) (tW G p) && qvec_agree d (tc F p) (tc G p) &&
  all_lt d (fun i => all_lt e (fun j => Qeq_bool (tV G p i j) (tV F p i j + tV F H i j)%Q)).

Theorem tf_colliding_heads : forall d e m H p (F G : qtf), (p < H)%nat ->
  collide d e H p F G = true -> ffn_same e m F G = true -> Qeq_bool (tb F) (tb G) = true ->
  forall N X, tf d e m (S H) N X F = tf d e m H N X G.
Proof.
  intros d e m H p F G Hp Hc Hf Hb N X. unfold collide in Hc.
  apply andb_true_iff in Hc as [Hc HVs]. apply andb_true_iff in Hc as [Hc Hcs].
  apply andb_true_iff in Hc as [Hc HWs]. apply andb_true_iff in Hc as [Hc Hh].
  apply andb_true_iff in Hc as [HW Hcc].
  apply tf_readout_ext; [|exact Hf|exact Hb]. intros j Hj. unfold heads_readout. cbn [sum].
  set (r := fun h => head_readout d N X (rmat (tW F h)) (rvec (tc F h)) (rmat (tV F h)) j).
  assert (Ext : r H = head_readout d N X (rmat (tW F p)) (rvec (tc F p)) (rmat (tV F H)) j).
  { apply (head_readout_ext d e); [| |reflexivity|exact Hj].
    - intros. apply (qmat_agree_spec d d); assumption.
    - intros. apply (qvec_agree_spec d); assumption. }
  assert (Pick : sum H (fun h => if Nat.eqb h p then r H else 0) = r H).
  { rewrite (sum_single H p _ Hp) by (intros k _ Hk; apply Nat.eqb_neq in Hk; rewrite Hk; reflexivity).
    rewrite Nat.eqb_refl. reflexivity. }
  change (sum H r + r H = sum H (fun h =>
    head_readout d N X (rmat (tW G h)) (rvec (tc G h)) (rmat (tV G h)) j)).
  rewrite <- Pick, <- sum_plus. apply sum_ext. intros h Hh'.
  destruct (Nat.eq_dec h p) as [->|Hne].
  - rewrite Nat.eqb_refl, Ext. unfold r. rewrite head_readout_add.
    apply (head_readout_ext d e); [| |intros i k Hi Hk|exact Hj].
    + intros. apply (qmat_agree_spec d d); assumption.
    + intros. apply (qvec_agree_spec d); assumption.
    + unfold rmat. rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HVs i Hi) k Hk)).
      rewrite Q2R_plus. reflexivity.
  - apply Nat.eqb_neq in Hne as Hne'. rewrite Hne', Rplus_0_r.
    pose proof (all_lt_spec _ _ Hh h Hh') as E. apply orb_true_iff in E as [E|E].
    + apply Nat.eqb_eq in E. contradiction.
    + exact (head_same_readout d e F G h h N X E j Hj).
Qed.
