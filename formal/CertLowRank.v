(** * Low-rank (skeleton) certificates: the general theorem an exported run instantiates.

    A skeleton run of rank r measures m = u^T W b on two-token probes [b + t u; b]: on the
    basis columns b_0 .. b_{r-1} (the columns C = W B) and on the pivot rows u_{s_0} ..
    u_{s_{r-1}} of the design (the rows R = U_S^T W). With C and R as 2dr unknowns, each
    learning probe is one linear equation, and the cross U_S^T C = R B adds r^2 more.
    [lowrank_identified] says, for every d and r: if the finite checks over Q pass
    ([check_lowrank], run by computation: each probe's role, the certified W's measurements,
    a left inverse of the equations, W = (W B) X, and an inverse of the pivot block
    U_S^T W B), then every W' whose columns are spanned by its measured columns W' B and
    that has the recorded measurements is the certified W ([Skeleton.skeleton_determines]).
    The certified W itself has every recorded measurement, the rank checks included. *)

From Coq Require Import Reals QArith Qreals Lra Lia List Bool.
From VerifiedAttn Require Import Defs Skeleton CertHead.
Import ListNotations.
Open Scope R_scope.

(** ** Sums over Q kept in lowest terms, and their meaning over R. *)

Fixpoint qsumr (n : nat) (f : nat -> Q) : Q :=
  match n with O => 0%Q | S k => Qred (qsumr k f + f k) end.

Lemma Q2R_red : forall x, Q2R (Qred x) = Q2R x.
Proof. intros. apply Qeq_eqR, Qred_correct. Qed.

Lemma Q2R_qsumr : forall n f, Q2R (qsumr n f) = sum n (fun k => Q2R (f k)).
Proof.
  induction n as [|n IH]; intros f; cbn [qsumr sum].
  - unfold Q2R. simpl. lra.
  - rewrite Q2R_red, Q2R_plus, IH. reflexivity.
Qed.

Lemma Q2R_0 : Q2R 0 = 0.
Proof. unfold Q2R. simpl. lra. Qed.

Definition qmm (n : nat) (A B : qmat) : qmat := fun i j => qsumr n (fun k => Qred (A i k * B k j)).
Definition qtr (A : qmat) : qmat := fun i j => A j i.

Lemma Q2R_qmm : forall n A B i j, Q2R (qmm n A B i j) = mat_mul n (rmat A) (rmat B) i j.
Proof.
  intros. unfold qmm, mat_mul, rmat. rewrite Q2R_qsumr. apply sum_ext. intros.
  rewrite Q2R_red, Q2R_mult. reflexivity.
Qed.

Lemma qmm_mul_l : forall n m A B X i j,
  mat_mul m (rmat (qmm n A B)) X i j = mat_mul m (mat_mul n (rmat A) (rmat B)) X i j.
Proof.
  intros. unfold mat_mul at 1 2. apply sum_ext. intros k Hk. f_equal. apply Q2R_qmm.
Qed.

Lemma pivot_block : forall d r Ninv US W B a b,
  Q2R (qmm r Ninv (qmm d (qtr US) (qmm d W B)) a b) =
  mat_mul r (rmat Ninv) (mat_mul d (transpose (rmat US)) (mat_mul d (rmat W) (rmat B))) a b.
Proof.
  intros. rewrite Q2R_qmm. apply mat_mul_ext_r. intros k Hk.
  change (rmat (qmm d (qtr US) (qmm d W B)) k b) with (Q2R (qmm d (qtr US) (qmm d W B) k b)).
  rewrite Q2R_qmm. apply mat_mul_ext_r. intros l Hl. apply Q2R_qmm.
Qed.

(** ** Probes and their measurements. *)

(** A probe [b + t u; b], decoded to its measurement m = u^T W b. *)
Record probe := { pu : qvec; pb : qvec; pm : Q }.

Definition measure (d : nat) (W : mat) (u b : vec) : R := dot d u (mat_vec d W b).

