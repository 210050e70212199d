/*
 * The kured-host slot protocol (docs/claims.md), for the spin model checker.
 *
 * Four nodes in two zones (nodes 0 and 1 in zone 0, nodes 2 and 3 in zone 1).
 * Node 0 is configured with concurrency 1, the others with 2 (a
 * configuration being rolled out), and every node with the group rule "at
 * most 1 per zone"; a claim publishes its node's configuration. Each node
 * owns one register (its Node object): the claim's state, and whether the
 * node has rebooted since it took its slot (the boot ID recorded in the
 * claim differs from the current one). The queue order (`since`, then the
 * name) is the node number here: safety never depends on the order, and a
 * fixed order keeps the state space small.
 *
 * Reads of all registers are atomic snapshots (a consistent List). The
 * owner's writes are conditional (a resourceVersion precondition): a write
 * fails if anything else wrote the register since the owner last read it.
 * Nodes crash at any step and restart from their register (a consistent GET);
 * a commit's reply may be lost while the write is still in flight; an admin
 * may remove an `entering` claim by hand. Eligibility (who tries) comes from
 * a watch cache that may be stale, so for safety any waiting node may
 * announce at any time; the exact eligibility rule is used for liveness.
 *
 * Safety, checked in every reachable state by the monitor: every holder is
 * in a cluster with no more holders than the limit it published, and in a
 * zone with at most one holder; a node is disrupted (cordoned, drained,
 * rebooting) only while its register says holding.
 *
 * An admin may also edit an entering claim's label alone back to waiting
 * (the annotation still says entering): the verify must see that its own
 * claim is no longer the entering one it announced. Under LIVENESS a node
 * that would commit or stay also gives way (steps back) to a waiting node
 * ahead of it that could go now, with only itself counted as waiting
 * (Yield). CONFIG2 is a second configuration in which the global limit
 * binds on its own: every node at concurrency 2, one per zone, three zones.
 *
 * Build variants (spin -D...):
 *   STALE_VERIFY     verify from the snapshot taken before announcing
 *   STALE_OWN        verify trusts the claim it remembers, not the one in its
 *                    snapshot, and re-bases its next write on the snapshot
 *                    (an admin's edit of the label alone goes unseen)
 *   NO_GLOBAL        verify checks only the zone limit, not the cluster's
 *   IGNORE_ENTERING  verify counts only holding claims, not entering ones
 *   NO_STRICTEST     verify uses only the node's own limit
 *   UNCONDITIONAL    writes ignore intervening writes (no precondition)
 *   NO_STAY          an entering node steps back on any conflict, even with
 *                    claims behind it (no longer a livelock here: with the
 *                    waiting claimants' limits binding, exact eligibility
 *                    and verify agree)
 *   LOOSE            (with LIVENESS) a node is eligible when it fits with the
 *                    active claims, whatever the queue before it
 *   LIVENESS         no crashes, no lost replies, no admin: for the
 *                    progress property (every node ends rebooted and released)
 *   MAXCRASH, MAXLOST, MAXADMIN, MAXEDIT  bounds on the faults (defaults
 *                    2, 1, 1, 0)
 */

#define N 4

#define NONE     0
#define WAITING  1
#define ENTERING 2
#define HOLDING  3

/* program counter of a node */
#define START      0
#define IDLE       1
#define WAIT       2
#define VERIFY     3
#define ANNOUNCE   10
#define COMMITTING 4
#define STEPBACK   5
#define WORK       6
#define REBOOT     7
#define RELEASE    8
#define END        9

#ifdef LIVENESS
#define MAXCRASH 0
#define MAXLOST  0
#define MAXADMIN 0
#define MAXEDIT  0
#endif
#ifndef MAXCRASH
#define MAXCRASH 2
#endif
#ifndef MAXLOST
#define MAXLOST 1
#endif
#ifndef MAXADMIN
#define MAXADMIN 1
#endif
#ifndef MAXEDIT
#define MAXEDIT 0
#endif

byte zone[N];
byte limit[N];       /* configured = published concurrency */

/* the registers */
byte rstate[N];
bool rrebooted[N];

/* bookkeeping for conditional writes and writes in flight */
bool touched[N];     /* someone other than the owner wrote the register since the owner read it */
bool pend[N];        /* a commit whose reply was lost, still in flight */
bool pendValid[N];   /* its precondition still holds: nothing written since it was sent */

