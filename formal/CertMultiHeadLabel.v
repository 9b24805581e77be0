(** * The canonical multi-head learner's labelling of heads across pairs, from exact answers.

    [CertMultiHeadId.mh_pairs_determined] gives, at each pair of a run's design, the
    certified heads' (residue, score) pairs up to order, for any model of at most H0 heads
    with the certified answers. The learner labels heads across pairs: at (u_k, b_j) by the
    residue u_k^T v_h (it does not depend on b), across k by the links (u_0 + u_k, b_0)
    (scores and residues add). [labels_determine] (every d, any number of heads): if the
    certified heads' pairs at (u_0, b_0) are distinct, every link pair is unambiguous
    ([link_ok]: a sum of head h1's numbers at (u_0, b_0) and head h2's at (u_k, b_0) is a
    head's own sum only when h2 has h1's numbers at (u_k, b_0)) and equal residues at u_k
    mean equal scores on row k ([row_ok]: no ties), then every such model gives the
    certified model's output on every sequence (the per-pair matches are one labelling:
    each head has a certified head's grid scores and residues, [grid_determines] fixes its
    W and v, and the labelling is a permutation). [mh_identified]: the same for a run, the conditions checked over Q.

    From exact answers only: answers known only to lie in intervals are not covered, and
    runs with tie links (equal residues) fail [row_ok]. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Permutation Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead CertPair CertMultiHead CertMultiHeadId.
Import ListNotations.
Open Scope R_scope.

