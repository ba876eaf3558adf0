/* memory.c: the embedded store, and the reference model of the MongoDB one.
 *
 * Each aggregate type has its own table (as each has its own collection),
 * made by the type's first write, split into stripes by the key's hash,
 * each stripe a chained hash table under its own mutex (its buckets made
 * with its first entry). A call hashes its key, locks one stripe, does O(1)
 * work and copies its answer out; no lock is held across anything slow and
 * calls on different keys rarely meet. An entry is one allocation holding
 * its key, owner and holds (memory_entry.h), so a new key costs one
 * malloc, and is compact (csrc/test/test_memory.c bounds its bytes).
 *
 * The rules are not here: a call shows the rules (rules.c, design.md
 * section 5 as the MongoDB store executes them) a view of its entry, and
 * writes what they decide into the entry. A call of several keys
 * (reserve_all, confirm_all, abandon_all) locks the stripes of all its
 * keys in stripe order, the one order such calls take, so it is atomic
 * and two of them never wait on each other in a circle.
 *
 * Reclaiming (docs/design.md section 6): a pending reservation expired for at least
 * sweep_grace_ms is deleted on its own, so memory is bounded by what is
 * live. Every call, under the stripe lock it already holds, visits the
 * next RECLAIM_BUCKETS buckets of the stripe from a cursor that walks the
 * stripe round and round: amortised O(1) per call, never a pause
 * proportional to the store's size. Each call adds at most one entry and
 * the load factor is at most one, so a stripe's walk comes round within
 * nbuckets / RECLAIM_BUCKETS calls to it, and the dead entries it carries
 * are bounded by the entries made in one round. While the buckets it
 * visits hold garbage the step goes on, up to RECLAIM_BUCKETS_MAX (still
 * O(1)): under a churn of distinct keys the walk then keeps up, where two
 * buckets a call carried about as many dead entries again as the live and
 * the grace held (bench/README.md, section 10b). While no pending entry of
 * a stripe can be past the grace (a lower bound on their expiries, made
 * anew by each round of the walk), the step is skipped: it touched an
 * entry or two, a cache miss each, for nothing. A stripe that emptied
 * gives back buckets (halving at an eighth full). sweep (RESV_OP_SWEEP)
 * walks every stripe at once, for whoever wants the count. */
#include "memory.h"
#include "memory_entry.h"
#include "rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRIPES 64 /* a power of two */
#define INITIAL_BUCKETS 16
/* Buckets a call visits for reclaiming, and how many more it may visit
 * while they hold garbage; see the comment at the top. */
#define RECLAIM_BUCKETS 2
#define RECLAIM_BUCKETS_MAX 8

_Static_assert(STRIPES <= 64, "a call of several keys keeps its stripes in 64 bits");

typedef struct stripe {
  pthread_mutex_t mutex;
  entry_t **buckets;
  size_t nbuckets;    /* a power of two */
  size_t count;
  size_t bytes;       /* of its entries (header and data) and buckets */
  size_t cursor;      /* the next bucket the reclaiming walk visits */
  /* No pending entry of the stripe expires before min_expiry, so while
   * now - grace is earlier nothing is reclaimable and the walk is skipped.
   * round_min gathers the same bound for the walk's current round (its
   * survivors and what was written since it began); it becomes min_expiry
   * when the round comes back to bucket 0. */
  int64_t min_expiry;
  int64_t round_min;
} stripe_t;

typedef struct table {
  stripe_t stripes[STRIPES];
} table_t;

/* A type's state: its table, made by the first call that writes (a type
 * that is only looked up or read costs this pointer, not the stripes;
 * each stripe's buckets come with its first entry too). */
typedef struct lazy_table {
  _Atomic(table_t *) table;
} lazy_table_t;

/* The memory store keeps its reservations in its types: the backend holds
 * only the options its calls read. */
typedef struct memory {
  int32_t max_holds;
  int64_t grace_ms; /* sweep_grace_ms */
} memory_t;

/* ---- stripes -------------------------------------------------------- */

/* The slot of key k in s: where its entry is, or where a new one goes.
 * A stripe without buckets yet gets them when `writes`, else the answer
 * is *none (NULL): nothing to find. NULL without memory. */
