/* resv.pml: docs/design.md section 5 as MongoDB executes it, for SPIN.
 *
 * One collection (db[]), NKEY keys, NOWN owners whose attempts run
 * concurrently, a clock that a process of its own advances at any moment,
 * and a sweeper. Every server-side write is one atomic step (d_step), as
 * MongoDB guarantees for a single document; everything a client does
 * between two server steps (reading its clock, looking at an answer,
 * deciding to retry) is a step of its own, so SPIN interleaves every other
 * process's steps there. model/README.md explains the model and its size.
 *
 * Compile-time switches (spin -D...):
 *   ATT0 ATT1 ATT2  attempts of owners 0, 1, 2 (0 to 2 each; 0 = no owner)
 *   NKEY MAXT TTL GRACE SWEEPS  keys, last clock instant, ttl, sweep grace,
 *                   sweeps the sweeper runs (0: none)
 *   FAILOVER        replication to secondaries and one failover that rolls
 *                   back what was not replicated; writes are acknowledged
 *                   once replicated (w: majority) unless W1 (w: 1)
 *   REPLAY          abandon's two writes in one step, as the memory store
 *                   does them, and a sweep in one step, for model/replay.c
 *   FRESH_NOW       each reserve and confirm in one step, at the clock of
 *                   that step (no operation runs on a clock read earlier)
 *   GRANT_ONLY      check the grants alone (not that every live belief stays
 *                   backed), so a run stops at the double grant itself
 *   ALL             one more owner (3) whose one attempt is a reserve_all
 *                   of every key, as csrc/mongo/ sends it: the upserts of
 *                   all keys, then a read of each, then on a conflict the
 *                   abandon of each key by the attempt (design.md section
 *                   5, "Several keys at once"); it uses NKEY attempt
 *                   slots, one per key, whose holds stand for its one
 *                   attempt id in each key's document
 *   M_*             a planted mutation; model/check.sh lists them */

#ifndef ATT0
#define ATT0 2
#endif
#ifndef ATT1
#define ATT1 2
#endif
#ifndef ATT2
#define ATT2 2
#endif
#ifndef NKEY
#define NKEY 2
#endif
#ifndef MAXT
#define MAXT 4
#endif
#ifndef TTL
#define TTL 2
#endif
#ifndef GRACE
#define GRACE 1
#endif
#ifndef SWEEPS
#define SWEEPS 1
#endif
#define NSINGLE (ATT0 + ATT1 + ATT2)
#ifdef ALL
#define NATT (NSINGLE + NKEY) /* the reserve_all's slots come last */
#else
#define NATT NSINGLE
#endif
#define TRIES 5        /* UPSERT_TRIES of csrc/mongo/mongo_upsert.c */
#define FOREVER 255    /* a belief in a confirmed reservation */
#define BIT(a) (1 << (a))

/* Answers (resv_status_t's numbers, for replay.c), and two internal ones. */
#define NONE      0
#define RESERVED  1
#define CONFIRMED 2
#define CONFLICT  3
#define ABANDONED 4
#define KEPT      5
#define ABSENT    6
#define RELEASED  7
#define DUPKEY    20   /* the upsert failed on the _id index */
#define RETRY     21   /* the read after it found nobody else holding it */
#define FAILED    22   /* the write was rolled back before its majority ack */

/* One reservation document. exp is expires_at (meaningless when
 * confirmed: expires_at is null); holds is a set of attempts. */
typedef Doc {
  bool present;
  bool confirmed;
  byte owner;
  byte exp;
  byte holds;
  byte version
};

Doc db[NKEY];
byte clock;

/* Each attempt's key and owner, and what its answers told it: 0 nothing,
 * FOREVER a confirmed reservation, else the instant its pending
 * reservation ends. "Live" is belief > clock. */
byte akey[NATT];
byte aowner[NATT];
byte belief[NATT];