Definition measures (d : nat) (W : mat) (ps : list probe) : Prop :=
  Forall (fun p => measure d W (rvec (pu p)) (rvec (pb p)) = Q2R (pm p)) ps.

(** W's columns are spanned by its measured columns W B (B is d x r): rank W <= r, and
    W B carries all of it. *)
Definition spanned (d r : nat) (B W : mat) : Prop :=
  exists X : mat, forall i j, (i < d)%nat -> (j < d)%nat -> W i j = mat_mul r (mat_mul d W B) X i j.

Definition qmeasure (d : nat) (W : qmat) (u b : qvec) : Q :=
  qsumr d (fun a => Qred (u a * qsumr d (fun c => Qred (W a c * b c)))).

Lemma Q2R_qmeasure : forall d W u b,
  Q2R (qmeasure d W u b) = measure d (rmat W) (rvec u) (rvec b).
Proof.
  intros. unfold qmeasure, measure, dot, mat_vec, rmat, rvec. rewrite Q2R_qsumr.
  apply sum_ext. intros a Ha. rewrite Q2R_red, Q2R_mult, Q2R_qsumr. f_equal.
  apply sum_ext. intros. rewrite Q2R_red, Q2R_mult. reflexivity.
Qed.

(** ** Linear equations in the unknowns C (d x r) and R (r x d). *)

Record eqn := { eP : qmat; eQ : qmat; erhs : Q }.

Definition eval (d r : nat) (e : eqn) (C Rm : mat) : R :=
  sum d (fun a => sum r (fun j => Q2R (eP e a j) * C a j)) +
  sum r (fun k => sum d (fun c => Q2R (eQ e k c) * Rm k c)).

Definition holds (d r : nat) (C Rm : mat) (e : eqn) : Prop := eval d r e C Rm = Q2R (erhs e).

Definition zero_eqn : eqn := {| eP := fun _ _ => 0%Q; eQ := fun _ _ => 0%Q; erhs := 0%Q |}.

Definition axpy (x : Q) (e f : eqn) : eqn := {|
  eP := fun i j => Qred (x * eP e i j + eP f i j);
  eQ := fun i j => Qred (x * eQ e i j + eQ f i j);
  erhs := Qred (x * erhs e + erhs f) |}.

(** [comb l es]: the combination sum_e l_e es_e of the equations. *)
Fixpoint comb (l : list Q) (es : list eqn) : eqn :=
  match l, es with
  | x :: l', e :: es' => axpy x e (comb l' es')
  | _, _ => zero_eqn
  end.

Lemma sum2_lin : forall n m (a : R) (f g : nat -> nat -> R),
  sum n (fun i => sum m (fun j => a * f i j + g i j)) =
  a * sum n (fun i => sum m (fun j => f i j)) + sum n (fun i => sum m (fun j => g i j)).
Proof.
  intros. rewrite <- sum_scal_l, <- sum_plus. apply sum_ext. intros.
  rewrite <- sum_scal_l, <- sum_plus. reflexivity.
Qed.

Lemma sum2_zero : forall n m (f : nat -> nat -> R),
  (forall i j, (i < n)%nat -> (j < m)%nat -> f i j = 0) -> sum n (fun i => sum m (fun j => f i j)) = 0.
Proof. intros. apply sum_zero. intros. apply sum_zero. intros. auto. Qed.

Lemma eval_axpy : forall d r C Rm x e f,
  eval d r (axpy x e f) C Rm = Q2R x * eval d r e C Rm + eval d r f C Rm.
Proof.
  intros. unfold eval, axpy. cbn [eP eQ].
  rewrite (sum_ext d _ (fun a => sum r (fun j => Q2R x * (Q2R (eP e a j) * C a j) +
                                                Q2R (eP f a j) * C a j))).
  2: { intros. apply sum_ext. intros. rewrite Q2R_red, Q2R_plus, Q2R_mult. ring. }
  rewrite (sum_ext r _ (fun k => sum d (fun c => Q2R x * (Q2R (eQ e k c) * Rm k c) +
                                                Q2R (eQ f k c) * Rm k c))).
  2: { intros. apply sum_ext. intros. rewrite Q2R_red, Q2R_plus, Q2R_mult. ring. }
  rewrite !sum2_lin. ring.
