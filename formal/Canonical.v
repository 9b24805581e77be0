(** * Proposition 7.1's canonical form: models with the same canonical form are one map.

    [canonical_same_map]: for every d, every pair of multi-head models hs, hs' (any number
    of heads, real parameters), if for the W of every head of either model the two models'
    summed v over the heads whose W equals it (below d) agree, then the two models give
    the same output on every sequence X of every length N. The canonical form of a model
    is this map W |-> summed v (heads grouped by W, zero sums dropped); the four Prop 7.1
    families are special cases. *)

From Coq Require Import Reals Lra Lia List Bool.
From VerifiedAttn Require Import Defs Prop71 CertHead CertPair.
Import ListNotations.
Open Scope R_scope.

(** W and W' agree on every entry below d (decided with the reals' order). *)
Definition wagree (d : nat) (W W' : mat) : bool :=
  all_lt d (fun i => all_lt d (fun j => if Req_EM_T (W i j) (W' i j) then true else false)).

Lemma wagree_spec : forall d W W', wagree d W W' = true <->
  forall i j, (i < d)%nat -> (j < d)%nat -> W i j = W' i j.
Proof.
  intros d W W'. split.
  - intros H i j Hi Hj. pose proof (all_lt_spec _ _ (all_lt_spec _ _ H i Hi) j Hj) as E.
    cbv beta in E. destruct (Req_EM_T (W i j) (W' i j)); [assumption|discriminate].
  - intros H. unfold wagree.
    assert (A : forall n (p : nat -> bool), (forall i, (i < n)%nat -> p i = true) ->
              all_lt n p = true).
    { induction n as [|n IH]; intros p Hp; [reflexivity|]. simpl.
      rewrite IH; [rewrite Hp by lia; reflexivity|]. intros i Hi. apply Hp. lia. }
    apply A. intros i Hi. apply A. intros j Hj.
    destruct (Req_EM_T (W i j) (W' i j)) as [|n]; [reflexivity|]. exfalso. apply n, H; assumption.
Qed.

(** The summed v of the heads of hs whose W agrees with W0. *)
Fixpoint vsum (d : nat) (hs : list head) (W0 : mat) : vec :=
  match hs with
  | [] => zero_vec
  | (W, v) :: r => if wagree d W W0 then vadd v (vsum d r W0) else vsum d r W0
  end.

Definition others (d : nat) (W0 : mat) (hs : list head) : list head :=
  filter (fun h => negb (wagree d (fst h) W0)) hs.

Lemma split_group : forall d N X W0 hs,
  multi_head d N X hs = attention d N X W0 (vsum d hs W0) + multi_head d N X (others d W0 hs).
Proof.
  intros d N X W0. induction hs as [|[W v] r IH]; simpl.
  - rewrite attention_zero_v by reflexivity. ring.
  - destruct (wagree d W W0) eqn:E; simpl; rewrite IH.
    + rewrite <- attention_add_v.
      rewrite (attention_ext_W d N X W W0 v) by (apply wagree_spec; exact E). ring.
    + ring.
Qed.

Lemma vsum_others : forall d W0 W hs, wagree d W W0 = false ->
  forall i, vsum d (others d W0 hs) W i = vsum d hs W i.
Proof.
  intros d W0 W hs HW i. induction hs as [|[W1 v1] r IH]; [reflexivity|].
  unfold others in *. simpl. destruct (wagree d W1 W0) eqn:E1; simpl.
  - destruct (wagree d W1 W) eqn:E2; [|exact IH]. exfalso.
    rewrite wagree_spec in E1. rewrite wagree_spec in E2.
    assert (C : wagree d W W0 = true).
    { apply wagree_spec. intros a b Ha Hb. rewrite <- (E2 a b Ha Hb). apply E1; assumption. }
    congruence.
  - destruct (wagree d W1 W); [unfold vadd; rewrite IH; reflexivity|exact IH].
Qed.

Lemma filter_not_longer : forall (A : Type) (f : A -> bool) (l : list A),
  (length (filter f l) <= length l)%nat.
Proof. intros A f l. induction l as [|y l IH]; [simpl; lia|]. simpl. destruct (f y); simpl; lia. Qed.

Lemma filter_shorter : forall (A : Type) (f : A -> bool) x l, In x l -> f x = false ->
  (length (filter f l) < length l)%nat.
Proof.
  intros A f x l. induction l as [|y l IH]; intros Hin Hf; [destruct Hin|].
  simpl. pose proof (filter_not_longer _ f l) as L. destruct Hin as [->|Hin].
  - rewrite Hf. lia.
  - destruct (f y); simpl; specialize (IH Hin Hf); lia.
Qed.

Definition same_canonical (d : nat) (hs hs' : list head) : Prop :=
  forall W v, In (W, v) (hs ++ hs') -> forall i, (i < d)%nat -> vsum d hs W i = vsum d hs' W i.

Lemma canonical_fuel : forall d n hs hs', (length hs + length hs' <= n)%nat ->
  same_canonical d hs hs' -> forall N X, multi_head d N X hs = multi_head d N X hs'.
Proof.
  intros d n. induction n as [|n IH]; intros hs hs' L H N X.
  - destruct hs; [|simpl in L; lia]. destruct hs'; [reflexivity|simpl in L; lia].
  - destruct (hs ++ hs') as [|[W0 v0] l] eqn:E.
    + apply app_eq_nil in E as [-> ->]. reflexivity.
    + assert (In0 : In (W0, v0) (hs ++ hs')) by (rewrite E; left; reflexivity).
      assert (Self : wagree d W0 W0 = true) by (apply wagree_spec; reflexivity).
      rewrite (split_group d N X W0 hs), (split_group d N X W0 hs').
      rewrite (attention_ext_v d N X W0 (vsum d hs W0) (vsum d hs' W0)) by (apply (H W0 v0 In0)).
      f_equal. apply IH.
      * apply in_app_or in In0. unfold others.
        destruct In0 as [I|I];
          pose proof (filter_shorter _ (fun h => negb (wagree d (fst h) W0)) _ _ I
                        ltac:(simpl; rewrite Self; reflexivity));
          pose proof (filter_not_longer _ (fun h => negb (wagree d (fst h) W0)) hs);
          pose proof (filter_not_longer _ (fun h => negb (wagree d (fst h) W0)) hs'); unfold head in *; lia.
      * intros W v Hin i Hi. unfold others in Hin. apply in_app_or in Hin.
        assert (HW : wagree d W W0 = false /\ In (W, v) (hs ++ hs')).
        { destruct Hin as [Hin|Hin]; apply filter_In in Hin as [Hin Hf]; simpl in Hf;
            apply negb_true_iff in Hf; split; try exact Hf; apply in_or_app; auto. }
        destruct HW as [HW Hin'].
        rewrite !vsum_others by exact HW. apply (H W v Hin' i Hi).
Qed.

Theorem canonical_same_map : forall d (hs hs' : list head), same_canonical d hs hs' ->
  forall N X, multi_head d N X hs = multi_head d N X hs'.
Proof. intros d hs hs' H. apply (canonical_fuel d (length hs + length hs')); [lia|exact H]. Qed.