/* The properties. Each is a flag computed and asserted inside one atomic
 * step and reset there, so none adds to the state; SPIN's report names
 * the flag that failed (model/check.sh matches it).
 *   double_grant     an owner was told reserved/confirmed while another
 *                    owner's reservation of the key was live (uniqueness)
 *   false_answer     a reserved/confirmed answer that was not true when
 *                    given, or a live belief the document no longer backs
 *   confirmed_lost   a confirmed reservation deleted or overwritten by
 *                    anything but its owner's release
 *   hold_lost        a reservation deleted while an attempt of its owner
 *                    (one that joined between abandon's writes) believed it
 *                    live
 *   kept_gone        abandon answered kept while the reservation was not
 *                    (or no longer) its owner's: checked at the step that
 *                    decides the answer
 *   left_hold        a reserve_all answered conflict while its attempt still
 *                    held one of its keys (ALL)
 * and the retry's own, on a local: tries < TRIES (the duplicate-key retry
 * never runs out of its bound). */
bool double_grant, false_answer, confirmed_lost, hold_lost;
bool kept_gone, left_hold;
byte gi; /* a loop counter for the atomic steps; always 0 between them */
Doc ans; /* the answer a step gives, for its checks; all 0 between steps */
#ifdef ALL
int inserted; /* attempts whose last reserve write inserted the document
               * (the update's reply lists it as upserted); the
               * reserve_all clears its own bit at once */
#endif
#define ANS_CLEAR ans.owner = 0; ans.confirmed = 0; ans.exp = 0; ans.version = 0; ans.holds = 0

#ifdef FAILOVER
Doc rep[NKEY];      /* what the secondaries have */
byte wseq, rseq;    /* writes made, writes replicated */
bool failed_over;
byte fo_rseq, fo_wseq; /* rseq and wseq at the failover */
/* A write made before the failover and not replicated: rolled back. */
#define LOST(s) (failed_over && (s) > fo_rseq && (s) <= fo_wseq)
byte bseq[NATT];    /* the write each attempt's belief came from */
#endif

/* ---- the properties ---------------------------------------------------- */

/* Attempt a is about to be told it holds key k: no attempt of another
 * owner may hold k live now. */
inline grant(a, k) {
  gi = 0;
  do
  :: gi < NATT ->
     double_grant = double_grant ||
       (aowner[gi] != aowner[a] && akey[gi] == k && belief[gi] > clock);
     gi++
  :: else -> break
  od;
  gi = 0;
  assert(!double_grant)
}

/* The answer of a write is given as the write is made (with w: majority
 * it is only delivered once replicated, and a failover that rolls the
 * write back takes the belief away again: see Replication). */
inline told(a, k, res) {
  grant(a, k);
  belief[a] = (res == CONFIRMED -> FOREVER : ans.exp);
#if defined(FAILOVER) && !defined(W1)
  bseq[a] = wseq
#else
  skip
#endif
}

/* Every live belief is backed by its document: the key is its owner's,
 * confirmed, or pending until at least the believed instant with the
 * attempt among the holds. Checked after every write. hold_lost is the
 * same test, named for a deleted document. */
inline backed() {
#ifndef GRANT_ONLY
  gi = 0;
  do
  :: gi < NATT ->
     if
     :: belief[gi] > clock ->
        hold_lost = hold_lost || !db[akey[gi]].present;
        false_answer = false_answer || (db[akey[gi]].present &&
          (db[akey[gi]].owner != aowner[gi] ||
           (!db[akey[gi]].confirmed &&
            (belief[gi] == FOREVER || db[akey[gi]].exp < belief[gi] ||
             (db[akey[gi]].holds & BIT(gi)) == 0))))
     :: else -> skip
     fi;
     gi++
  :: else -> break
  od;
  gi = 0;
  assert(!hold_lost);
  assert(!false_answer)
#else
  skip
#endif
}