byte crashes = 0;
byte lost = 0;
byte admins = 0;
byte edits = 0;

bool down[N];        /* being disrupted */
bool done[N];        /* rebooted and released */

#ifdef UNCONDITIONAL
#define MAYWRITE(i) true
#define PENDOK(i)   true
#else
#define MAYWRITE(i) (!touched[i])
#define PENDOK(i)   (pendValid[i])
#endif

/* a write to a register makes a write in flight to it fail its precondition */
#define WROTE(i) pendValid[i] = false

#define H(i) (rstate[i] == HOLDING)
#define NH (H(0) + H(1) + H(2) + H(3))
#define ZH(z) ((H(0) && zone[0] == z) + (H(1) && zone[1] == z) + (H(2) && zone[2] == z) + (H(3) && zone[3] == z))
#define OKH(i) (!H(i) || (NH <= limit[i] && ZH(zone[i]) <= 1))
#define OKD(i) (!down[i] || H(i))
#define SAFE (OKH(0) && OKH(1) && OKH(2) && OKH(3) && OKD(0) && OKD(1) && OKD(2) && OKD(3))

active proctype Monitor() {
	assert(SAFE)
}

proctype Node(byte i) {
	byte pc = START;
	byte ss[N];   /* a snapshot of the states */
	bool adm[N];
	byte j, w, k, lim, cA, zA, cS, zS;

	do
	:: pc == START ->
		/* (re)start: read the own register with a consistent GET */
		atomic {
			touched[i] = false;
			if
			:: done[i] -> pc = END
			:: !done[i] && rstate[i] == NONE -> pc = IDLE
			:: !done[i] && rstate[i] == WAITING -> pc = WAIT
			:: !done[i] && rstate[i] == ENTERING -> pc = VERIFY
			:: !done[i] && rstate[i] == HOLDING && rrebooted[i] -> pc = RELEASE
			:: !done[i] && rstate[i] == HOLDING && !rrebooted[i] -> pc = WORK
			fi
		}

	:: pc == IDLE ->
		/* a reboot is needed: join the queue */
		atomic {
			if
			:: MAYWRITE(i) -> rstate[i] = WAITING; rrebooted[i] = false; WROTE(i); pc = WAIT
			:: else -> pc = START
			fi
		}

	:: pc == WAIT ->
#ifdef LIVENESS
		/* eligibility, exact: the active claims, then the waiting ones in
		 * queue order, each admitted if it fits with those admitted; an
		 * eligible node announces (entering) */
		atomic {
			j = 0;
			do
			:: j < N -> adm[j] = (rstate[j] == ENTERING || rstate[j] == HOLDING); j++
			:: else -> break
			od;
			w = 0;
			do
			:: w < N ->
				if
#ifdef LOOSE
				:: rstate[w] == WAITING && w != i -> skip   /* only the active claims count */
				:: rstate[w] == WAITING && w == i ->
#else
				:: rstate[w] == WAITING ->
#endif
					lim = limit[w]; cA = 0; zA = 0; k = 0;
					do
					:: k < N ->
						if
						:: adm[k] ->
							cA++;
							if :: limit[k] < lim -> lim = limit[k] :: else -> skip fi;
							if :: zone[k] == zone[w] -> zA++ :: else -> skip fi
						:: else -> skip
						fi;
						/* the waiting claimants' limits bind too */
						if :: rstate[k] == WAITING && limit[k] < lim -> lim = limit[k] :: else -> skip fi;
						k++
					:: else -> break
					od;
					adm[w] = (cA + 1 <= lim && zA + 1 <= 1)
				:: else -> skip
				fi;
				w++
			:: else -> break
			od;
			if
			:: rstate[i] != WAITING -> pc = START
			:: rstate[i] == WAITING && adm[i] -> pc = ANNOUNCE
			:: rstate[i] == WAITING && !adm[i] -> skip   /* not eligible: look again */
			fi;
			j = 0;
			do
			:: j < N -> adm[j] = false; j++
			:: else -> break
			od;
			j = 0; w = 0; k = 0; lim = 0; cA = 0; zA = 0
		}
#else
		/* Eligibility is computed from a watch cache, which may be stale,
		 * and decides only who tries. For safety, any waiting node may
		 * announce (entering) at any time: a superset of what any view
		 * allows. */
		atomic {
#ifdef STALE_VERIFY
			j = 0;
			do
			:: j < N -> ss[j] = rstate[j]; j++
			:: else -> break
			od;
			j = 0;
#endif
			if
			:: rstate[i] != WAITING -> pc = START
			:: rstate[i] == WAITING && MAYWRITE(i) -> rstate[i] = ENTERING; WROTE(i); pc = VERIFY
			:: rstate[i] == WAITING && !MAYWRITE(i) -> pc = START
			fi
		}
#endif

	:: pc == ANNOUNCE ->
		/* others may have announced since the eligibility read */
		atomic {
			if
			:: rstate[i] == WAITING -> rstate[i] = ENTERING; WROTE(i); pc = VERIFY
			:: else -> pc = START
			fi
		}

	:: pc == VERIFY ->
		/* a consistent snapshot, taken after the announce; per domain (the
		 * cluster, the own zone) the limit is the smallest of the own and
		 * the active claims' published limits */
		atomic {
			if
#ifdef STALE_OWN
			:: true -> touched[i] = false;   /* trusts its own claim as it remembers it */
#else
			:: rstate[i] != ENTERING -> pc = START   /* not what we announced: decide from what is there */
			:: else ->
#endif
#ifndef STALE_VERIFY
				j = 0;
				do
				:: j < N -> ss[j] = rstate[j]; j++
				:: else -> break
				od;
#endif
				lim = limit[i]; cA = 0; zA = 0; cS = 0; zS = 0;
				j = 0;
				do
				:: j < N ->
					if
					:: j != i ->
						if
#ifdef IGNORE_ENTERING
						:: ss[j] == HOLDING ->
#else
						:: ss[j] == ENTERING || ss[j] == HOLDING ->
#endif
							cA++;
#ifndef NO_STRICTEST
							if :: limit[j] < lim -> lim = limit[j] :: else -> skip fi;
#endif
							if :: zone[j] == zone[i] -> zA++ :: else -> skip fi
						:: else -> skip
						fi;
						/* the waiting claimants' limits bind too */
						if :: ss[j] == WAITING && limit[j] < lim -> lim = limit[j] :: else -> skip fi;
						/* holders, and entering claims ahead in the queue */
						if
						:: ss[j] == HOLDING || (ss[j] == ENTERING && j < i) ->
							cS++;
							if :: zone[j] == zone[i] -> zS++ :: else -> skip fi
						:: else -> skip
						fi
					:: else -> skip
					fi;
					j++
				:: else -> break
				od;
#ifdef NO_GLOBAL
				cA = 0; cS = 0; lim = N;
#endif
				if
				:: cA + 1 <= lim && zA + 1 <= 1 -> pc = COMMITTING
#ifdef NO_STAY
				:: !(cA + 1 <= lim && zA + 1 <= 1) && cS + 1 <= lim && zS + 1 <= 1 -> pc = STEPBACK
#else
				:: !(cA + 1 <= lim && zA + 1 <= 1) && cS + 1 <= lim && zS + 1 <= 1 -> skip   /* stay entering */
#endif
				:: !(cA + 1 <= lim && zA + 1 <= 1) && !(cS + 1 <= lim && zS + 1 <= 1) -> pc = STEPBACK
				fi;
#ifdef LIVENESS
				/* Yield: with only itself counted as waiting (every other
				 * claim as it is), if a waiting node ahead would be
				 * admitted and it would not, it gives way */
				if
				:: pc != STEPBACK ->
					j = 0;
					do
					:: j < N -> adm[j] = (j != i && (rstate[j] == ENTERING || rstate[j] == HOLDING)); j++
					:: else -> break
					od;
					w = 0;
					do
					:: w < N ->
						if
						:: rstate[w] == WAITING || w == i ->
							lim = limit[w]; cA = 0; zA = 0; k = 0;
							do
							:: k < N ->
								if
								:: adm[k] ->
									cA++;
									if :: limit[k] < lim -> lim = limit[k] :: else -> skip fi;
									if :: zone[k] == zone[w] -> zA++ :: else -> skip fi
								:: else -> skip
								fi;
								if :: (rstate[k] == WAITING || k == i) && limit[k] < lim -> lim = limit[k] :: else -> skip fi;
								k++
							:: else -> break
							od;
							adm[w] = (cA + 1 <= lim && zA + 1 <= 1)
						:: else -> skip
						fi;
						w++
					:: else -> break
					od;
					if
					:: !adm[i] && ((i > 0 && rstate[0] == WAITING && adm[0]) || (i > 1 && rstate[1] == WAITING && adm[1]) || (i > 2 && rstate[2] == WAITING && adm[2])) -> pc = STEPBACK
					:: else -> skip
					fi;
					j = 0;
					do
					:: j < N -> adm[j] = false; j++
					:: else -> break
					od;
					w = 0; k = 0
				:: else -> skip
				fi
#endif
			fi;
			j = 0;
			do
			:: j < N -> ss[j] = 0; j++
			:: else -> break
			od;
			j = 0; lim = 0; cA = 0; zA = 0; cS = 0; zS = 0
		}

	:: pc == COMMITTING ->
		if
		:: atomic { MAYWRITE(i) -> rstate[i] = HOLDING; WROTE(i); pc = WORK }
		:: atomic { !MAYWRITE(i) -> pc = START }
		:: atomic { lost < MAXLOST && !pend[i] ->
			/* the reply is lost; the write is still in flight with the
			 * precondition it was sent with */
			lost++; pend[i] = true; pendValid[i] = !touched[i]; pc = START }
		fi

	:: pc == STEPBACK ->
		atomic {
			if
			:: MAYWRITE(i) -> rstate[i] = WAITING; WROTE(i); pc = WAIT
			:: else -> pc = START
			fi
		}

	:: pc == WORK ->
		/* before disrupting: a consistent GET, or a conditional write of the
		 * claim that succeeds, confirms it (both see rstate at one instant) */
		atomic {
			if
			:: rstate[i] == HOLDING -> down[i] = true; pc = REBOOT
			:: else -> pc = START
			fi
		}

	:: pc == REBOOT ->
		/* the machine reboots; the daemon starts again in the new boot */
		atomic { rrebooted[i] = true; down[i] = false; pc = START }

	:: pc == RELEASE ->
		atomic {
			if
			:: MAYWRITE(i) -> rstate[i] = NONE; rrebooted[i] = false; WROTE(i); done[i] = true; pc = END
			:: else -> pc = START
			fi
		}

	:: pc != END && pc != START && crashes < MAXCRASH ->
		/* the daemon (or the machine) dies here; local state is lost; a
		 * machine that was going down comes back rebooted */
		atomic {
			crashes++; pc = START;
			if :: down[i] -> down[i] = false; rrebooted[i] = true :: else -> skip fi
		}

	:: pc == END -> break
	od
}

