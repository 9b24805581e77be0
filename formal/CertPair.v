(** * Counterexample pairs of Proposition 7.1: the general theorems an exported pair uses.

    A pair's certificate lists two multi-head models (rational W_h, v_h). Its exported file
    proves [multi_head d N X first = multi_head d N X second] for every length N and
    sequence X, by one of the four Prop 7.1 families ([Prop71.v]) instantiated with the
    pair's rationals, and that the two parameter lists differ. The theorems here reduce
    each family to finite checks over Q ([qheads_agree], run by computation):
    - [pair_permutation]: second lists first's heads rotated by one place;
    - [pair_shared_split]: first = (W, v1) (W, v2) rest, second = (W, v1') (W, v2') rest
      with v1 + v2 = v1' + v2';
    - [pair_dead_head]: first = (W, 0) rest, second = (W', 0) rest;
    - [pair_cancelling]: first = (W1, u1) (W1, -u1) rest, second = (W2, u2) (W2, -u2) rest.
    Heads "agree" when their entries are equal rationals below d ([qheads_agree_spec]). *)

From Coq Require Import Reals QArith Qreals Lra Lia List Permutation Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead.
Import ListNotations.
Open Scope R_scope.

(** ** A head reads W and v only below d. *)

Lemma attention_ext_W : forall d N X (W W' : mat) v,
  (forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j) ->
  attention d N X W v = attention d N X W' v.
Proof.
  intros d N X W W' v H. unfold attention, attention_affine, softmax.
  assert (S : forall t, scores_affine d N X W zero_vec t = scores_affine d N X W' zero_vec t).
  { intros t. unfold scores_affine. apply dot_ext; [reflexivity|]. intros i Hi.
    unfold vadd, mat_vec. f_equal. apply sum_ext. intros k Hk. rewrite H by assumption.
    reflexivity. }
  rewrite (sum_ext N (fun u => exp (scores_affine d N X W zero_vec u))
             (fun u => exp (scores_affine d N X W' zero_vec u))) by (intros; rewrite S; reflexivity).
  f_equal. apply sum_ext. intros t Ht. rewrite S. reflexivity.
Qed.

Definition head_agree (d : nat) (h h' : head) : Prop :=
  (forall i j, (i < d)%nat -> (j < d)%nat -> fst h i j = fst h' i j) /\
  (forall i, (i < d)%nat -> snd h i = snd h' i).

Theorem multi_head_ext : forall d hs hs', Forall2 (head_agree d) hs hs' ->
  forall N X, multi_head d N X hs = multi_head d N X hs'.
Proof.
  intros d hs hs' F N X. induction F as [|[W v] [W' v'] hs hs' [HW Hv] F IH]; [reflexivity|].
  simpl in *. rewrite IH, (attention_ext_W d N X W W' v HW).
  rewrite (attention_ext_v d N X W' v v' Hv). reflexivity.
Qed.

(** ** Heads with rational entries, and their agreement by computation. *)

Definition qhead := (qmat * qvec)%type.
Definition rhead (h : qhead) : head := (rmat (fst h), rvec (snd h)).
Definition qvopp (u : qvec) : qvec := fun i => (- u i)%Q.

Definition qhead_agree (d : nat) (h h' : qhead) : bool :=
  all_lt d (fun i => all_lt d (fun j => Qeq_bool (fst h i j) (fst h' i j))) &&
  all_lt d (fun i => Qeq_bool (snd h i) (snd h' i)).

Fixpoint qheads_agree (d : nat) (hs hs' : list qhead) : bool :=
  match hs, hs' with
  | [], [] => true
  | h :: r, h' :: r' => qhead_agree d h h' && qheads_agree d r r'
  | _, _ => false
  end.

Lemma qheads_agree_spec : forall d hs hs', qheads_agree d hs hs' = true ->
  Forall2 (head_agree d) (map rhead hs) (map rhead hs').
Proof.
  intros d. induction hs as [|h r IH]; intros [|h' r'] H; simpl in H; try discriminate.
  - constructor.
  - apply andb_true_iff in H as [H1 H2]. unfold qhead_agree in H1.
    apply andb_true_iff in H1 as [HW Hv]. simpl. constructor; [|apply IH, H2].
    split; simpl.
    + intros i j Hi Hj. apply qeq_spec, (all_lt_spec _ _ (all_lt_spec _ _ HW i Hi) j Hj).
    + intros i Hi. apply qeq_spec, (all_lt_spec _ _ Hv i Hi).
Qed.

Lemma agree_mh : forall d hs hs', qheads_agree d hs hs' = true ->
  forall N X, multi_head d N X (map rhead hs) = multi_head d N X (map rhead hs').
Proof. intros. apply multi_head_ext, qheads_agree_spec. assumption. Qed.

(** ** The four families, as finite checks. *)

Theorem pair_permutation : forall d (h : qhead) rest first second,
  qheads_agree d first (h :: rest) = true -> qheads_agree d (rest ++ [h]) second = true ->
  forall N X, multi_head d N X (map rhead first) = multi_head d N X (map rhead second).
Proof.
  intros d h rest first second H1 H2 N X. rewrite (agree_mh _ _ _ H1), <- (agree_mh _ _ _ H2).
  apply prop71_permutation. rewrite map_app. apply Permutation_cons_append.
Qed.

Theorem pair_shared_split : forall d (W : qmat) (v1 v2 v1' v2' : qvec) rest first second,
  qheads_agree d first ((W, v1) :: (W, v2) :: rest) = true ->
  all_lt d (fun i => Qeq_bool (v1 i + v2 i) (v1' i + v2' i)) = true ->
  qheads_agree d ((W, v1') :: (W, v2') :: rest) second = true ->
  forall N X, multi_head d N X (map rhead first) = multi_head d N X (map rhead second).
Proof.
  intros d W v1 v2 v1' v2' rest first second H1 Hs H2 N X.
  rewrite (agree_mh _ _ _ H1), <- (agree_mh _ _ _ H2). simpl map. unfold rhead; simpl fst; simpl snd.
  apply prop71_shared_split. intros i Hi. pose proof (all_lt_spec _ _ Hs i Hi) as E.
  apply qeq_spec in E. rewrite !Q2R_plus in E. exact E.
Qed.

Theorem pair_dead_head : forall d (W W' : qmat) (v : qvec) rest first second,
  qheads_agree d first ((W, v) :: rest) = true ->
  all_lt d (fun i => Qeq_bool (v i) 0) = true ->
  qheads_agree d ((W', v) :: rest) second = true ->
  forall N X, multi_head d N X (map rhead first) = multi_head d N X (map rhead second).
Proof.
  intros d W W' v rest first second H1 Hz H2 N X.
  rewrite (agree_mh _ _ _ H1), <- (agree_mh _ _ _ H2). simpl map. unfold rhead; simpl fst; simpl snd.
  apply prop71_dead_head. intros i Hi. pose proof (all_lt_spec _ _ Hz i Hi) as E.
  apply qeq_spec in E. unfold rvec. rewrite E. unfold Q2R. simpl. field.
Qed.

Lemma rvec_qvopp : forall u i, rvec (qvopp u) i = vopp (rvec u) i.
Proof. intros. unfold rvec, qvopp, vopp. apply Q2R_opp. Qed.

Theorem pair_cancelling : forall d (W1 W2 : qmat) (u1 u2 : qvec) rest first second,
  qheads_agree d first ((W1, u1) :: (W1, qvopp u1) :: rest) = true ->
  qheads_agree d ((W2, u2) :: (W2, qvopp u2) :: rest) second = true ->
  forall N X, multi_head d N X (map rhead first) = multi_head d N X (map rhead second).
Proof.
  intros d W1 W2 u1 u2 rest first second H1 H2 N X.
  rewrite (agree_mh _ _ _ H1), <- (agree_mh _ _ _ H2). simpl map. unfold rhead; simpl fst; simpl snd.
  simpl multi_head.
  rewrite !(attention_ext_v d N X _ (rvec (qvopp _)) (vopp (rvec _)))
    by (intros; apply rvec_qvopp).
  pose proof (prop71_cancelling d (rmat W1) (rmat W2) (rvec u1) (rvec u2) (map rhead rest) N X)
    as E. simpl in E. exact E.
Qed.