/* A confirmed document may go only by its owner's release. */
inline may_lose(k, by_release, o) {
  confirmed_lost = db[k].present && db[k].confirmed &&
                   !(by_release && db[k].owner == o);
  assert(!confirmed_lost)
}

/* ---- replication (FAILOVER) ------------------------------------------- */

inline wrote() {
#ifdef FAILOVER
  wseq++
#else
  skip
#endif
}

/* After a write: w: 1 answers at once; w: majority waits until the write
 * is replicated, or answers FAILED (an error) when a failover rolled it
 * back first. */
inline await(res) {
#ifdef FAILOVER
#ifndef W1
  myseq = wseq;
  if
  :: LOST(myseq) -> res = FAILED
  :: !LOST(myseq) && rseq >= myseq -> skip
  fi;
  myseq = 0
#else
  skip
#endif
#else
  skip
#endif
}

/* ---- trace lines for model/replay.c ------------------------------------ */

/* EV op a owner key now arg -> status owner confirmed exp version holds,
 * then the document of the key as get would read it. */
inline event(op, a, k, now, arg, st, d) {
  printf("EV %d %d %d %d %d %d %d %d %d %d %d %d\n", op, a, aowner[a], k, now,
         arg, st, d.owner, d.confirmed, d.exp, d.version, d.holds);
  printf("DB %d %d %d %d %d %d %d %d\n", k, now, db[k].present, db[k].owner,
         db[k].confirmed, db[k].exp, db[k].version, db[k].holds)
}
#define OP_RESERVE 1
#define OP_CONFIRM 2
#define OP_ABANDON 3
#define OP_RELEASE 4

/* ---- the server's steps ------------------------------------------------ */

/* The filter of reserve and confirm: F(key) and $or [{owner: o},
 * {expires_at: {$lte: now}}]. A query's $lte never matches null, so a
 * confirmed document passes only for its owner. */
#ifdef M_LTE
/* Mutant: the expression's $lte, true for null. */
#define MATCHES(k, o, now) (db[k].owner == o || db[k].confirmed || db[k].exp <= now)
#else
#define MATCHES(k, o, now) (db[k].owner == o || (!db[k].confirmed && db[k].exp <= now))
#endif

/* "Live pending of this owner" in the pipeline: $gt [expires_at, now]. */
#define LIVE_OWN(k, o, now) (db[k].owner == o && !db[k].confirmed && db[k].exp > now)
#ifdef M_NO_KEEP
/* Mutant: no first case, so the owner's confirmed reservation falls to
 * the third ("otherwise") case. */
#define CONFIRMED_OWN(k, o) (false)
#else
#define CONFIRMED_OWN(k, o) (db[k].owner == o && db[k].confirmed)
#endif

/* The reserve findAndModify: filter, the pipeline's three cases, upsert,
 * the new document returned (its fields are what the answer says). */