Qed.

Lemma holds_comb : forall d r C Rm l es, Forall (holds d r C Rm) es -> holds d r C Rm (comb l es).
Proof.
  intros d r C Rm l. induction l as [|x l IH]; intros [|e es] F;
    try (unfold holds, eval, comb, zero_eqn; cbn [eP eQ erhs];
         rewrite !sum2_zero by (intros; rewrite Q2R_0; ring); rewrite Q2R_0; ring).
  inversion F as [|? ? He Fs]; subst. specialize (IH es Fs).
  change (comb (x :: l) (e :: es)) with (axpy x e (comb l es)).
  unfold holds in *. rewrite eval_axpy, He, IH. unfold axpy. cbn [erhs].
  rewrite Q2R_red, Q2R_plus, Q2R_mult. reflexivity.
Qed.

(** ** The equations of a run: one per learning probe, and the cross. *)

(** A learning probe's role: [inl j], b is basis column j; [inr k], u is pivot row k. *)
Definition role := (nat + nat)%type.

Definition kron_col (j : nat) (u : qvec) : qmat := fun a j' => if Nat.eqb j' j then u a else 0%Q.
Definition kron_row (k : nat) (b : qvec) : qmat := fun k' c => if Nat.eqb k' k then b c else 0%Q.
Definition zmat : qmat := fun _ _ => 0%Q.

Definition probe_eqn (p : probe * role) : eqn :=
  match snd p with
  | inl j => {| eP := kron_col j (pu (fst p)); eQ := zmat; erhs := pm (fst p) |}
  | inr k => {| eP := zmat; eQ := kron_row k (pb (fst p)); erhs := pm (fst p) |}
  end.

(** (U_S^T C)_kj - (R B)_kj = 0. *)
Definition cross_eqn (B US : qmat) (k j : nat) : eqn :=
  {| eP := kron_col j (fun a => US a k); eQ := kron_row k (fun c => Qopp (B c j)); erhs := 0%Q |}.

Definition cross_eqns (r : nat) (B US : qmat) : list eqn :=
  flat_map (fun k => map (cross_eqn B US k) (seq 0 r)) (seq 0 r).

Definition role_ok (d r : nat) (B US : qmat) (p : probe * role) : bool :=
  match snd p with
  | inl j => Nat.ltb j r && all_lt d (fun c => Qeq_bool (pb (fst p) c) (B c j))
  | inr k => Nat.ltb k r && all_lt d (fun a => Qeq_bool (pu (fst p) a) (US a k))
  end.

Lemma sum_pick : forall n j (g : nat -> R) (f : nat -> R), (j < n)%nat ->
  sum n (fun j' => (if Nat.eqb j' j then g j' else 0) * f j') = g j * f j.
Proof.
  intros. rewrite (sum_single n j); [|assumption|].
  - rewrite Nat.eqb_refl. reflexivity.
  - intros k Hk Hne. apply Nat.eqb_neq in Hne. rewrite Hne. ring.
Qed.

Lemma Q2R_if : forall (c : bool) x y, Q2R (if c then x else y) = if c then Q2R x else Q2R y.
Proof. intros [|]; reflexivity. Qed.

(** The unknowns of a matrix W: its measured columns C = W B and pivot rows R = U_S^T W. *)
Definition cols (d : nat) (B : qmat) (W : mat) : mat := mat_mul d W (rmat B).
Definition rows (d : nat) (US : qmat) (W : mat) : mat := mat_mul d (transpose (rmat US)) W.

Lemma kron_col_eval : forall d r (C : mat) j u, (j < r)%nat ->
  sum d (fun a => sum r (fun j' => Q2R (kron_col j u a j') * C a j')) =
  sum d (fun a => Q2R (u a) * C a j).
Proof.
  intros. apply sum_ext. intros a Ha. unfold kron_col.
  rewrite (sum_ext r _ (fun j' => (if Nat.eqb j' j then Q2R (u a) else 0) * C a j'))
    by (intros; rewrite Q2R_if, Q2R_0; reflexivity).
  apply (sum_pick r j (fun _ => Q2R (u a)) (fun j' => C a j')). assumption.
Qed.

Lemma kron_row_eval : forall d r (R' : mat) k b, (k < r)%nat ->
  sum r (fun k' => sum d (fun c => Q2R (kron_row k b k' c) * R' k' c)) =
  sum d (fun c => Q2R (b c) * R' k c).
Proof.
  intros. unfold kron_row.
  rewrite (sum_swap r d (fun k' c => Q2R (if Nat.eqb k' k then b c else 0%Q) * R' k' c)).
  apply sum_ext. intros c Hc.
  rewrite (sum_ext r _ (fun k' => (if Nat.eqb k' k then Q2R (b c) else 0) * R' k' c))
    by (intros; rewrite Q2R_if, Q2R_0; reflexivity).
  apply (sum_pick r k (fun _ => Q2R (b c)) (fun k' => R' k' c)). assumption.
Qed.

Lemma zmat_eval : forall n m (F : mat), sum n (fun a => sum m (fun j => Q2R (zmat a j) * F a j)) = 0.
Proof. intros. apply sum2_zero. intros. unfold zmat. rewrite Q2R_0. ring. Qed.

Lemma probe_holds : forall d r B US W p, role_ok d r B US p = true ->
  measure d W (rvec (pu (fst p))) (rvec (pb (fst p))) = Q2R (pm (fst p)) ->
  holds d r (cols d B W) (rows d US W) (probe_eqn p).
Proof.
  intros d r B US W [p [j|k]] Hok Hm; unfold role_ok in Hok; simpl in Hok;
    apply andb_true_iff in Hok as [Hlt Hv]; apply Nat.ltb_lt in Hlt;
    unfold holds, eval, probe_eqn; cbn [snd fst eP eQ erhs] in *; rewrite <- Hm.
  - rewrite kron_col_eval by assumption. rewrite zmat_eval, Rplus_0_r.
    unfold measure, dot, mat_vec, rvec. apply sum_ext. intros a Ha. f_equal.
    unfold cols, mat_mul, rmat. apply sum_ext. intros c Hc.
    rewrite (qeq_spec _ _ (all_lt_spec _ _ Hv c Hc)). reflexivity.
  - rewrite kron_row_eval by assumption. rewrite zmat_eval, Rplus_0_l.
    unfold measure, dot, mat_vec, rvec, rows, mat_mul, transpose, rmat.
    rewrite (sum_ext d (fun c => Q2R (pb p c) * _)
               (fun c => sum d (fun a => Q2R (US a k) * W a c * Q2R (pb p c))))
      by (intros; rewrite <- sum_scal_l; apply sum_ext; intros; ring).
    rewrite sum_swap. apply sum_ext. intros a Ha.
    rewrite (qeq_spec _ _ (all_lt_spec _ _ Hv a Ha)), <- sum_scal_l.
    apply sum_ext. intros. ring.
Qed.

Lemma cross_holds : forall d r B US W k j, (k < r)%nat -> (j < r)%nat ->
  holds d r (cols d B W) (rows d US W) (cross_eqn B US k j).
Proof.
  intros d r B US W k j Hk Hj. unfold holds, eval, cross_eqn; simpl.
  rewrite kron_col_eval, kron_row_eval by assumption. rewrite Q2R_0.
  unfold cols, rows, mat_mul, transpose, rmat.
  rewrite (sum_ext d (fun c => Q2R (Qopp _) * _)
             (fun c => - sum d (fun a => Q2R (US a k) * (W a c * Q2R (B c j)))))
    by (intros; rewrite Q2R_opp, <- sum_scal_l, <- sum_opp;
        apply sum_ext; intros; ring).
  rewrite sum_opp, sum_swap.
  rewrite (sum_ext d (fun a => Q2R (US a k) * _)
             (fun a => sum d (fun c => Q2R (US a k) * (W a c * Q2R (B c j)))))
    by (intros; rewrite <- sum_scal_l; reflexivity).
  ring.
Qed.

(** ** A run's certificate and its checks. *)

Record lowrank_cert := {
  ld : nat; lr : nat;
  lB : qmat;                      (** d x r: column j is the basis column b_j *)
  lUS : qmat;                     (** d x r: column k is the design column u_{s_k} *)
  llearn : list (probe * role);   (** the learning probes and their roles *)
  lchecks : list probe;           (** the rank checks (not equations) *)
  lW : qmat; lv : qvec;           (** the certified head (W, v) *)
  lvans : qvec;                   (** the recorded answers to [e_i] *)
  lX : qmat; lNinv : qmat;        (** W = (W B) X; Ninv (U_S^T W B) = I *)
  lLC : list (list Q);            (** row a r + j: the combination giving C a j *)
  lLR : list (list Q)             (** row k d + c: the combination giving R k c *)
}.

Definition equations (L : lowrank_cert) : list eqn :=
  map probe_eqn (llearn L) ++ cross_eqns (lr L) (lB L) (lUS L).

Definition unit_check (d r : nat) (e : eqn) (onC : bool) (x y : nat) : bool :=
  all_lt d (fun a => all_lt r (fun j =>
    Qeq_bool (eP e a j) (if onC && Nat.eqb a x && Nat.eqb j y then 1 else 0)%Q)) &&
  all_lt r (fun k => all_lt d (fun c =>
    Qeq_bool (eQ e k c) (if negb onC && Nat.eqb k x && Nat.eqb c y then 1 else 0)%Q)).

Definition check_lowrank (L : lowrank_cert) : bool :=
  let d := ld L in let r := lr L in let es := equations L in
  all_lt d (fun i => Qeq_bool (lv L i) (lvans L i)) &&
  forallb (role_ok d r (lB L) (lUS L)) (llearn L) &&
  forallb (fun p => Qeq_bool (qmeasure d (lW L) (pu p) (pb p)) (pm p))
    (map fst (llearn L) ++ lchecks L) &&
  all_lt d (fun a => all_lt r (fun j =>
    unit_check d r (comb (nth (a * r + j) (lLC L) []) es) true a j)) &&
  all_lt r (fun k => all_lt d (fun c =>
    unit_check d r (comb (nth (k * d + c) (lLR L) []) es) false k c)) &&
  all_lt d (fun i => all_lt d (fun j =>
    Qeq_bool (lW L i j) (qmm r (qmm d (lW L) (lB L)) (lX L) i j))) &&
  all_lt r (fun a => all_lt r (fun b =>
    Qeq_bool (qmm r (lNinv L) (qmm d (qtr (lUS L)) (qmm d (lW L) (lB L))) a b)
             (if Nat.eqb a b then 1 else 0)%Q)).

Lemma sum2_unit : forall n m (P : nat -> nat -> R) (F : mat) x y,
  (x < n)%nat -> (y < m)%nat ->
  (forall a j, (a < n)%nat -> (j < m)%nat ->
     P a j = if Nat.eqb a x && Nat.eqb j y then 1 else 0) ->
  sum n (fun a => sum m (fun j => P a j * F a j)) = F x y.
Proof.
  intros n m P F x y Hx Hy HP. rewrite (sum_single n x); [|assumption|].
  - rewrite (sum_single m y); [|assumption|].
    + rewrite HP, !Nat.eqb_refl by assumption. simpl. ring.
    + intros j Hj Hne. rewrite HP by assumption. apply Nat.eqb_neq in Hne. rewrite Hne.
      rewrite andb_false_r. ring.
  - intros a Ha Hne. apply sum_zero. intros j Hj. rewrite HP by assumption.
    apply Nat.eqb_neq in Hne. rewrite Hne. simpl. ring.
Qed.

Lemma unit_check_C : forall d r e (C Rm : mat) a j, (a < d)%nat -> (j < r)%nat ->
  unit_check d r e true a j = true -> holds d r C Rm e -> C a j = Q2R (erhs e).
Proof.
  intros d r e C Rm a j Ha Hj Hu He. unfold unit_check in Hu.
  apply andb_true_iff in Hu as [HP HQ]. unfold holds, eval in He. rewrite <- He.
  rewrite (sum2_unit d r _ C a j Ha Hj).
  - rewrite sum2_zero; [ring|]. intros k c Hk Hc.
    rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HQ k Hk) c Hc)). simpl. rewrite Q2R_0. ring.
  - intros a' j' Ha' Hj'. rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HP a' Ha') j' Hj')).
    simpl. destruct (Nat.eqb a' a && Nat.eqb j' j); [unfold Q2R; simpl; lra|apply Q2R_0].