static entry_t **find_slot(stripe_t *s, uint32_t hash, const resv_key_t *k,
                           bool writes, entry_t **none) {
  if (!s->buckets) {
    if (!writes) return none;
    if (!(s->buckets = calloc(INITIAL_BUCKETS, sizeof *s->buckets))) return NULL;
    s->nbuckets = INITIAL_BUCKETS;
    s->bytes += INITIAL_BUCKETS * sizeof *s->buckets;
  }
  entry_t **slot = &s->buckets[(hash >> 6) & (s->nbuckets - 1)];
  while (*slot && !entry_is(*slot, hash, k)) slot = &(*slot)->next;
  return slot;
}

/* Rehashes the stripe's chains into n buckets (twice or half as many).
 * Without memory it stays as it is: slower or bigger, still correct. */
static void rehash(stripe_t *s, size_t n) {
  entry_t **buckets = calloc(n, sizeof *buckets);
  if (!buckets) return;
  for (size_t i = 0; i < s->nbuckets; i++) {
    entry_t *e = s->buckets[i];
    while (e) {
      entry_t *next = e->next;
      size_t b = (e->hash >> 6) & (n - 1);
      e->next = buckets[b];
      buckets[b] = e;
      e = next;
    }
  }
  free(s->buckets);
  s->bytes = s->bytes - s->nbuckets * sizeof *buckets + n * sizeof *buckets;
  s->buckets = buckets;
  s->nbuckets = n;
  /* The chains moved: the walk's round starts again, so that it visits
   * every entry before its bound replaces min_expiry. */
  s->cursor = 0;
  s->round_min = INT64_MAX;
}

/* Links the new entry e at slot (the end of its chain). The stripe may
 * grow, which moves the chains: slot is stale afterwards. */
static void link_new(stripe_t *s, entry_t **slot, entry_t *e) {
  *slot = e;
  s->bytes += sizeof *e + e->cap;
  if (++s->count > s->nbuckets) rehash(s, s->nbuckets * 2);
}

static void unlink_entry(stripe_t *s, entry_t **slot) {
  entry_t *e = *slot;
  *slot = e->next;
  s->count--;
  s->bytes -= sizeof *e + e->cap;
  free(e);
}

/* ---- reclaiming ------------------------------------------------------ */

/* Notes a pending expiry written into the stripe, for its bounds. */
static void note_expiry(stripe_t *s, int64_t expires) {
  if (expires < s->min_expiry) s->min_expiry = expires;
  if (expires < s->round_min) s->round_min = expires;
}

/* Deletes the entries of bucket b that are pending and expired at or
 * before limit (now minus the grace); returns how many. *low gets the
 * earliest expiry of the pending entries that stay. */
static size_t reclaim_bucket(stripe_t *s, size_t b, int64_t limit, int64_t *low) {
  size_t n = 0;
  entry_t **slot = &s->buckets[b];
  while (*slot) {
    entry_t *e = *slot;
    if (resv__rules_reclaimable(e->confirmed, e->when, limit)) {
      unlink_entry(s, slot);
      n++;
      continue;
    }
    if (!e->confirmed && e->when < *low) *low = e->when;
    slot = &e->next;
  }
  return n;
}

/* A stripe at an eighth of its buckets or less gives half of them back
 * (the hysteresis against growing again is a factor of four). */
static void maybe_shrink(stripe_t *s) {
  if (s->nbuckets > INITIAL_BUCKETS && s->count * 8 <= s->nbuckets)
    rehash(s, s->nbuckets / 2);
}

/* A call's share of the walk: the next RECLAIM_BUCKETS buckets, unless
 * nothing in the stripe can be reclaimable yet (the entries are then not
 * touched: each would be a cache miss). */
static void reclaim_step(stripe_t *s, int64_t limit) {
  if (!s->buckets || limit < s->min_expiry) return;
  size_t n = 0, found;
  int visited = 0;
  do { /* RECLAIM_BUCKETS at a time, more while they hold garbage */
    found = 0;
    for (int i = 0; i < RECLAIM_BUCKETS; i++) {
      found += reclaim_bucket(s, s->cursor, limit, &s->round_min);
      s->cursor = (s->cursor + 1) & (s->nbuckets - 1);
      if (s->cursor == 0) { /* a round is done: its bound holds */
        s->min_expiry = s->round_min;
        s->round_min = INT64_MAX;
      }
    }
    n += found;
    visited += RECLAIM_BUCKETS;
  } while (found && visited < RECLAIM_BUCKETS_MAX);
  if (n) maybe_shrink(s);
}