inline reserve_write(a, k, now, res) {
  d_step {
    if
    :: db[k].present && MATCHES(k, aowner[a], now) ->
       if
       :: CONFIRMED_OWN(k, aowner[a]) -> res = CONFIRMED
       :: LIVE_OWN(k, aowner[a], now) ->
#ifdef M_RETURN_OLD
          /* Mutant: the answer from the document before the update. */
          ans.holds = db[k].holds; ans.exp = db[k].exp;
#endif
          db[k].holds = db[k].holds | BIT(a);
#ifdef M_JOIN_NOMAX
          db[k].exp = now + TTL;
#else
          if
          :: now + TTL > db[k].exp -> db[k].exp = now + TTL
          :: else -> skip
          fi;
#endif
          res = RESERVED
       :: else ->
          may_lose(k, false, 0);
          db[k].owner = aowner[a]; db[k].confirmed = false;
          db[k].exp = now + TTL; db[k].holds = BIT(a); db[k].version = 0;
          res = RESERVED
       fi
    :: db[k].present && !MATCHES(k, aowner[a], now) -> res = DUPKEY
    :: else ->
       db[k].present = true; db[k].owner = aowner[a]; db[k].confirmed = false;
       db[k].exp = now + TTL; db[k].holds = BIT(a); db[k].version = 0;
#ifdef ALL
       if :: a >= NSINGLE -> inserted = inserted | BIT(a) :: else -> skip fi;
#endif
       res = RESERVED
    fi;
    if
    :: res != DUPKEY ->
       wrote();
#ifdef M_RETURN_OLD
       if :: ans.exp == 0 -> ans.holds = db[k].holds; ans.exp = db[k].exp :: else -> skip fi;
#else
       ans.holds = db[k].holds; ans.exp = db[k].exp;
#endif
       ans.owner = db[k].owner; ans.confirmed = db[k].confirmed;
       ans.version = db[k].version;
       /* true when given: ours, and reserved means pending, live at our
        * clock, held by us until the expiry it names */
       false_answer = !db[k].present || db[k].owner != aowner[a] ||
         (res == CONFIRMED && !db[k].confirmed) ||
         (res == RESERVED && (db[k].confirmed || ans.exp != db[k].exp ||
                              ans.exp <= now || (ans.holds & BIT(a)) == 0));
       assert(!false_answer);
       told(a, k, res);
       event(OP_RESERVE, a, k, now, TTL, res, ans);
       ANS_CLEAR;
       backed()
    :: else -> skip
    fi
  }
}

#ifdef ALL
/* The reserve_all's read of key k after its upserts, at the call's clock
 * (now): ours (this owner's, confirmed, or pending and live with the
 * attempt among its holds, rexp its expiry) or another's. The answer is
 * true as read; the attempt counts on a key only once the whole call
 * answers reserved. */
inline all_read(a, k, now, res, rexp) {
  d_step {
    rexp = 0;
    if
    :: db[k].present && db[k].owner == aowner[a] && db[k].confirmed -> res = CONFIRMED
    :: db[k].present && db[k].owner == aowner[a] && !db[k].confirmed &&
       db[k].exp > now && (db[k].holds & BIT(a)) != 0 -> res = RESERVED; rexp = db[k].exp
    :: else -> res = CONFLICT
    fi
  }
}
#endif

/* The confirm findAndModify: same filter; the document becomes the
 * owner's confirmed reservation, version the larger of the stored one
 * (ours, confirmed) and the given one. */
inline confirm_write(a, k, now, v, res) {
  d_step {
    if
    :: db[k].present && MATCHES(k, aowner[a], now) ->
       if
       :: CONFIRMED_OWN(k, aowner[a]) && db[k].version > v -> skip
       :: else -> db[k].version = v
       fi;
       if
       :: db[k].owner != aowner[a] -> may_lose(k, false, 0)
       :: else -> skip
       fi;
       db[k].owner = aowner[a]; db[k].confirmed = true; db[k].exp = 0;
       db[k].holds = 0;
       res = CONFIRMED
    :: db[k].present && !MATCHES(k, aowner[a], now) -> res = DUPKEY
    :: else ->
       db[k].present = true; db[k].owner = aowner[a]; db[k].confirmed = true;
       db[k].exp = 0; db[k].holds = 0; db[k].version = v;
       res = CONFIRMED
    fi;
    if
    :: res != DUPKEY ->
       wrote();
       ans.owner = db[k].owner; ans.confirmed = true; ans.exp = 0;
       ans.version = db[k].version; ans.holds = 0;
       told(a, k, res);
       event(OP_CONFIRM, a, k, now, v, res, ans);
       ANS_CLEAR;
       backed()
    :: else -> skip
    fi
  }
}

/* The read by _id after a duplicate key, judged at the operation's clock
 * (now): held by another owner (confirmed, or pending and live) is a
 * conflict with that holder; anything else (ours, expired, gone) retries. */
