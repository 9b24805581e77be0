(** * Certificates of affine single heads: the general theorem an exported run instantiates.

    The affine head computes f(X) = sum_t alpha_t x_t^T v + beta with scores
    s_t = x_t^T (W x_N + c). Its learner asks d^2 + 2d + 1 queries: [0] (answer beta),
    [e_i] (answer v_i + beta), [tc_k u_k; 0] (answer beta + sigmoid (tc_k u_k^T c) tc_k u_k^T v)
    and [e_j + t_kj u_k; e_j] (answer v_j + beta + sigmoid (t_kj (u_k^T W e_j + u_k^T c))
    t_kj u_k^T v). [affine_identified] says, for every d: if the finite checks over Q pass
    ([check_affine], run by computation) and the per-probe inequalities about exp hold
    ([affine_bracketed], [affine_hold], proved in the exported file by [interval]), then the
    certified head (W, c, v, beta) answers inside the recorded intervals, its entries have
    denominators at most D, and every head with both properties is the certified one.
    Theorem 4.1's affine argument with measured answers: beta, then v, then c = U^{-T} (U^T c),
    then W = U^{-T} M, each pinned in an interval that holds one rational of denominator
    at most D. *)

From Coq Require Import Reals QArith Qreals Lra Lia ZArith Bool.
From VerifiedAttn Require Import Defs Softmax CertHead.
Open Scope R_scope.

(** ** The recorded data of one run of the affine head. *)

Record affine_cert := {
  ad : nat; aD : positive;
  aU : qmat; aUinv : qmat;       (** the design U = [u_0 .. u_{d-1}] and an inverse *)
  ats : qmat; atc : qvec;         (** scales of [e_j + t_kj u_k; e_j] and of [tc_k u_k; 0] *)
  aW : qmat; ac : qvec; av : qvec; abeta : Q;   (** the certified head *)
  ablo : Q; abhi : Q;            (** the recorded answer to [0] *)
  avlo : qvec; avhi : qvec;      (** the recorded answers to [e_i] *)
  aclo : qvec; achi : qvec;      (** the recorded answers to [tc_k u_k; 0] *)
  awlo : qmat; awhi : qmat;      (** the recorded answers to [e_j + t_kj u_k; e_j] *)
  anclo : qvec; anchi : qvec;    (** logit brackets: anclo k < u_k^T c < anchi k *)
  anlo : qmat; anhi : qmat;      (** anlo k j < u_k^T W e_j + u_k^T c < anhi k j *)
  asc : qvec; as_ : qmat;        (** tc_k u_k^T v and t_kj u_k^T v of the certified v *)
  auc : qvec; am : qmat          (** u_k^T c and u_k^T W e_j + u_k^T c, certified *)
}.

Definition aucol (C : affine_cert) (k : nat) : vec := fun i => Q2R (aU C i k).
Definition query_beta : tokens := seq1 zero_vec.
Definition query_c (C : affine_cert) (k : nat) : tokens :=
  seq2 (vscale (Q2R (atc C k)) (aucol C k)) zero_vec.
Definition query_aw (C : affine_cert) (k j : nat) : tokens :=
  seq2 (vadd (unit_vec j) (vscale (Q2R (ats C k j)) (aucol C k))) (unit_vec j).

(** The head (W, c, v, beta) answers every recorded query inside its recorded interval. *)
Definition affine_answers_in (C : affine_cert) (W : mat) (c v : vec) (beta : R) : Prop :=
  let f N X := attention_affine (ad C) N X W c v beta in
  inside (ablo C) (abhi C) (f 1%nat query_beta) /\
  (forall i, (i < ad C)%nat -> inside (avlo C i) (avhi C i) (f 1%nat (query_v i))) /\
  (forall k, (k < ad C)%nat -> inside (aclo C k) (achi C k) (f 2%nat (query_c C k))) /\
  (forall k j, (k < ad C)%nat -> (j < ad C)%nat ->
     inside (awlo C k j) (awhi C k j) (f 2%nat (query_aw C k j))).

Definition affine_dens (D : positive) (d : nat) (W : mat) (c v : vec) (beta : R) : Prop :=
  denominators_at_most D d W v /\ (forall i, (i < d)%nat -> den_le D (c i)) /\ den_le D beta.