/* Every bucket of the stripe; returns how many entries went. */
static size_t reclaim_all(stripe_t *s, int64_t limit) {
  size_t n = 0;
  int64_t low = INT64_MAX;
  for (size_t b = 0; b < s->nbuckets; b++) n += reclaim_bucket(s, b, limit, &low);
  /* Every entry was seen: the bound is exact (a rehash below keeps it). */
  s->min_expiry = low;
  while (n && s->nbuckets > INITIAL_BUCKETS && s->count * 8 <= s->nbuckets) {
    size_t before = s->nbuckets;
    maybe_shrink(s);
    if (s->nbuckets == before) break; /* no memory to rehash: stay */
  }
  return n;
}

/* ---- operations ------------------------------------------------------ */

/* Holds decoded for a view without a heap array up to this many. */
#define VIEW_HOLDS_ON_STACK 16

/* The rules' view of the entry e (NULL: none), its holds decoded into
 * holds (room for e->nholds). */
static void view_of(const entry_t *e, resv_str_t *holds, resv__view_t *v) {
  if (!e) {
    *v = (resv__view_t){.state = RESV_STATE_NONE};
    return;
  }
  const unsigned char *p = get_field(get_field(owner_at(e), &v->owner.tenant), &v->owner.id);
  for (uint32_t i = 0; i < e->nholds; i++) p = get_field(p, &holds[i]);
  v->state = e->confirmed ? RESV_STATE_CONFIRMED : RESV_STATE_PENDING;
  v->expires_at = expires_of(e);
  v->version = version_of(e);
  v->holds = holds;
  v->nholds = e->nholds;
}

/* The entry at *slot (NULL: none, then key's new one) rewritten as the
 * decision's record: the request's owner's, its holds changed as d says.
 * key: r->key, or one of a call of several keys. */
static bool write_record(stripe_t *s, entry_t **slot, uint32_t hash, const resv_key_t *key,
                         const resv_request_t *r, const resv__decision_t *d,
                         resv_error_t *err) {
  entry_t *e = *slot;
  bool only = d->holds == RESV__HOLDS_ONLY;
  if (!e) {
    if (!(e = new_entry(hash, key, &r->owner, only ? &r->attempt : NULL, err))) return false;
    link_new(s, slot, e); /* slot is stale from here on, e is not */
  } else if (d->new_owner || only) {
    if (!(e = set_owner(&s->bytes, slot, &r->owner, only ? field_size(&r->attempt) : 0, err)))
      return false;
    if (only) put_hold(e, &r->attempt);
  } else if (d->holds == RESV__HOLDS_ADD) {
    if (!(e = make_room(&s->bytes, slot, field_size(&r->attempt), err))) return false;
    put_hold(e, &r->attempt);
  } else if (d->holds == RESV__HOLDS_PULL) {
    pull_hold(e, &r->attempt);
  } else if (d->holds == RESV__HOLDS_CLEAR) {
    clear_holds(e);
  }
  e->confirmed = d->state == RESV_STATE_CONFIRMED;
  e->when = e->confirmed ? d->version : d->expires_at;
  if (!e->confirmed) note_expiry(s, e->when);
  return true;
}

static bool apply(stripe_t *s, entry_t **slot, uint32_t hash, const resv_key_t *key,
                  const resv_request_t *r, const resv__decision_t *d, resv_error_t *err) {
  if (d->write == RESV__WRITE_DELETE) unlink_entry(s, slot);
  if (d->write != RESV__WRITE_RECORD) return true;
  return write_record(s, slot, hash, key, r, d, err);
}

/* One request on the entry at *slot: the rules decide (rules.c), the
 * answer is filled from the entry as it is, then the decision written. */