inline dup_read(a, k, now, op, arg, res) {
  d_step {
#ifdef M_FRESHNOW
    /* Mutant: the read judges expiry by a fresh clock, the upsert by now. */
    if
    :: db[k].present && db[k].owner != aowner[a] &&
       (db[k].confirmed || db[k].exp > clock) -> res = CONFLICT
    :: else -> res = RETRY
    fi;
#else
    if
    :: db[k].present && db[k].owner != aowner[a] &&
       (db[k].confirmed || db[k].exp > now) -> res = CONFLICT
    :: else -> res = RETRY
    fi;
#endif
    if
    :: res == CONFLICT ->
       ans.owner = db[k].owner; ans.confirmed = db[k].confirmed;
       ans.exp = (db[k].confirmed -> 0 : db[k].exp);
       ans.version = (db[k].confirmed -> db[k].version : 0); ans.holds = 0;
       event(op, a, k, now, arg, res, ans);
       ANS_CLEAR
    :: else -> skip
    fi
  }
}

/* reserve (op OP_RESERVE) or confirm (OP_CONFIRM): the upsert, and after a
 * duplicate key the read and the bounded retry of mongo_upsert.c's upsert. */
inline upsert(op, a, k, arg, res) {
#ifdef FRESH_NOW
  atomic {
#endif
  now = clock;
  tries = 0;
  do
  :: if
     :: op == OP_RESERVE -> reserve_write(a, k, now, res)
     :: else -> confirm_write(a, k, now, arg, res)
     fi;
     if
     :: res != DUPKEY -> await(res); break
     :: else ->
#ifdef M_NOREREAD
        /* Mutant: retry at once, without reading who holds the key. */
        res = RETRY;
#else
        dup_read(a, k, now, op, arg, res);
#endif
        if
        :: res == CONFLICT -> break
        :: else ->
           /* the retry ends: local, so it adds no interleavings */
           d_step { tries++; assert(tries < TRIES) }
        fi
     fi
  od;
#ifdef FRESH_NOW
  }
#endif
  res = res; /* a target for the breaks: a jump into a d_step is refused */
  d_step { now = 0; tries = 0 }
}

/* abandon: 1. pull the hold where F(key) and owner, a findAndModify
 * returning the document as the pull left it; 2. delete where F(key),
 * owner, expires_at not null, holds empty. Any step of anyone may come
 * between the two (but REPLAY joins them, as the memory store does). The
 * answer is decided at the pull, from what it left: no document of the
 * owner, absent (and no delete); confirmed or other holds left, kept;
 * pending without holds, abandoned, whatever the delete then finds. The
 * delete is sent after every pull that matched, as mongo_ops.c does. */
inline kept_check(a, k, res) {
  kept_gone = res == KEPT && !(db[k].present && db[k].owner == aowner[a]);
  assert(!kept_gone)
}