#ifndef LIVENESS
/* a write in flight reaches etcd later (and fails its precondition if the
 * register changed since it was sent), or never */
#define LAND(j) atomic { pend[j] -> \
	if \
	:: PENDOK(j) -> rstate[j] = HOLDING; pendValid[j] = false; touched[j] = true \
	:: else -> skip \
	fi; \
	pend[j] = false }

active proctype Network() {
end:
	do
	:: LAND(0)
	:: LAND(1)
	:: LAND(2)
	:: LAND(3)
	od
}

/* an admin removes an entering claim by hand */
#define REMOVE(j) atomic { admins < MAXADMIN && rstate[j] == ENTERING -> \
	admins++; rstate[j] = NONE; touched[j] = true; WROTE(j) }

/* an admin sets an entering claim's label alone back to waiting */
#define EDIT(j) atomic { edits < MAXEDIT && rstate[j] == ENTERING -> \
	edits++; rstate[j] = WAITING; touched[j] = true; WROTE(j) }

active proctype Admin() {
end:
	do
	:: REMOVE(0)
	:: REMOVE(1)
	:: REMOVE(2)
	:: REMOVE(3)
	:: EDIT(0)
	:: EDIT(1)
	:: EDIT(2)
	:: EDIT(3)
	od
}
#endif

init {
	atomic {
#ifdef CONFIG2
		zone[0] = 0; zone[1] = 1; zone[2] = 2; zone[3] = 2;
		limit[0] = 2; limit[1] = 2; limit[2] = 2; limit[3] = 2;
#else
		zone[0] = 0; zone[1] = 0; zone[2] = 1; zone[3] = 1;
		limit[0] = 1; limit[1] = 2; limit[2] = 2; limit[3] = 2;
#endif
		run Node(0); run Node(1); run Node(2); run Node(3)
	}
}

#ifdef LIVENESS
ltl progress { <> (done[0] && done[1] && done[2] && done[3]) }
#endif