static bool run(stripe_t *s, entry_t **slot, uint32_t hash, const resv_request_t *r,
                int64_t now, int32_t max_holds, resv_answer_t *a, resv_error_t *err) {
  const entry_t *e = *slot;
  resv_str_t on_stack[VIEW_HOLDS_ON_STACK], *holds = on_stack;
  if (e && e->nholds > VIEW_HOLDS_ON_STACK && !(holds = malloc(e->nholds * sizeof *holds)))
    return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
  resv__view_t v;
  resv__decision_t d;
  view_of(e, holds, &v);
  bool ok = resv__rules_decide(&v, r, now, max_holds, &d, err) &&
            resv__rules_answer(&v, &d, r, a, err) && apply(s, slot, hash, &r->key, r, &d, err);
  if (holds != on_stack) free(holds);
  return ok;
}

/* A request on a type without a table, where no key has a record: only
 * a get, an abandon or a release comes here, and none of them writes on
 * an absent key. */
static bool run_absent(const resv_request_t *r, int64_t now, int32_t max_holds,
                       resv_answer_t *a, resv_error_t *err) {
  resv__view_t v = {.state = RESV_STATE_NONE};
  resv__decision_t d;
  return resv__rules_decide(&v, r, now, max_holds, &d, err) &&
         resv__rules_answer(&v, &d, r, a, err);
}

/* ---- several keys ---------------------------------------------------- */

/* Locks the stripes of set (bit i: stripe i) in stripe order, the one
 * order every call of several keys takes, so two of them never wait on
 * each other's stripes in a circle; a call of one key holds one stripe. */
static void lock_stripes(table_t *t, uint64_t set) {
  for (; set; set &= set - 1) /* the lowest stripe left first */
    pthread_mutex_lock(&t->stripes[__builtin_ctzll(set)].mutex);
}

/* Reclaims a step in each stripe of set, then unlocks them. */
static void unlock_stripes(table_t *t, uint64_t set, int64_t limit) {
  for (; set; set &= set - 1) {
    stripe_t *s = &t->stripes[__builtin_ctzll(set)];
    reclaim_step(s, limit);
    pthread_mutex_unlock(&s->mutex);
  }
}

/* The slot of key k in t, its stripe locked; none (NULL, never written
 * through: only a key that is there or a call that writes finds a real
 * slot) when there is no table or no bucket for it. False without memory. */
static bool slot_of(table_t *t, uint32_t hash, const resv_key_t *k, bool writes,
                    entry_t ***slot, entry_t **none, resv_error_t *err) {
  *slot = none;
  if (t && !(*slot = find_slot(&t->stripes[hash & (STRIPES - 1)], hash, k, writes, none)))
    return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
  return true;
}

/* The views of r's keys into v, their holds decoded into *holds (room
 * for VIEW_HOLDS_ON_STACK; past that an allocation, the caller's to free).
 * slot: room for r->nkeys slots, each key's found once. A find
 * never moves a stripe's chains (only the writes do), so each slot stays
 * right until a write to its stripe. */
static bool views_of(table_t *t, const resv_request_t *r, const uint32_t *hash, bool writes,
                     resv__view_t *v, entry_t ***slot, entry_t **none, resv_str_t **holds,
                     resv_error_t *err) {
  size_t total = 0, at = 0;
  for (size_t i = 0; i < r->nkeys; i++) {
    if (!slot_of(t, hash[i], &r->keys[i], writes, &slot[i], none, err)) return false;
    total += *slot[i] ? (*slot[i])->nholds : 0;
  }
  if (total > VIEW_HOLDS_ON_STACK && !(*holds = malloc(total * sizeof **holds)))
    return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
  for (size_t i = 0; i < r->nkeys; i++) {
    const entry_t *e = *slot[i];
    view_of(e, *holds + at, &v[i]);
    at += e ? e->nholds : 0;
  }
  return true;
}

/* Writes each key's decision. When two keys share a stripe (distinct:
 * false), a write to one may move the chains the other's slot points
 * into, so each slot is found anew; else views_of's slots still hold. */
static bool apply_all(table_t *t, const resv_request_t *r, const uint32_t *hash,
                      entry_t ***slot, bool distinct, const resv__decision_t *d,
                      resv_error_t *err) {
  for (size_t i = 0; i < r->nkeys; i++) {
    if (d[i].write == RESV__WRITE_NOTHING) continue;
    const resv_key_t *key = &r->keys[i];
    stripe_t *s = &t->stripes[hash[i] & (STRIPES - 1)];
    entry_t *none = NULL, **at = distinct ? slot[i] : find_slot(s, hash[i], key, true, &none);
    if (!at) return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
    if (!apply(s, at, hash[i], key, r, &d[i], err)) return false;
  }
  return true;
}