inline abandon(a, k, res) {
#ifdef REPLAY
  atomic {
#endif
  d_step {
    belief[a] = 0; /* the attempt gives its hold up: it counts on nothing */
    if
    :: db[k].present && db[k].owner == aowner[a] ->
       db[k].holds = db[k].holds & ~BIT(a); wrote();
       if
       :: db[k].confirmed || db[k].holds != 0 -> res = KEPT
       :: else -> res = ABANDONED
       fi
    :: else -> res = ABSENT
    fi;
#ifndef M_KEPT_LATE
    kept_check(a, k, res);
#endif
    backed()
  }
  await(res);
  if
  :: res == FAILED -> skip
  :: res == ABSENT -> d_step { event(OP_ABANDON, a, k, clock, 0, res, db[k]) }
  :: res == KEPT || res == ABANDONED ->
     d_step {
#ifdef M_HOLDS
       /* Mutant: the delete without holds: {$size: 0}. */
       if
       :: db[k].present && db[k].owner == aowner[a] && !db[k].confirmed ->
#elif defined(M_NE_NULL)
       /* Mutant: the delete without expires_at: {$ne: null}. */
       if
       :: db[k].present && db[k].owner == aowner[a] && db[k].holds == 0 ->
#else
       if
       :: db[k].present && db[k].owner == aowner[a] && !db[k].confirmed &&
          db[k].holds == 0 ->
#endif
#ifdef M_KEPT_LATE
          res = ABANDONED;
#endif
          may_lose(k, false, 0);
          db[k].present = false; db[k].owner = 0; db[k].confirmed = false;
          db[k].exp = 0; db[k].holds = 0; db[k].version = 0; wrote()
       :: else ->
#ifdef M_KEPT_LATE
          res = KEPT;
#endif
          skip
       fi;
#ifdef M_KEPT_LATE
       /* Mutant: the answer of the delete (deleted ? abandoned : kept),
        * as abandon answered before: kept for a reservation gone by then
        * (model/README.md, "What SPIN found"). */
       kept_check(a, k, res);
#endif
       event(OP_ABANDON, a, k, clock, 0, res, db[k]);
       backed()
     }
     await(res)
  fi;
#ifdef REPLAY
  }
#endif
  res = res /* a statement to end on, after the fi */
}

/* release: delete where F(key) and owner. The owner's other attempts on
 * the key stop counting on it: the owner let it go. */
inline release(a, k, res) {
  d_step {
    belief[a] = 0;
#ifdef M_RELEASE_ANY
    /* Mutant: the delete without the owner. */
    if
    :: db[k].present -> res = RELEASED
#else
    if
    :: db[k].present && db[k].owner == aowner[a] -> res = RELEASED
#endif
    :: else -> res = ABSENT
    fi;
    if
    :: res == RELEASED ->
       may_lose(k, true, aowner[a]);
       db[k].present = false; db[k].owner = 0; db[k].confirmed = false;
       db[k].exp = 0; db[k].holds = 0; db[k].version = 0; wrote();
       gi = 0;
       do
       :: gi < NATT ->
          if
          :: aowner[gi] == aowner[a] && akey[gi] == k -> belief[gi] = 0
          :: else -> skip
          fi;
          gi++
       :: else -> break
       od;
       gi = 0
    :: else -> skip
    fi;
    event(OP_RELEASE, a, k, clock, 0, res, db[k]);
    backed()
  }
  await(res)
}

/* ---- the processes ---------------------------------------------------- */

/* One attempt of an owner: reserve a key of its choice, then confirm
 * (and perhaps release later), abandon, release, or crash and let the
 * reservation expire. */
proctype Attempt(byte a) {
  byte k, now, tries, res;
#ifdef FAILOVER
  byte myseq;
#endif

  atomic {
    if
    :: k = 0
#if NKEY > 1
    :: k = 1
#endif
    fi;
    akey[a] = k
  }
  upsert(OP_RESERVE, a, k, TTL, res);
  if
  :: res == RESERVED ->
     if
     :: upsert(OP_CONFIRM, a, k, a + 1, res);
        if
        :: res == CONFIRMED -> if :: release(a, k, res) :: skip fi
        :: else -> skip
        fi
     :: abandon(a, k, res)
     :: release(a, k, res)
     :: skip /* crashes */
     fi
  :: res == CONFIRMED -> if :: release(a, k, res) :: skip fi
  :: else -> skip
  fi;
  res = 0
}

#ifdef ALL
/* The reserve_all of owner 3 over keys 0 .. NKEY-1, slot NSINGLE + k
 * standing for its attempt in key k. 1: the conditional upserts of every
 * key, in either order (one update command of NKEY statements,
 * ordered: false), each with the duplicate-key read and retry of a single
 * reserve; 2: a read of each key, but for a key whose upsert inserted
 * the document (the reply tells it, and the answer is the request's own:
 * held by the attempt until the call's expiry); 3: on a conflict, the abandon of each
 * key by the attempt (pull, then delete), then the check that it holds
 * none of them; else every key is told to the attempt. Nothing the call
 * does on one key waits for another key, so any step of anyone may come
 * between any two of its steps. */