Definition same_affine (d : nat) (W : mat) (c v : vec) (beta : R)
    (W' : mat) (c' v' : vec) (beta' : R) : Prop :=
  same_head d W v W' v' /\ (forall i, (i < d)%nat -> c' i = c i) /\ beta' = beta.

(** What a run proves. *)
Definition affine_identified_run (C : affine_cert) : Prop :=
  let W := rmat (aW C) in let c := rvec (ac C) in let v := rvec (av C) in
  let beta := Q2R (abeta C) in
  affine_answers_in C W c v beta /\ affine_dens (aD C) (ad C) W c v beta /\
  forall (W' : mat) (c' v' : vec) (beta' : R),
    affine_dens (aD C) (ad C) W' c' v' beta' -> affine_answers_in C W' c' v' beta' ->
    same_affine (ad C) W c v beta W' c' v' beta'.

(** ** The checks a run must pass. *)

Definition auv (C : affine_cert) (k : nat) : Q := qsum (ad C) (fun i => aU C i k * av C i)%Q.
Definition auc_of (C : affine_cert) (k : nat) : Q := qsum (ad C) (fun i => aU C i k * ac C i)%Q.
Definition acol (C : affine_cert) (k j : nat) : Q :=
  qsum (ad C) (fun l => aU C l k * aW C l j)%Q.

Definition check_affine (C : affine_cert) : bool :=
  let d := ad C in let D := aD C in
  check_inverse d (aU C) (aUinv C) &&
  (unique_in D (ablo C) (abhi C) (abeta C) && den_ok D (abeta C)) &&
  all_lt d (fun i => unique_in D (avlo C i - abeta C) (avhi C i - abeta C) (av C i)
                     && den_ok D (av C i))%Q &&
  all_lt d (fun k => qlt 0 (atc C k) && Qeq_bool (asc C k) (atc C k * auv C k) &&
                     Qeq_bool (auc C k) (auc_of C k))%Q &&
  all_lt d (fun i =>
    unique_in D (lin_lo d (fun k => aUinv C k i) (anclo C) (anchi C))
      (lin_hi d (fun k => aUinv C k i) (anclo C) (anchi C)) (ac C i) && den_ok D (ac C i)) &&
  all_lt d (fun k => all_lt d (fun j =>
    qlt 0 (ats C k j) && Qeq_bool (as_ C k j) (ats C k j * auv C k) &&
    Qeq_bool (am C k j) (acol C k j + auc C k)))%Q &&
  all_lt d (fun i => all_lt d (fun j =>
    let lo k := (anlo C k j - auc C k)%Q in let hi k := (anhi C k j - auc C k)%Q in
    unique_in D (lin_lo d (fun k => aUinv C k i) lo hi) (lin_hi d (fun k => aUinv C k i) lo hi)
      (aW C i j) && den_ok D (aW C i j))).

(** The inequalities about exp, one pair per probe ([interval] proves them in a run). *)
Definition affine_bracketed (C : affine_cert) : Prop :=
  (forall k, (k < ad C)%nat ->
    brackets (Q2R (abeta C)) (Q2R (asc C k)) (Q2R (atc C k))
      (Q2R (aclo C k)) (Q2R (achi C k)) (Q2R (anclo C k)) (Q2R (anchi C k))) /\
  (forall k j, (k < ad C)%nat -> (j < ad C)%nat ->
    brackets (Q2R (av C j) + Q2R (abeta C)) (Q2R (as_ C k j)) (Q2R (ats C k j))
      (Q2R (awlo C k j)) (Q2R (awhi C k j)) (Q2R (anlo C k j)) (Q2R (anhi C k j))).

Definition affine_hold (C : affine_cert) : Prop :=
  (forall k, (k < ad C)%nat -> inside (aclo C k) (achi C k)
    (probe_value (Q2R (abeta C)) (Q2R (asc C k)) (Q2R (atc C k)) (Q2R (auc C k)))) /\
  (forall k j, (k < ad C)%nat -> (j < ad C)%nat -> inside (awlo C k j) (awhi C k j)
    (probe_value (Q2R (av C j) + Q2R (abeta C)) (Q2R (as_ C k j)) (Q2R (ats C k j))
       (Q2R (am C k j)))).

(** ** The answers to the four kinds of query. *)

Lemma answer_beta : forall d W c v beta, attention_affine d 1 query_beta W c v beta = beta.
Proof. intros. unfold query_beta. rewrite attention_length1, dot_zero_l. ring. Qed.

Lemma answer_v : forall d W c v beta i, (i < d)%nat ->
  attention_affine d 1 (query_v i) W c v beta = v i + beta.
Proof. intros. unfold query_v. rewrite attention_length1, dot_unit_l by assumption. ring. Qed.

Lemma answer_c : forall C W c v beta k,
  attention_affine (ad C) 2 (query_c C k) W c v beta =
  probe_value beta (Q2R (atc C k) * dot (ad C) (aucol C k) v) (Q2R (atc C k))
    (dot (ad C) (aucol C k) c).
Proof.
  intros. unfold attention_affine, probe_value. rewrite sum_two.
  rewrite softmax2_second, softmax2_sigmoid.
  unfold scores_affine, query_c, seq2, query_token. simpl pred.
  rewrite !dot_zero_l, !dot_vscale_l.
  rewrite (dot_ext (ad C) (aucol C k) (aucol C k) (vadd (mat_vec (ad C) W zero_vec) c) c)
    by (intros; try reflexivity; unfold vadd, mat_vec, zero_vec;
        rewrite sum_zero by (intros; ring); ring).
  replace (Q2R (atc C k) * dot (ad C) (aucol C k) c - 0)
    with (Q2R (atc C k) * dot (ad C) (aucol C k) c) by ring.
  ring.
Qed.

Lemma answer_w : forall C W c v beta k j, (j < ad C)%nat ->
  attention_affine (ad C) 2 (query_aw C k j) W c v beta =
  probe_value (v j + beta) (Q2R (ats C k j) * dot (ad C) (aucol C k) v) (Q2R (ats C k j))
    (sum (ad C) (fun l => Q2R (aU C l k) * W l j) + dot (ad C) (aucol C k) c).
Proof.
  intros C W c v beta k j Hj. unfold query_aw. rewrite probe_identity.
  rewrite dot_unit_l, dot_vadd_r by exact Hj. unfold probe_value.
  replace (dot (ad C) (aucol C k) (mat_vec (ad C) W (unit_vec j)))
    with (sum (ad C) (fun l => Q2R (aU C l k) * W l j)).
  - ring.
  - unfold dot, aucol. apply sum_ext. intros l Hl. rewrite mat_vec_unit by exact Hj.
    reflexivity.
Qed.

(** ** The proof. *)

Lemma Q2R_qlt0 : forall q, qlt 0 q = true -> 0 < Q2R q.
Proof. intros q H. apply qlt_spec in H. unfold Q2R at 1 in H. simpl in H. lra. Qed.

Lemma unique_inside : forall D lo hi q, unique_in D lo hi q = true -> inside lo hi (Q2R q).
Proof.
  intros D lo hi q U. unfold unique_in in U. rewrite !andb_true_iff in U.
  destruct U as [[U1 U2] _]. split; apply qle_spec; assumption.
Qed.

Lemma adot : forall C (x : qvec) k,
  dot (ad C) (aucol C k) (rvec x) = Q2R (qsum (ad C) (fun i => aU C i k * x i)%Q).
Proof.
  intros. rewrite Q2R_qsum. unfold dot, aucol, rvec. apply sum_ext. intros.
  rewrite Q2R_mult. reflexivity.
Qed.

Lemma unmix_vec : forall d (U Uinv : mat) (c : vec) i, (i < d)%nat ->
  (forall l i, (l < d)%nat -> (i < d)%nat -> mat_mul d U Uinv l i = identity l i) ->
  sum d (fun k => Uinv k i * sum d (fun l => U l k * c l)) = c i.
Proof. intros. apply (unmix d U Uinv (fun l _ => c l) i O); assumption. Qed.

(** y = sum_k Uinv_ki x_k with each x_k in its bracket and y of denominator at most D:
    y is the checked rational q. *)
Lemma pin : forall D d (Uinv : qmat) lo hi q (x : vec) i y,
  unique_in D (lin_lo d (fun k => Uinv k i) lo hi) (lin_hi d (fun k => Uinv k i) lo hi) q
    = true -> den_le D y -> y = sum d (fun k => Q2R (Uinv k i) * x k) ->
  (forall k, (k < d)%nat -> Q2R (lo k) < x k < Q2R (hi k)) -> y = Q2R q.
Proof.
  intros D d Uinv lo hi q x i y U Dy -> B. apply (unique_in_spec _ _ _ _ U _ Dy).
  apply lin_bounds. intros k Hk. destruct (B k Hk). split; lra.
Qed.

Theorem affine_identified : forall C,
  check_affine C = true -> affine_bracketed C -> affine_hold C -> affine_identified_run C.
Proof.
  intros C HC [Bc Bw] [Hc Hw]. unfold check_affine in HC.
  rewrite !andb_true_iff in HC.
  destruct HC as [[[[[[Hinv [Hb Db]] Hv] Hck] Hcc] Hkj] HW].
  pose proof (check_inverse_spec _ _ _ Hinv) as Hi0. clear Hinv. rename Hi0 into Hinv.
  set (d := ad C) in *.
  assert (Ev : forall i, (i < d)%nat -> unique_in (aD C) (avlo C i - abeta C)
            (avhi C i - abeta C) (av C i) = true /\ den_ok (aD C) (av C i) = true)
    by (intros i Hi; apply andb_true_iff, (all_lt_spec _ _ Hv i Hi)).
  assert (Ek : forall k, (k < d)%nat -> 0 < Q2R (atc C k) /\
            Q2R (asc C k) = Q2R (atc C k) * Q2R (auv C k) /\ Q2R (auc C k) = Q2R (auc_of C k)).
  { intros k Hk. pose proof (all_lt_spec _ _ Hck k Hk) as E. cbv beta in E.
    rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
    apply Q2R_qlt0 in E1. apply qeq_spec in E2. apply qeq_spec in E3.
    rewrite Q2R_mult in E2. auto. }
  assert (Ec : forall i, (i < d)%nat -> _ /\ den_ok (aD C) (ac C i) = true)
    by (intros i Hi; apply andb_true_iff, (all_lt_spec _ _ Hcc i Hi)).
  assert (Ekj : forall k j, (k < d)%nat -> (j < d)%nat -> 0 < Q2R (ats C k j) /\
            Q2R (as_ C k j) = Q2R (ats C k j) * Q2R (auv C k) /\
            Q2R (am C k j) = Q2R (acol C k j) + Q2R (auc C k)).
  { intros k j Hk Hj. pose proof (all_lt_spec _ _ (all_lt_spec _ _ Hkj k Hk) j Hj) as E.
    cbv beta in E. rewrite !andb_true_iff in E. destruct E as [[E1 E2] E3].
    apply Q2R_qlt0 in E1. apply qeq_spec in E2. apply qeq_spec in E3.
    rewrite Q2R_mult in E2. rewrite Q2R_plus in E3. auto. }
  assert (EW : forall i j, (i < d)%nat -> (j < d)%nat -> _ /\ den_ok (aD C) (aW C i j) = true)
    by (intros i j Hi Hj; apply andb_true_iff, (all_lt_spec _ _ (all_lt_spec _ _ HW i Hi) j Hj)).
  assert (Hcol : forall k j, (j < d)%nat ->
            sum d (fun l => Q2R (aU C l k) * rmat (aW C) l j) = Q2R (acol C k j)).
  { intros k j Hj. unfold acol. rewrite Q2R_qsum. apply sum_ext. intros.
    unfold rmat. rewrite Q2R_mult. reflexivity. }
  split; [|split].
  - (* the certified head answers inside the recorded intervals *)
    split; [|split; [|split]].
    + rewrite answer_beta. apply (unique_inside _ _ _ _ Hb).
    + intros i Hi. rewrite answer_v by exact Hi. destruct (Ev i Hi) as [U _].
      apply unique_inside in U. unfold inside in *. rewrite !Q2R_minus in U.
      unfold rvec. lra.
    + intros k Hk. rewrite answer_c. destruct (Ek k Hk) as [_ [Hs Hu]].
      rewrite !adot. fold (auv C k). fold (auc_of C k). rewrite <- Hs, <- Hu.
      apply Hc, Hk.
    + intros k j Hk Hj. rewrite answer_w by exact Hj. destruct (Ekj k j Hk Hj) as [_ [Hs Hm]].
      rewrite Hcol, !adot by exact Hj. fold (auv C k). fold (auc_of C k).
      destruct (Ek k Hk) as [_ [_ Hu]]. rewrite <- Hs, <- Hu, <- Hm.
      apply Hw; assumption.
  - (* denominators *)
    split; [split|split].
    + intros i j Hi Hj. apply den_ok_spec, (EW i j Hi Hj).
    + intros i Hi. apply den_ok_spec, (Ev i Hi).
    + intros i Hi. apply den_ok_spec, (Ec i Hi).
    + apply den_ok_spec, Db.
  - (* uniqueness: beta, then v, then c, then W *)
    intros W' c' v' beta' [[DW Dv] [Dc Dbeta]] [Ab [Av [Ac Aw]]].
    assert (Eb : beta' = Q2R (abeta C)).
    { apply (unique_in_spec _ _ _ _ Hb _ Dbeta). rewrite answer_beta in Ab. exact Ab. }
    assert (Ev' : forall i, (i < d)%nat -> v' i = rvec (av C) i).
    { intros i Hi. destruct (Ev i Hi) as [U _]. apply (unique_in_spec _ _ _ _ U _ (Dv i Hi)).
      pose proof (Av i Hi) as A. rewrite answer_v in A by exact Hi. unfold inside in A.
      rewrite !Q2R_minus. lra. }
    assert (Hv' : forall k, dot d (aucol C k) v' = Q2R (auv C k)).
    { intros k. unfold auv. rewrite <- adot. apply dot_ext; [reflexivity|exact Ev']. }
    assert (Bc' : forall k, (k < d)%nat ->
              Q2R (anclo C k) < dot d (aucol C k) c' < Q2R (anchi C k)).
    { intros k Hk. destruct (Ek k Hk) as [Ht [Hs _]].
      apply (brackets_spec (Q2R (abeta C)) (Q2R (asc C k)) (Q2R (atc C k))
               (Q2R (aclo C k)) (Q2R (achi C k))); [exact Ht|apply Bc, Hk|].
      pose proof (Ac k Hk) as A. rewrite answer_c in A. fold d in A.
      rewrite Hv', <- Hs, Eb in A. exact A. }
    assert (Ec' : forall i, (i < d)%nat -> c' i = rvec (ac C) i).
    { intros i Hi. destruct (Ec i Hi) as [U _].
      apply (pin _ _ _ _ _ _ (fun k => dot d (aucol C k) c') i _ U (Dc i Hi)).
      - symmetry. apply (unmix_vec d (rmat (aU C)) (rmat (aUinv C)) c' i Hi Hinv).
      - intros k Hk. exact (Bc' k Hk). }
    assert (Hc' : forall k, (k < d)%nat -> dot d (aucol C k) c' = Q2R (auc C k)).
    { intros k Hk. destruct (Ek k Hk) as [_ [_ Hu]]. rewrite Hu. unfold auc_of.
      rewrite <- adot. apply dot_ext; [reflexivity|exact Ec']. }
    split; [split|split]; [|exact Ev'|exact Ec'|exact Eb].
    intros i j Hi Hj. destruct (EW i j Hi Hj) as [U _].
    apply (pin _ _ _ _ _ _ (fun k => sum d (fun l => Q2R (aU C l k) * W' l j)) i _ U
             (DW i j Hi Hj)).
    + symmetry. apply (unmix d (rmat (aU C)) (rmat (aUinv C)) W' i j Hi Hinv).
    + intros k Hk. destruct (Ekj k j Hk Hj) as [Ht [Hs _]].
      assert (B : Q2R (anlo C k j) < sum d (fun l => Q2R (aU C l k) * W' l j)
                    + dot d (aucol C k) c' < Q2R (anhi C k j)).
      { apply (brackets_spec (Q2R (av C j) + Q2R (abeta C)) (Q2R (as_ C k j)) (Q2R (ats C k j))
                 (Q2R (awlo C k j)) (Q2R (awhi C k j))); [exact Ht|apply Bw; assumption|].
        pose proof (Aw k j Hk Hj) as A. rewrite answer_w in A by exact Hj. fold d in A.
        rewrite Hv', <- Hs, Eb, (Ev' j Hj) in A. exact A. }
      rewrite (Hc' k Hk) in B. unfold rmat. rewrite !Q2R_minus. lra.
Qed.