(** A head's (residue, score) at (u, b). *)
Definition pair_at (d : nat) (u b : vec) (h : head) : R * R :=
  (dot d u (snd h), dot d u (mat_vec d (fst h) b)).

Lemma score_pairs_map : forall d u b hs, score_pairs d u b hs = map (pair_at d u b) hs.
Proof. reflexivity. Qed.

Lemma nodup_map_eq : forall {A B} (f : A -> B) l a b,
  NoDup (map f l) -> In a l -> In b l -> f a = f b -> a = b.
Proof.
  intros A B f. induction l as [|x l IH]; intros a b N Ha Hb E; [contradiction|].
  simpl in N. inversion N as [|? ? Nx N']; subst.
  destruct Ha as [<-|Ha], Hb as [<-|Hb]; [reflexivity| | |exact (IH a b N' Ha Hb E)].
  - exfalso. apply Nx. rewrite E. apply in_map, Hb.
  - exfalso. apply Nx. rewrite <- E. apply in_map, Ha.
Qed.

Lemma match_at : forall d u b hs hs' h',
  Permutation (score_pairs d u b hs) (score_pairs d u b hs') -> In h' hs' ->
  exists h, In h hs /\ pair_at d u b h = pair_at d u b h'.
Proof.
  intros d u b hs hs' h' P H.
  assert (I : In (pair_at d u b h') (score_pairs d u b hs)).
  { apply (Permutation_in _ (Permutation_sym P)). apply in_map, H. }
  apply in_map_iff in I as [h [E Hh]]. exists h. split; assumption.
Qed.

(** A head's residue at u_k and score at (u_k, b_j). *)
Definition lres (d : nat) (U : qmat) (k : nat) (h : head) : R := dot d (rvec (U k)) (snd h).
Definition lsc (d : nat) (U B : qmat) (k j : nat) (h : head) : R :=
  dot d (rvec (U k)) (mat_vec d (fst h) (rvec (B j))).

Definition link_ok (d : nat) (U B : qmat) (hs : list head) : Prop :=
  forall k, (0 < k < d)%nat -> forall h1 h2 h3,
  In h1 hs -> In h2 hs -> In h3 hs ->
  lres d U O h1 + lres d U k h2 = lres d U O h3 + lres d U k h3 ->
  lsc d U B O O h1 + lsc d U B k O h2 = lsc d U B O O h3 + lsc d U B k O h3 ->
  lres d U k h2 = lres d U k h1 /\ lsc d U B k O h2 = lsc d U B k O h1.

Definition row_ok (d : nat) (U B : qmat) (hs : list head) : Prop :=
  forall k, (k < d)%nat -> forall h4 h,
  In h4 hs -> In h hs -> lres d U k h4 = lres d U k h ->
  forall j, (j < d)%nat -> lsc d U B k j h4 = lsc d U B k j h.

Lemma dot_link : forall d (U : qmat) k x,
  dot d (rvec (fun i => (U O i + U k i)%Q)) x = dot d (rvec (U O)) x + dot d (rvec (U k)) x.
Proof.
  intros d U k x. unfold dot. rewrite <- sum_plus. apply sum_ext. intros i _.
  unfold rvec. rewrite Q2R_plus. ring.
Qed.

(** Each head of hs' has one certified head's grid scores and residues. *)
Lemma label_one : forall d U B hs hs', link_ok d U B hs -> row_ok d U B hs -> (0 < d)%nat ->
  Forall (fun p => Permutation (score_pairs d (rvec (fst p)) (rvec (snd p)) hs)
                               (score_pairs d (rvec (fst p)) (rvec (snd p)) hs'))
    (mh_pairs d U B) ->
  forall h', In h' hs' -> exists h, In h hs /\
    pair_at d (rvec (U O)) (rvec (B O)) h = pair_at d (rvec (U O)) (rvec (B O)) h' /\
    grid_same d U B h' h.
Proof.
  intros d U B hs hs' L R Hd P h' Hh'. rewrite Forall_forall in P.
  assert (G : forall k j, (k < d)%nat -> (j < d)%nat -> In (U k, B j) (mh_pairs d U B)).
  { intros k j Hk Hj. unfold mh_pairs. apply in_or_app. left. apply in_flat_map.
    exists k. split; [apply in_seq; lia|]. apply in_map_iff. exists j.
    split; [reflexivity|apply in_seq; lia]. }
  assert (Lk : forall k, (0 < k < d)%nat ->
            In ((fun i => (U O i + U k i)%Q), B O) (mh_pairs d U B)).
  { intros k Hk. unfold mh_pairs. apply in_or_app. right. apply in_map_iff. exists k.
    split; [reflexivity|apply in_seq; lia]. }
  destruct (match_at _ _ _ _ _ h' (P _ (G O O Hd Hd)) Hh') as [h [Hh E00]].
  exists h. split; [exact Hh|]. split; [exact E00|].
  unfold pair_at in E00. injection E00 as R0 S00.
  (* along column 0: the links *)
  assert (K0 : forall k, (k < d)%nat -> lres d U k h' = lres d U k h /\ lsc d U B k O h' = lsc d U B k O h).
  { intros k Hk. destruct k as [|k]; [split; symmetry; assumption|].
    destruct (match_at _ _ _ _ _ h' (P _ (G (S k) O Hk Hd)) Hh') as [h2 [Hh2 E2]].
    destruct (match_at _ _ _ _ _ h' (P _ (Lk (S k) ltac:(lia))) Hh') as [h3 [Hh3 E3]].
    unfold pair_at in E2, E3. injection E2 as R2 S2. injection E3 as R3 S3.
    cbn [fst snd] in R3, S3. rewrite !dot_link in R3, S3.
    assert (Hk' : (0 < S k < d)%nat) by lia.
    destruct (L (S k) Hk' h h2 h3 Hh Hh2 Hh3) as [A1 A2];
      unfold lres, lsc in *; cbn [fst snd] in *; [lra|lra|split; lra]. }
  split.
  - intros k j Hk Hj.
    destruct (match_at _ _ _ _ _ h' (P _ (G k j Hk Hj)) Hh') as [h4 [Hh4 E4]].
    unfold pair_at in E4. injection E4 as R4 S4. cbn [fst snd] in R4, S4.
    destruct (K0 k Hk) as [Rk _].
    assert (X : lres d U k h4 = lres d U k h) by (unfold lres in *; lra).
    pose proof (R k Hk h4 h Hh4 Hh X j Hj) as Y. unfold lsc in Y. lra.
  - intros k Hk. destruct (K0 k Hk) as [Rk _]. exact Rk.
Qed.




Lemma forall2_map_self : forall {A} (R : A -> A -> Prop) f l,
  (forall x, In x l -> R x (f x)) -> Forall2 R l (map f l).
Proof.
  intros A R f. induction l as [|x l IH]; intros H; constructor.
  - apply H. left. reflexivity.
  - apply IH. intros y Hy. apply H. right. exact Hy.
Qed.

Definition pick (key : head -> R * R) (hs : list head) (x : R * R) : head :=
  match find (fun h => if Req_EM_T (fst (key h)) (fst x)
                       then if Req_EM_T (snd (key h)) (snd x) then true else false
                       else false) hs with
  | Some h => h
  | None => (fun _ _ => 0, fun _ => 0)
  end.

Lemma pick_self : forall key hs h, NoDup (map (fun h => snd (key h)) hs) -> In h hs ->
  pick key hs (key h) = h.
Proof.
  intros key hs h N H. unfold pick.
  destruct (find _ hs) as [h0|] eqn:F.
  - apply find_some in F as [H0 T].
    destruct (Req_EM_T (fst (key h0)) (fst (key h))); [|discriminate].
    destruct (Req_EM_T (snd (key h0)) (snd (key h))) as [E|]; [|discriminate].
    exact (nodup_map_eq (fun h => snd (key h)) hs h0 h N H0 H E).
  - exfalso. pose proof (find_none _ _ F h H) as T. cbv beta in T.
    destruct (Req_EM_T (fst (key h)) (fst (key h))) as [|n]; [|apply n; reflexivity].
    destruct (Req_EM_T (snd (key h)) (snd (key h))) as [|n]; [discriminate|apply n; reflexivity].
Qed.

(** Every d and H0: the per-pair matches at every pair of the design, distinct certified
    pairs at (u_0, b_0), unambiguous links and no ties give the certified model's output
    on every sequence. *)
Theorem labels_determine : forall d (U Uinv B Binv : qmat) (hs hs' : list head),
  check_inverse d Uinv U = true -> check_inverse d Binv B = true -> (0 < d)%nat ->
  link_ok d U B hs -> row_ok d U B hs ->
  NoDup (map snd (score_pairs d (rvec (U O)) (rvec (B O)) hs)) ->
  Forall (fun p => Permutation (score_pairs d (rvec (fst p)) (rvec (snd p)) hs)
                               (score_pairs d (rvec (fst p)) (rvec (snd p)) hs'))
    (mh_pairs d U B) ->
  forall N X, multi_head d N X hs' = multi_head d N X hs.
Proof.
  intros d U Uinv B Binv hs hs' HU HB Hd L R N0 P N X.
  set (key := pair_at d (rvec (U O)) (rvec (B O))).
  assert (N1 : NoDup (map (fun h => snd (key h)) hs)).
  { rewrite score_pairs_map, map_map in N0. exact N0. }
  transitivity (multi_head d N X (map (fun h' => pick key hs (key h')) hs')).
  - apply multi_head_ext. apply forall2_map_self. intros h' Hh'.
    destruct (label_one d U B hs hs' L R Hd P h' Hh') as [h [Hh [E G]]].
    fold key in E. rewrite <- E, (pick_self key hs h N1 Hh).
    exact (grid_determines d U Uinv B Binv h' h HU HB G).
  - apply prop71_permutation.
    assert (In (U O, B O) (mh_pairs d U B)) as I0.
    { unfold mh_pairs. apply in_or_app. left. apply in_flat_map. exists O.
      split; [apply in_seq; lia|]. apply in_map_iff. exists O. split; [reflexivity|apply in_seq; lia]. }
    rewrite Forall_forall in P. pose proof (P _ I0) as P0. cbn [fst snd] in P0.
    rewrite !score_pairs_map in P0. fold key in P0.
    apply (Permutation_map (pick key hs)) in P0. rewrite !map_map in P0.
    rewrite (map_ext_in (fun x => pick key hs (key x)) (fun x => x) hs) in P0
      by (intros h Hh; apply pick_self; assumption).
    rewrite map_id in P0. apply Permutation_sym, P0.
Qed.

(** ** A run: the conditions checked over Q. *)

Definition qres (d : nat) (u : qvec) (h : qmat * qvec) : Q := qdot d u (snd h).
Definition qsc (d : nat) (u b : qvec) (h : qmat * qvec) : Q := qdot d u (qmv d (fst h) b).

Definition link_check (d : nat) (U B : qmat) (qs : list (qmat * qvec)) : bool :=
  all_lt d (fun k => Nat.eqb k 0 || forallb (fun h1 => forallb (fun h2 => forallb (fun h3 =>
    negb (Qeq_bool (qres d (U O) h1 + qres d (U k) h2) (qres d (U O) h3 + qres d (U k) h3) &&
          Qeq_bool (qsc d (U O) (B O) h1 + qsc d (U k) (B O) h2)
                   (qsc d (U O) (B O) h3 + qsc d (U k) (B O) h3)) ||
    (Qeq_bool (qres d (U k) h2) (qres d (U k) h1) &&
     Qeq_bool (qsc d (U k) (B O) h2) (qsc d (U k) (B O) h1))) qs) qs) qs).

Definition row_check (d : nat) (U B : qmat) (qs : list (qmat * qvec)) : bool :=
  all_lt d (fun k => forallb (fun h4 => forallb (fun h =>
    negb (Qeq_bool (qres d (U k) h4) (qres d (U k) h)) ||
    all_lt d (fun j => Qeq_bool (qsc d (U k) (B j) h4) (qsc d (U k) (B j) h))) qs) qs).

Lemma in_rheads : forall qs h, In h (rheads qs) ->
  exists q, In q qs /\ h = (rmat (fst q), rvec (snd q)).
Proof.
  intros qs h H. unfold rheads in H. apply in_map_iff in H as [q [<- Hq]]. exists q. auto.
Qed.

Lemma qeq_of_R : forall x y, Q2R x = Q2R y -> Qeq_bool x y = true.
Proof. intros x y E. apply Qeq_bool_iff, eqR_Qeq, E. Qed.

Lemma link_check_ok : forall d U B qs, link_check d U B qs = true ->
  link_ok d U B (rheads qs).
Proof.
  intros d U B qs C k Hk h1 h2 h3 H1 H2 H3 ER ES.
  apply in_rheads in H1 as [q1 [I1 ->]], H2 as [q2 [I2 ->]], H3 as [q3 [I3 ->]].
  unfold lres, lsc in *. cbn [fst snd] in *. rewrite !dot_q, !dot_mv_q in *.
  pose proof (all_lt_spec _ _ C k ltac:(lia)) as C1. cbv beta in C1.
  destruct (Nat.eqb_spec k 0) as [->|_]; [lia|]. simpl in C1.
  rewrite forallb_forall in C1. specialize (C1 q1 I1). rewrite forallb_forall in C1.
  specialize (C1 q2 I2). rewrite forallb_forall in C1. specialize (C1 q3 I3).
  rewrite <- !Q2R_plus in ER, ES. apply qeq_of_R in ER, ES. unfold qres, qsc in C1.
  rewrite ER, ES in C1. simpl in C1. apply andb_true_iff in C1 as [A1 A2].
  apply qeq_spec in A1, A2. split; assumption.
Qed.

Lemma row_check_ok : forall d U B qs, row_check d U B qs = true -> row_ok d U B (rheads qs).
Proof.
  intros d U B qs C k Hk h4 h H4 H E j Hj.
  apply in_rheads in H4 as [q4 [I4 ->]], H as [q [I ->]].
  unfold lres, lsc in *. cbn [fst snd] in *. rewrite !dot_q in E. rewrite !dot_mv_q.
  pose proof (all_lt_spec _ _ C k Hk) as C1. cbv beta in C1.
  rewrite forallb_forall in C1. specialize (C1 q4 I4). rewrite forallb_forall in C1.
  specialize (C1 q I). apply qeq_of_R in E. unfold qres, qsc in C1. rewrite E in C1.
  simpl in C1. apply qeq_spec. exact (all_lt_spec _ _ C1 j Hj).
Qed.

(** Every run whose H0 certified heads are generic at every pair, whose links are
    unambiguous and which has no ties (all checked over Q): every model of at most H0
    heads with the certified heads' answers to every query the design generates gives the
    certified model's output on every sequence of every length. *)
(** The same from the (residue, score) pairs up to order at every pair of the design
    (however they were obtained: exact answers below, answers known to eps in
    CertMultiHeadBound.v). *)
Theorem mh_identified_pairs : forall C (Uinv Binv : qmat) (hs' : list head),
  check_inverse (md C) Uinv (mU C) = true -> check_inverse (md C) Binv (mB C) = true ->
  (0 < md C)%nat -> check_generic C = true ->
  link_check (md C) (mU C) (mB C) (mheads C) = true ->
  row_check (md C) (mU C) (mB C) (mheads C) = true ->
  Forall (fun p => Permutation
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) (rheads (mheads C)))
      (score_pairs (md C) (rvec (fst p)) (rvec (snd p)) hs'))
    (mh_pairs (md C) (mU C) (mB C)) ->
  forall N X, multi_head (md C) N X hs' = multi_head (md C) N X (rheads (mheads C)).
Proof.
  intros C Uinv Binv hs' HU HB Hd G L R P.
  apply (labels_determine (md C) (mU C) Uinv (mB C) Binv); try assumption.
  - apply link_check_ok, L.
  - apply row_check_ok, R.
  - assert (I0 : In (mU C O, mB C O) (mh_pairs (md C) (mU C) (mB C))).
    { unfold mh_pairs. apply in_or_app. left. apply in_flat_map. exists O.
      split; [apply in_seq; lia|]. apply in_map_iff. exists O.
      split; [reflexivity|apply in_seq; lia]. }
    unfold check_generic in G. rewrite forallb_forall in G. pose proof (G _ I0) as G0.
    unfold generic_at in G0. apply andb_true_iff in G0 as [G1 _]. cbn [fst snd] in G1.
    rewrite score_pairs_q, map_map. simpl. rewrite <- (map_map _ Q2R).
    apply qnodup_spec, G1.
Qed.

Theorem mh_identified : forall C (Uinv Binv : qmat) (hs' : list head),
  check_inverse (md C) Uinv (mU C) = true -> check_inverse (md C) Binv (mB C) = true ->
  (0 < md C)%nat -> check_generic C = true -> length (mheads C) = mH0 C ->
  link_check (md C) (mU C) (mB C) (mheads C) = true ->
  row_check (md C) (mU C) (mB C) (mheads C) = true ->
  (length hs' <= mH0 C)%nat -> same_answers C hs' (rheads (mheads C)) ->
  forall N X, multi_head (md C) N X hs' = multi_head (md C) N X (rheads (mheads C)).
Proof.
  intros C Uinv Binv hs' HU HB Hd G Hl L R Hl' E.
  apply (mh_identified_pairs C Uinv Binv); try assumption.
  apply mh_pairs_determined; assumption.
Qed.