proctype AllAttempt() {
  byte k, now, tries, res, i, seen, first;
#ifdef FAILOVER
  byte myseq;
#endif
  byte got[NKEY], gexp[NKEY];
  if
  :: first = 0
#if NKEY > 1
  :: first = 1
#endif
  fi;
  i = 0;
  do
  :: i < NKEY ->
     k = (first + i) % NKEY;
     upsert(OP_RESERVE, NSINGLE + k, k, TTL, res);
     /* the upsert's own answer is not counted on: the read decides,
      * unless it inserted (then what it wrote is known: the expiry it
      * was told) */
     d_step {
       if
       :: (inserted & BIT(NSINGLE + k)) != 0 && res == RESERVED ->
          got[k] = RESERVED; gexp[k] = belief[NSINGLE + k]
       :: else -> skip
       fi;
       inserted = inserted & ~BIT(NSINGLE + k);
       belief[NSINGLE + k] = 0
     }
     i++
  :: else -> break
  od;
  now = clock;
  seen = RESERVED;
  i = 0;
  do
  :: i < NKEY && got[i] == RESERVED -> i++ /* known from the upsert */
  :: i < NKEY && got[i] != RESERVED ->
     all_read(NSINGLE + i, i, now, res, gexp[i]);
     got[i] = res;
#ifdef M_ALL_FIRST
     /* Mutant: only the first key's read decides the call. */
     if :: i == 0 && res == CONFLICT -> seen = CONFLICT :: else -> skip fi;
#else
     if :: res == CONFLICT -> seen = CONFLICT :: else -> skip fi;
#endif
     i++
  :: else -> break
  od;
  if
  :: seen == CONFLICT ->
#ifndef M_ALL_NO_TAKEBACK
     i = 0;
     do
     :: i < NKEY -> abandon(NSINGLE + i, i, res); i++
     :: else -> break
     od;
#endif
     i = 0; /* a target for the break: a jump into a d_step is refused */
     d_step {
       i = 0;
       do
       :: i < NKEY ->
          left_hold = left_hold ||
            (db[i].present && (db[i].holds & BIT(NSINGLE + i)) != 0);
          i++
       :: else -> break
       od;
       i = 0;
       assert(!left_hold)
     }
  :: else ->
     /* reserved: true only if every key was read as ours; the attempt
      * counts on each key from here, until the expiry its read gave (a
      * key whose expiry has passed by now is not counted on) */
     d_step {
       i = 0;
       do
       :: i < NKEY ->
          false_answer = false_answer || got[i] == CONFLICT;
          belief[NSINGLE + i] = (got[i] == CONFIRMED -> FOREVER :
                                 (got[i] == RESERVED -> gexp[i] : 0));
          if
          :: belief[NSINGLE + i] > clock -> grant(NSINGLE + i, i)
          :: else -> skip
          fi;
          i++
       :: else -> break
       od;
       i = 0;
       assert(!false_answer);
       backed()
     }
  fi;
  i = 0; k = 0; now = 0; res = 0; seen = 0; first = 0
}
#endif

/* The clock advances by one at any moment, up to MAXT. */
proctype Clock() {
end:
  do
  :: d_step { clock < MAXT -> clock++ }
  od
}

/* sweep: delete the pending reservations whose expiry is at least GRACE
 * in the past (expires_at $lte now - GRACE, which type bracketing keeps
 * off confirmed ones); the server re-checks each document as it deletes
 * it, so each key is a step of its own. */