/* What a call of several keys keeps per key: on the stack up to
 * ALL_ON_STACK keys (max_keys' default), else in one allocation. */
#define ALL_ON_STACK 16
typedef struct per_key {
  resv__view_t v[ALL_ON_STACK];
  resv__decision_t d[ALL_ON_STACK];
  entry_t **slot[ALL_ON_STACK];
  uint32_t hash[ALL_ON_STACK];
} per_key_t;

/* A reserve_all, confirm_all or abandon_all (t NULL: a type never written,
 * only for an abandon_all): every key's stripe locked at once, the rules
 * decide on every key (rules.c), the answers filled, then the writes. */
static bool run_all(table_t *t, const resv_request_t *r, int64_t now, int32_t max_holds,
                    int64_t limit, bool writes, resv_answer_t *a, resv_error_t *err) {
  size_t n = r->nkeys;
  per_key_t on_stack;
  resv__view_t *v = on_stack.v;
  resv__decision_t *d = on_stack.d;
  entry_t ***slot = on_stack.slot, *none = NULL;
  uint32_t *hash = on_stack.hash;
  resv_str_t holds_on_stack[VIEW_HOLDS_ON_STACK], *holds = holds_on_stack;
  if (n > ALL_ON_STACK) {
    if (!(v = malloc(n * (sizeof *v + sizeof *d + sizeof *slot + sizeof *hash))))
      return resv__fail(err, RESV_ENOMEM, "out of memory for a call of several keys");
    d = (resv__decision_t *)(v + n);
    slot = (entry_t ***)(void *)(d + n);
    hash = (uint32_t *)(void *)(slot + n);
  }
  uint64_t set = 0;
  int32_t status;
  for (size_t i = 0; i < n; i++) {
    hash[i] = entry_hash(&r->keys[i]);
    set |= UINT64_C(1) << (hash[i] & (STRIPES - 1));
  }
  if (t) lock_stripes(t, set);
  bool distinct = (size_t)__builtin_popcountll(set) == n; /* no stripe twice */
  bool ok = views_of(t, r, hash, writes, v, slot, &none, &holds, err) &&
            resv__rules_decide_all(v, r, now, max_holds, d, &status, err) &&
            resv__rules_answer_all(v, d, status, r, a, err) &&
            (!t || apply_all(t, r, hash, slot, distinct, d, err));
  if (t) unlock_stripes(t, set, limit);
  if (holds != holds_on_stack) free(holds);
  if (v != on_stack.v) free(v);
  return ok;
}

static table_t *table_new(void) {
  table_t *t = calloc(1, sizeof *t);
  if (t)
    for (size_t i = 0; i < STRIPES; i++) {
      pthread_mutex_init(&t->stripes[i].mutex, NULL);
      t->stripes[i].min_expiry = t->stripes[i].round_min = INT64_MAX;
    }
  return t;
}

static void table_free(table_t *t) {
  if (!t) return;
  for (size_t i = 0; i < STRIPES; i++) {
    stripe_t *s = &t->stripes[i];
    for (size_t b = 0; b < s->nbuckets; b++) {
      entry_t *e = s->buckets[b];
      while (e) {
        entry_t *next = e->next;
        free(e);
        e = next;
      }
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mutex);
  }
  free(t);
}

/* The type's table, made on the first call that needs one: every call
 * but a get may write (abandon and release only delete, and find nothing
 * in a table that is not there). Racing first calls each make one; the
 * first to publish it wins and the others free theirs. */
static table_t *type_table(lazy_table_t *lazy, bool make, resv_error_t *err) {
  table_t *t = atomic_load_explicit(&lazy->table, memory_order_acquire);
  if (t || !make) return t;
  table_t *mine = table_new();
  if (!mine) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
    return NULL;
  }
  if (atomic_compare_exchange_strong_explicit(&lazy->table, &t, mine,
                                              memory_order_acq_rel,
                                              memory_order_acquire))
    return mine;
  table_free(mine);
  return t;
}