Qed.

Lemma unit_check_R : forall d r e (C Rm : mat) k c, (k < r)%nat -> (c < d)%nat ->
  unit_check d r e false k c = true -> holds d r C Rm e -> Rm k c = Q2R (erhs e).
Proof.
  intros d r e C Rm k c Hk Hc Hu He. unfold unit_check in Hu.
  apply andb_true_iff in Hu as [HP HQ]. unfold holds, eval in He. rewrite <- He.
  rewrite (sum2_unit r d _ Rm k c Hk Hc).
  - rewrite sum2_zero; [ring|]. intros a j Ha Hj.
    rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HP a Ha) j Hj)). simpl. rewrite Q2R_0. ring.
  - intros k' c' Hk' Hc'. rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HQ k' Hk') c' Hc')).
    simpl. destruct (Nat.eqb k' k && Nat.eqb c' c); [unfold Q2R; simpl; lra|apply Q2R_0].
Qed.

Lemma forallb_Forall : forall A (f : A -> bool) (P : A -> Prop) l,
  (forall x, f x = true -> P x) -> forallb f l = true -> Forall P l.
Proof.
  intros A f P l H Hf. apply Forall_forall. intros x Hx. apply H.
  rewrite forallb_forall in Hf. auto.
Qed.

(** Both sides of every equation hold for any W with the recorded measurements. *)
Lemma equations_hold : forall L (W : mat),
  forallb (role_ok (ld L) (lr L) (lB L) (lUS L)) (llearn L) = true ->
  measures (ld L) W (map fst (llearn L)) ->
  Forall (holds (ld L) (lr L) (cols (ld L) (lB L) W) (rows (ld L) (lUS L) W)) (equations L).
