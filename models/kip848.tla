------------------------------- MODULE kip848 -------------------------------
(***************************************************************************)
(* The TLA+ form of models/kip848.qnt: KIP-848's group/member protocol as  *)
(* the Python core implements it (shards/core/consumer/), one group, one   *)
(* topic, a few members. Written by hand from the Quint specification,     *)
(* action for action (quint compile --target tlaplus needs Apalache, which *)
(* cannot be downloaded here; see docs/model.md).                          *)
(*                                                                         *)
(* The coordinator keeps a group epoch and a target assignment, bumped and *)
(* recomputed when the membership changes (a join, a leave, a session      *)
(* timeout, a fenced member). Each member moves from its current           *)
(* assignment to its target one heartbeat at a time (the core's            *)
(* reconciliation.reconcile, Kafka's CurrentAssignmentBuilder): partitions *)
(* it must give up go pending revocation and it stays at its epoch         *)
(* (UNREVOKED_PARTITIONS) until it reports them gone; a target partition   *)
(* is given only once no other member holds it (else                     *)
(* UNRELEASED_PARTITIONS); otherwise it is STABLE at the target epoch. The *)
(* target is any split of the partitions among the members (every         *)
(* assignor). Answers may be lost: the consumer keeps what it had, and its *)
(* next heartbeat carries a stale epoch and is fenced.                     *)
(*                                                                         *)
(* Offset commits (KIP-1251): a consumer sends an OffsetCommit for a      *)
(* partition it holds at the epoch it last heard; it arrives later (at     *)
(* most MaxInFlight in flight), before any later request of the same       *)
(* consumer (one connection, answered in order). Accepted from a member at *)
(* its epoch, or at an older one for a partition held since at most that   *)
(* epoch (each held partition keeps its assignment epoch). A commit in     *)
(* flight carries a ghost flag: its member has held the partition since it *)
(* was sent without giving it up; CommitVerdict: accepted exactly then.    *)
(* With LateCommits, a consumer may also send a late commit: of any        *)
(* partition, at an epoch older than the one it last heard (a commit built *)
(* before it gave the partition up or moved on, sent from another thread   *)
(* -- the simulator's late commits); valid when its member holds the       *)
(* partition at an assignment epoch not above the commit's.               *)
(*                                                                         *)
(* The Quint file's history variables (prevGroupEpoch, prevEpochs,         *)
(* lastAction, actor) are not state here: the monotonicity invariants are  *)
(* action properties (GroupEpochMonotonic, MemberEpochMonotonic).          *)
(* kip848.cfg is a TLC configuration of the Quint model's world.           *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS Members, Partitions, MaxEpoch, MaxInFlight, LateCommits

VARIABLES
    groupEpoch,   \* the group epoch
    inGroup,      \* the members in the group
    target,       \* the target assignment of the members in the group, at groupEpoch
    members,      \* every member's record (NoMember when not in the group)
    owned,        \* what each consumer holds (client side)
    clientEpoch,  \* the epoch each consumer last got
    inflight      \* the OffsetCommits sent and not yet arrived

vars == <<groupEpoch, inGroup, target, members, owned, clientEpoch, inflight>>

\* a member's epochs: the assignment epoch of each held partition
NoEpochs == [p \in {} |-> 0]

NoMember == [epoch |-> 0, state |-> "STABLE", assigned |-> {}, pending |-> {},
             epochs |-> NoEpochs]

NoTarget == [m \in {} |-> {}]

(* ---- reconciliation (shards/core/consumer/reconciliation.py) ---- *)
HeldBy(ms, m) == ms[m].assigned \cup ms[m].pending

\* whether p is held by a member other than m
HeldByOther(ms, m, p) == \E o \in Members : o /= m /\ p \in HeldBy(ms, o)

Advance(ms, m, fromEpoch, tEpoch, tgt, reported) ==
    LET mem == ms[m]
        keep == mem.assigned \cap tgt
        revoke == mem.assigned \ tgt
        wanted == tgt \ mem.assigned
        gain == {p \in wanted : ~HeldByOther(ms, m, p)}
        unreleased == \E p \in wanted : HeldByOther(ms, m, p)
    IN IF revoke /= {} /\ (revoke \cap reported) /= {}
       THEN [epoch |-> fromEpoch, state |-> "UNREVOKED_PARTITIONS",
             assigned |-> keep, pending |-> revoke,
             epochs |-> [p \in keep \cup revoke |-> mem.epochs[p]]]
       ELSE [epoch |-> tEpoch,
             state |-> IF unreleased THEN "UNRELEASED_PARTITIONS" ELSE "STABLE",
             assigned |-> keep \cup gain, pending |-> {},
             epochs |-> [p \in keep \cup gain |-> IF p \in keep THEN mem.epochs[p] ELSE tEpoch]]

Reconcile(ms, m, tEpoch, tgt, reported) ==
    LET mem == ms[m]
    IN CASE mem.state = "STABLE" ->
                IF mem.epoch /= tEpoch
                THEN Advance(ms, m, mem.epoch, tEpoch, tgt, reported)
                ELSE mem
         [] mem.state = "UNREVOKED_PARTITIONS" ->
                IF (mem.pending \cap reported) /= {}
                THEN mem
                ELSE Advance(ms, m, mem.epoch, tEpoch, tgt, reported)
         [] OTHER -> Advance(ms, m, mem.epoch, tEpoch, tgt, reported)

(* ---- offset commits (ConsumerGroup.validate_offset_commit) ---- *)
\* accepted from a member in the group at its epoch, or at an older one for a partition
\* it holds since at most that epoch (KIP-1251)
Accepted(ms, group, c) ==
    /\ c.member \in group
    /\ \/ c.epoch = ms[c.member].epoch
       \/ /\ c.epoch < ms[c.member].epoch
          /\ c.partition \in HeldBy(ms, c.member)
          /\ ms[c.member].epochs[c.partition] <= c.epoch

\* the commits in flight as the records go from old to ms: one stays valid while its member
\* holds its partition without giving it up (leaving pending revocation)
StillHeld(old, ms, c) ==
    /\ c.partition \in HeldBy(ms, c.member)
    /\ ~(c.partition \in old[c.member].pending /\ c.partition \notin ms[c.member].pending)

Follow(cs, old, ms) == {[c EXCEPT !.valid = c.valid /\ StillHeld(old, ms, c)] : c \in cs}

\* m's earlier OffsetCommits have arrived (its requests are taken in order)
NoCommitOf(m) == \A c \in inflight : c.member /= m

(* ---- targets ---- *)
Split(group, owner) == [m \in group |-> {p \in Partitions : owner[p] = m}]

\* every target over group: each partition to any of its members
Targets(group) ==
    IF group = {} THEN {NoTarget}
    ELSE {Split(group, owner) : owner \in [Partitions -> group]}

(* ---- actions ---- *)
Init ==
    /\ groupEpoch = 0
    /\ inGroup = {}
    /\ target = NoTarget
    /\ members = [m \in Members |-> NoMember]
    /\ owned = [m \in Members |-> {}]
    /\ clientEpoch = [m \in Members |-> 0]
    /\ inflight = {}

\* m joins (epoch 0, owning nothing): a new group epoch and target; m reconciles at once
Join(m) ==
    /\ m \notin inGroup
    /\ NoCommitOf(m)
    /\ groupEpoch < MaxEpoch
    /\ owned[m] = {}
    /\ \E tgt \in Targets(inGroup \cup {m}) :
        LET mem == Reconcile(members, m, groupEpoch + 1, tgt[m], {})
        IN /\ groupEpoch' = groupEpoch + 1
           /\ inGroup' = inGroup \cup {m}
           /\ target' = tgt
           /\ members' = [members EXCEPT ![m] = mem]
           /\ owned' = [owned EXCEPT ![m] = mem.assigned]
           /\ clientEpoch' = [clientEpoch EXCEPT ![m] = mem.epoch]
           /\ inflight' = Follow(inflight, members, [members EXCEPT ![m] = mem])

\* m heartbeats at its epoch with what it owns and is reconciled; the answer may be lost
\* (the consumer then keeps what it had, and its epoch)
Heartbeat(m) ==
    /\ m \in inGroup
    /\ NoCommitOf(m)
    /\ clientEpoch[m] = members[m].epoch
    /\ LET mem == Reconcile(members, m, groupEpoch, target[m], owned[m])
       IN /\ members' = [members EXCEPT ![m] = mem]
          /\ inflight' = Follow(inflight, members, [members EXCEPT ![m] = mem])
          /\ \/ /\ owned' = [owned EXCEPT ![m] = mem.assigned]
                /\ clientEpoch' = [clientEpoch EXCEPT ![m] = mem.epoch]
             \/ UNCHANGED <<owned, clientEpoch>>
    /\ UNCHANGED <<groupEpoch, inGroup, target>>

\* m's record goes; a new epoch and target for the others; the consumer is left holding
\* ownedAfter at epochAfter
Remove(m, ownedAfter, epochAfter) ==
    /\ m \in inGroup
    /\ groupEpoch < MaxEpoch
    /\ \E tgt \in Targets(inGroup \ {m}) :
        /\ groupEpoch' = groupEpoch + 1
        /\ inGroup' = inGroup \ {m}
        /\ target' = tgt
    /\ members' = [members EXCEPT ![m] = NoMember]
    /\ owned' = [owned EXCEPT ![m] = ownedAfter]
    /\ clientEpoch' = [clientEpoch EXCEPT ![m] = epochAfter]
    /\ inflight' = Follow(inflight, members, [members EXCEPT ![m] = NoMember])

\* graceful leave (epoch -1): the consumer gives everything up
Leave(m) == NoCommitOf(m) /\ Remove(m, {}, 0)

\* the session times out: the consumer may still believe it holds its partitions, at its
\* epoch (a zombie)
SessionTimeout(m) == Remove(m, owned[m], clientEpoch[m])

\* a heartbeat at a stale epoch (its last answer was lost) is fenced: the consumer gives
\* everything up and must rejoin from epoch 0
Fenced(m) ==
    /\ clientEpoch[m] /= members[m].epoch
    /\ NoCommitOf(m)
    /\ Remove(m, {}, 0)

\* a zombie (no longer in the group) hears it on its next call and gives everything up
ZombieFenced(m) ==
    /\ m \notin inGroup
    /\ owned[m] /= {}
    /\ NoCommitOf(m)
    /\ owned' = [owned EXCEPT ![m] = {}]
    /\ clientEpoch' = [clientEpoch EXCEPT ![m] = 0]
    /\ UNCHANGED <<groupEpoch, inGroup, target, members, inflight>>

\* the consumer sends an OffsetCommit for a partition it holds, at the epoch it last heard
SendCommit(m, p) ==
    /\ p \in owned[m]
    /\ Cardinality(inflight) < MaxInFlight
    /\ LET c == [member |-> m, partition |-> p, epoch |-> clientEpoch[m],
                  valid |-> p \in HeldBy(members, m)]
       IN /\ \A o \in inflight : ~(o.member = m /\ o.partition = p /\ o.epoch = c.epoch)
          /\ inflight' = inflight \cup {c}
    /\ UNCHANGED <<groupEpoch, inGroup, target, members, owned, clientEpoch>>

\* (LateCommits) the consumer sends a late OffsetCommit: of any partition p, at an epoch e
\* older than the one it last heard; valid when its member holds p (as the coordinator
\* counts it) at an assignment epoch not above e
SendLateCommit(m, p, e) ==
    /\ LateCommits
    /\ NoCommitOf(m)
    /\ Cardinality(inflight) < MaxInFlight
    /\ e < clientEpoch[m]
    /\ LET c == [member |-> m, partition |-> p, epoch |-> e,
                  valid |-> IF p \in HeldBy(members, m)
                            THEN members[m].epochs[p] <= e
                            ELSE FALSE]
       IN inflight' = inflight \cup {c}
    /\ UNCHANGED <<groupEpoch, inGroup, target, members, owned, clientEpoch>>

\* a commit in flight arrives, accepted or refused (Accepted); nothing of the group changes
DeliverCommit(c) ==
    /\ inflight' = inflight \ {c}
    /\ UNCHANGED <<groupEpoch, inGroup, target, members, owned, clientEpoch>>

Next ==
    \/ \E m \in Members :
        \/ Join(m)
        \/ Heartbeat(m)
        \/ Leave(m)
        \/ SessionTimeout(m)
        \/ Fenced(m)
        \/ ZombieFenced(m)
        \/ \E p \in Partitions : SendCommit(m, p)
        \/ \E p \in Partitions, e \in 1..MaxEpoch : SendLateCommit(m, p, e)
    \/ \E c \in inflight : DeliverCommit(c)

Spec == Init /\ [][Next]_vars

(* ---- invariants ---- *)
\* no partition held by two members at once, as the coordinator assigns it
Exclusive ==
    \A m1, m2 \in Members :
        m1 /= m2 => HeldBy(members, m1) \cap HeldBy(members, m2) = {}

MemberEpochNotAboveGroup == \A m \in Members : members[m].epoch <= groupEpoch

\* what a consumer in the group holds, the coordinator counts as its (assigned or pending)
ConsumerWithinCoordinator == \A m \in inGroup : owned[m] \subseteq HeldBy(members, m)

PendingOnlyWhenUnrevoked ==
    \A m \in Members :
        members[m].state = "UNREVOKED_PARTITIONS" \/ members[m].pending = {}

OnlyMembersHold == \A m \in Members : m \in inGroup \/ HeldBy(members, m) = {}

\* the target splits every partition among the members of the group
TargetCovers ==
    inGroup = {} \/ \A p \in Partitions : \E m \in inGroup : p \in target[m]

\* every held partition has an assignment epoch, at most the member's epoch
EpochsOfHeld ==
    \A m \in Members :
        /\ DOMAIN members[m].epochs = HeldBy(members, m)
        /\ \A p \in DOMAIN members[m].epochs : members[m].epochs[p] <= members[m].epoch

\* KIP-1251: a commit in flight would be accepted exactly when it is valid
CommitVerdict == \A c \in inflight : Accepted(members, inGroup, c) = c.valid

AllInvariants ==
    /\ Exclusive
    /\ MemberEpochNotAboveGroup
    /\ ConsumerWithinCoordinator
    /\ PendingOnlyWhenUnrevoked
    /\ OnlyMembersHold
    /\ TargetCovers
    /\ EpochsOfHeld
    /\ CommitVerdict

(* ---- action properties (the Quint model's monotonicity invariants) ---- *)
GroupEpochStep == groupEpoch' >= groupEpoch

\* a member's epoch never goes back while it stays in the group (0 again on rejoin)
MemberEpochStep ==
    \A m \in Members : members'[m] = NoMember \/ members'[m].epoch >= members[m].epoch

GroupEpochMonotonic == [][GroupEpochStep]_vars
MemberEpochMonotonic == [][MemberEpochStep]_vars
=============================================================================