/* sweep: every stripe in turn, each under its lock for its walk. */
static bool do_sweep(table_t *t, int64_t limit, resv_answer_t *a, resv_error_t *err) {
  int64_t n = 0;
  for (size_t i = 0; t && i < STRIPES; i++) {
    stripe_t *s = &t->stripes[i];
    pthread_mutex_lock(&s->mutex);
    n += (int64_t)reclaim_all(s, limit);
    pthread_mutex_unlock(&s->mutex);
  }
  if (!resv__answer_status(a, RESV_SWEPT, err)) return false;
  a->count = n;
  return true;
}

static bool memory_execute(void *backend, resv_type_t *type,
                           const resv_request_t *r, int64_t now,
                           int64_t deadline, resv_answer_t *a, resv_error_t *err) {
  const memory_t *m = backend;
  int64_t limit = resv__rules_sweep_limit(now, m->grace_ms);
  bool writes = r->op == RESV_OP_RESERVE || r->op == RESV_OP_CONFIRM ||
                r->op == RESV_OP_RESERVE_ALL || r->op == RESV_OP_CONFIRM_ALL;
  table_t *t = type_table(type->backend_state, writes, err);
  if (r->op == RESV_OP_SWEEP) return do_sweep(t, limit, a, err);
  if (!t && writes) return false;
  if (resv__op_is_all(r->op)) return run_all(t, r, now, m->max_holds, limit, writes, a, err);
  if (!t) /* nothing was ever written: every key is absent */
    return run_absent(r, now, m->max_holds, a, err);
  uint32_t hash = entry_hash(&r->key);
  stripe_t *s = &t->stripes[hash & (STRIPES - 1)];
  bool ok;
  entry_t *none = NULL;
  pthread_mutex_lock(&s->mutex);
  entry_t **slot = find_slot(s, hash, &r->key, writes, &none);
  if (!slot) {
    pthread_mutex_unlock(&s->mutex);
    return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
  }
  ok = run(s, slot, hash, r, now, m->max_holds, a, err);
  /* After the call (its slot may be reclaimed or moved by the step). */
  reclaim_step(s, limit);
  pthread_mutex_unlock(&s->mutex);
  return ok;
}

/* ---- the backend ----------------------------------------------------- */

static void memory_type_free(void *backend, resv_type_t *type) {
  lazy_table_t *lazy = type->backend_state;
  if (!lazy) return;
  table_free(atomic_load(&lazy->table));
  free(lazy);
  type->backend_state = NULL;
}

static bool memory_type_init(void *backend, resv_type_t *type, resv_error_t *err) {
  lazy_table_t *lazy = malloc(sizeof *lazy);
  if (!lazy) return resv__fail(err, RESV_ENOMEM, "out of memory for a type");
  atomic_init(&lazy->table, NULL);
  type->backend_state = lazy;
  return true;
}

static void memory_usage(void *backend, resv_type_t *type, int64_t *entries,
                         int64_t *bytes) {
  lazy_table_t *lazy = type->backend_state;
  table_t *t = lazy ? atomic_load_explicit(&lazy->table, memory_order_acquire) : NULL;
  if (!t) return;
  *bytes += (int64_t)sizeof *t;
  for (size_t i = 0; i < STRIPES; i++) {
    stripe_t *s = &t->stripes[i];
    pthread_mutex_lock(&s->mutex);
    *entries += (int64_t)s->count;
    *bytes += (int64_t)s->bytes;
    pthread_mutex_unlock(&s->mutex);
  }
}

static void memory_describe(void *backend, char *buf, size_t size) {
  snprintf(buf, size, "resv store (memory)");
}

static void memory_destroy(void *backend) { free(backend); }

static const resv__backend_ops_t memory_ops = {
    .name = "memory",
    .runs_inline = true,
    .several_keys = true,
    .sampled = true,
    .type_init = memory_type_init,
    .type_free = memory_type_free,
    .execute = memory_execute,
    .describe = memory_describe,
    .usage = memory_usage,
    .is_sharded = NULL,
    .destroy = memory_destroy,
};

void *resv__memory_open(const resv_options_t *options,
                        const resv__backend_ops_t **ops, resv_error_t *err) {
  memory_t *m = malloc(sizeof *m);
  if (!m) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a store");
    return NULL;
  }
  m->max_holds = options->max_holds;
  m->grace_ms = options->sweep_grace_ms;
  *ops = &memory_ops;
  return m;
}