Proof.
  intros L W Hroles Hm. unfold equations. apply Forall_app. split.
  - apply Forall_map. unfold measures in Hm. rewrite Forall_map in Hm.
    rewrite Forall_forall in Hm |- *. intros p Hp. apply probe_holds.
    + rewrite forallb_forall in Hroles. auto.
    + auto.
  - apply Forall_forall. intros e He. unfold cross_eqns in He.
    apply in_flat_map in He as [k [Hk He]]. apply in_map_iff in He as [j [<- Hj]].
    apply in_seq in Hk, Hj. apply cross_holds; lia.
Qed.

(** The head's answers to the length-1 sequences [e_i] are the recorded ones. *)
Definition answers_v (d : nat) (W : mat) (v : vec) (vans : qvec) : Prop :=
  forall i, (i < d)%nat -> attention d 1 (query_v i) W v = Q2R (vans i).

Theorem lowrank_W : forall L, check_lowrank L = true ->
  measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L) /\
  spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L)) /\
  forall W' : mat, spanned (ld L) (lr L) (rmat (lB L)) W' ->
    measures (ld L) W' (map fst (llearn L)) ->
    forall i j, (i < ld L)%nat -> (j < ld L)%nat -> W' i j = rmat (lW L) i j.
Proof.
  intros L H. unfold check_lowrank in H. cbv zeta in H.
  repeat rewrite andb_true_iff in H. destruct H as [[[[[[_ Hroles] Hmeas] HC] HR] HX] HN].
  assert (Hmc : measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L)).
  { apply (forallb_Forall _ _ _ _ (fun p E => eq_trans (eq_sym (Q2R_qmeasure _ _ _ _)) (qeq_spec _ _ E)) Hmeas). }
  assert (Hsp : spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L))).
  { exists (rmat (lX L)). intros i j Hi Hj.
    unfold rmat at 1. rewrite (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HX i Hi) j Hj)).
    rewrite Q2R_qmm. apply qmm_mul_l. }
  split; [exact Hmc|]. split; [exact Hsp|].
  intros W' [X' HW'] Hm' i j Hi Hj.
  assert (Hmc' : measures (ld L) (rmat (lW L)) (map fst (llearn L))).
  { unfold measures in *. apply Forall_app in Hmc. apply Hmc. }
  pose proof (equations_hold L _ Hroles Hmc') as E. pose proof (equations_hold L _ Hroles Hm') as E'.
  unfold cols, rows in E, E'.
  destruct Hsp as [X HW].
  symmetry. apply (skeleton_determines (ld L) (lr L) (rmat (lW L)) W' (rmat (lB L)) (rmat (lUS L))
                     (rmat (lNinv L)) X X' HW HW').
  - intros a b Ha Hb.
    pose proof (all_lt_spec _ _ (all_lt_spec _ _ HC a Ha) b Hb) as U.
    rewrite (unit_check_C _ _ _ _ _ a b Ha Hb U (holds_comb _ _ _ _ _ _ E)).
    rewrite (unit_check_C _ _ _ _ _ a b Ha Hb U (holds_comb _ _ _ _ _ _ E')). reflexivity.
  - intros a b Ha Hb.
    pose proof (all_lt_spec _ _ (all_lt_spec _ _ HR a Ha) b Hb) as U.
    rewrite (unit_check_R _ _ _ _ _ a b Ha Hb U (holds_comb _ _ _ _ _ _ E)).
    rewrite (unit_check_R _ _ _ _ _ a b Ha Hb U (holds_comb _ _ _ _ _ _ E')). reflexivity.
  - intros a b Ha Hb. pose proof (qeq_spec _ _ (all_lt_spec _ _ (all_lt_spec _ _ HN a Ha) b Hb)) as N.
    rewrite pivot_block, Q2R_if in N. rewrite N. unfold identity.
    destruct (Nat.eq_dec a b) as [<-|Hne].
    + rewrite Nat.eqb_refl. unfold Q2R. simpl. lra.
    + apply Nat.eqb_neq in Hne. rewrite Hne. apply Q2R_0.
  - exact Hi.
  - exact Hj.
Qed.

Theorem lowrank_identified : forall L, check_lowrank L = true ->
  answers_v (ld L) (rmat (lW L)) (rvec (lv L)) (lvans L) /\
  measures (ld L) (rmat (lW L)) (map fst (llearn L) ++ lchecks L) /\
  spanned (ld L) (lr L) (rmat (lB L)) (rmat (lW L)) /\
  forall (W' : mat) (v' : vec), spanned (ld L) (lr L) (rmat (lB L)) W' ->
    answers_v (ld L) W' v' (lvans L) -> measures (ld L) W' (map fst (llearn L)) ->
    same_head (ld L) (rmat (lW L)) (rvec (lv L)) W' v'.
Proof.
  intros L H. destruct (lowrank_W L H) as [Hm [Hs HW]].
  unfold check_lowrank in H. cbv zeta in H. repeat rewrite andb_true_iff in H.
  destruct H as [[[[[[Hv _] _] _] _] _] _].
  assert (Hv' : forall i, (i < ld L)%nat -> rvec (lv L) i = Q2R (lvans L i))
    by (intros i Hi; apply qeq_spec, (all_lt_spec _ _ Hv i Hi)).
  split; [|split; [exact Hm|split; [exact Hs|]]].
  - intros i Hi. rewrite answer_length1 by assumption. apply Hv', Hi.
  - intros W' v' HsW' Hans Hm'. split.
    + intros i j Hi Hj. apply HW; assumption.
    + intros i Hi. rewrite Hv' by assumption. rewrite <- (Hans i Hi).
      rewrite answer_length1 by assumption. reflexivity.
Qed.