proctype Sweeper() {
  byte n, now, k, res;
#ifdef FAILOVER
  byte myseq;
#endif
#ifdef REPLAY
  byte swept;
#endif
  do
  :: n < SWEEPS ->
#ifdef REPLAY
     /* one step, as the memory store's sweep walks its table under its
      * locks; then the count, and each key's document */
     atomic {
#endif
     now = clock;
     k = 0;
     do
     :: k < NKEY ->
        d_step {
#ifdef M_SWEEP_CONF
          /* Mutant: the expression's $lte, true for null. */
          if
          :: db[k].present && (db[k].confirmed || db[k].exp + GRACE <= now) ->
#else
          if
          :: db[k].present && !db[k].confirmed && db[k].exp + GRACE <= now ->
#endif
             may_lose(k, false, 0);
             db[k].present = false; db[k].owner = 0; db[k].confirmed = false;
             db[k].exp = 0; db[k].holds = 0; db[k].version = 0; wrote();
#ifdef REPLAY
             swept++;
#endif
             backed()
          :: else -> skip
          fi
        }
        await(res);
        k++
     :: else -> break
     od;
#ifdef REPLAY
     printf("SW %d %d\n", now, swept);
     k = 0;
     do
     :: k < NKEY ->
        printf("DB %d %d %d %d %d %d %d %d\n", k, now, db[k].present, db[k].owner,
               db[k].confirmed, db[k].exp, db[k].version, db[k].holds);
        k++
     :: else -> break
     od;
     swept = 0;
     }
#endif
     n++; now = 0; k = 0
  :: else -> break
  od
}

#ifdef FAILOVER
/* The secondaries catch up with everything written so far. */
inline replicate() {
  d_step {
    gi = 0;
    do
    :: gi < NKEY ->
       rep[gi].present = db[gi].present; rep[gi].owner = db[gi].owner;
       rep[gi].confirmed = db[gi].confirmed; rep[gi].exp = db[gi].exp;
       rep[gi].holds = db[gi].holds; rep[gi].version = db[gi].version;
       gi++
    :: else -> break
    od;
    gi = 0;
    rseq = wseq
  }
}

/* Replication at any moment, and once a failover: the new primary has
 * what was replicated, and the rest is rolled back. */
proctype Replication() {
end:
  do
  :: rseq != wseq -> replicate()
  :: !failed_over ->
     d_step {
       gi = 0;
       do
       :: gi < NKEY ->
          db[gi].present = rep[gi].present; db[gi].owner = rep[gi].owner;
          db[gi].confirmed = rep[gi].confirmed; db[gi].exp = rep[gi].exp;
          db[gi].holds = rep[gi].holds; db[gi].version = rep[gi].version;
          gi++
       :: else -> break
       od;
       gi = 0;
       failed_over = true; fo_rseq = rseq; fo_wseq = wseq;
#ifndef W1
       /* w: majority: the rolled-back writes were never acknowledged */
       do
       :: gi < NATT ->
          if :: LOST(bseq[gi]) -> belief[gi] = 0 :: else -> skip fi;
          gi++
       :: else -> break
       od;
       gi = 0;
#endif
       printf("FAILOVER %d of %d writes replicated\n", rseq, wseq)
     }
  od
}
#endif

init {
  byte a, res;
  atomic {
    a = 0;
    do
    :: a < ATT0 -> aowner[a] = 0; a++
    :: a >= ATT0 && a < ATT0 + ATT1 -> aowner[a] = 1; a++
    :: a >= ATT0 + ATT1 && a < NSINGLE -> aowner[a] = 2; a++
    :: a >= NSINGLE && a < NATT -> aowner[a] = 3; akey[a] = a - NSINGLE; a++
    :: a == NATT -> break
    od;
    a = 0;
    do
    :: a < NSINGLE -> run Attempt(a); a++
    :: else -> break
    od;
#ifdef ALL
    run AllAttempt();
#endif
    run Clock();
#if SWEEPS > 0
    run Sweeper();
#endif
#ifdef FAILOVER
    run Replication();
#endif
    a = 0
  }
}
