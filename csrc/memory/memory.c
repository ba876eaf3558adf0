/* memory.c: the embedded store, and the reference model of the MongoDB one.
 *
 * Each aggregate type has its own table (as each has its own collection),
 * made by the type's first write, split into stripes by the key's hash,
 * each stripe a chained hash table under its own mutex (its buckets made
 * with its first entry). A call hashes its key, locks one stripe, does O(1)
 * work and copies its answer out; no lock is held across anything slow and
 * calls on different keys rarely meet. An entry is one allocation holding
 * its key, owner and holds, so a new key costs one malloc (there were four:
 * entry, owner, holds array, each hold's bytes), and is compact: 106.7
 * bytes a live reservation with its bucket (csrc/test/test_memory.c).
 *
 * The rules are docs/design.md section 5 read as the MongoDB store executes them, so
 * both give the same answers for the same calls and clock: a reserve or a
 * confirm matches a reservation only when it is the owner's or pending and
 * expired (expires_at <= now), and otherwise meets it as a conflict; an
 * abandon pulls its hold and deletes only a pending reservation of the
 * owner left without holds.
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRIPES 64 /* a power of two */
#define INITIAL_BUCKETS 16
/* Buckets a call visits for reclaiming, and how many more it may visit
 * while they hold garbage; see the comment at the top. */
#define RECLAIM_BUCKETS 2
#define RECLAIM_BUCKETS_MAX 8

/* An entry is one allocation: a 32-byte header, then its fields in data_,
 * each a length (a varint: 1 byte up to 127, at most 3 for max_string's
 * 2^20) and its bytes: the key (tenant, namespace, key), the owner
 * (tenant, id), then each hold. No slack: a join that outgrows the entry
 * reallocs it (and relinks it through its slot). A reservation with a
 * 20-byte key and a 10-byte owner id takes a 96-byte block; it was 160
 * with a 80-byte header of fixed-width lengths and 24 bytes of slack. */
typedef struct entry {
  struct entry *next;  /* bucket chain */
  int64_t when;        /* pending: expires_at; confirmed: version */
  uint32_t hash;       /* hash_key's */
  uint32_t nholds : 31;
  uint32_t confirmed : 1;
  uint32_t used;       /* bytes of data_ in use */
  uint32_t cap;        /* bytes of data_ allocated */
  unsigned char data_[];
} entry_t;

_Static_assert(sizeof(entry_t) == 32, "an entry's header is 32 bytes");

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
 * that is only looked up or read costs this pointer, not the 4 kB of
 * stripes; each stripe's buckets come with its first entry too: an empty
 * type was 13.7 kB). */
typedef struct lazy_table {
  _Atomic(table_t *) table;
} lazy_table_t;

/* The memory store keeps its reservations in its types: the backend holds
 * only the options its calls read. */
typedef struct memory {
  int32_t max_holds;
  int64_t grace_ms; /* sweep_grace_ms */
} memory_t;

/* ---- keys ----------------------------------------------------------- */

#define HASH_K UINT64_C(0x9e3779b97f4a7c15)

static uint64_t hash_word(uint64_t h, uint64_t w) {
  return ((h << 5 | h >> 59) ^ w) * HASH_K;
}

/* Eight bytes at a time, then the rest, then the length (which keeps
 * ("ab", "c") and ("a", "bc") apart). */
static uint64_t hash_bytes(uint64_t h, const char *p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, sizeof w);
    h = hash_word(h, w);
  }
  if (i < n) {
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    h = hash_word(h, w);
  }
  return hash_word(h, n);
}

/* The three parts of the key, mixed (a multiply carries the low bits up;
 * the shifts bring the high ones down) and folded to 32 bits, of which the
 * stripe takes the low 6 and the bucket the rest. */
static uint32_t hash_key(const resv_key_t *k) {
  uint64_t h = 0;
  h = hash_bytes(h, k->tenant.ptr, k->tenant.len);
  h = hash_bytes(h, k->ns.ptr, k->ns.len);
  h = hash_bytes(h, k->key.ptr, k->key.len);
  h ^= h >> 33;
  h *= UINT64_C(0xff51afd7ed558ccd);
  h ^= h >> 33;
  return (uint32_t)h;
}

/* ---- fields: a varint length, then the bytes --------------------------- */

static size_t varint_size(size_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static size_t field_size(const resv_str_t *s) { return varint_size(s->len) + s->len; }

/* Reads the field at p into *out; returns where the next one starts. */
static const unsigned char *get_field(const unsigned char *p, resv_str_t *out) {
  size_t len = 0;
  for (int shift = 0;; shift += 7) {
    unsigned char b = *p++;
    len |= (size_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  out->ptr = (const char *)p;
  out->len = len;
  return p + len;
}

/* Strings here are mostly short (an owner id, an attempt, a tenant): up
 * to 16 bytes they are compared in two overlapping words, without a call. */
static bool same_str(const resv_str_t *a, const resv_str_t *b) {
  size_t n = a->len;
  if (n != b->len) return false;
  if (n >= 8 && n <= 16) {
    uint64_t x, y, u, v;
    memcpy(&x, a->ptr, 8);
    memcpy(&y, b->ptr, 8);
    memcpy(&u, a->ptr + n - 8, 8);
    memcpy(&v, b->ptr + n - 8, 8);
    return x == y && u == v;
  }
  if (n < 8) {
    for (size_t i = 0; i < n; i++)
      if (a->ptr[i] != b->ptr[i]) return false;
    return true;
  }
  return memcmp(a->ptr, b->ptr, n) == 0;
}

/* Steps past n fields from p. */
static const unsigned char *skip_fields(const unsigned char *p, int n) {
  resv_str_t s;
  while (n--) p = get_field(p, &s);
  return p;
}

/* Where the owner's fields start, and where the holds do. */
static const unsigned char *owner_at(const entry_t *e) { return skip_fields(e->data_, 3); }
static size_t holds_start(const entry_t *e) {
  return (size_t)(skip_fields(owner_at(e), 2) - e->data_);
}

static bool entry_is(const entry_t *e, uint32_t hash, const resv_key_t *k) {
  if (e->hash != hash) return false;
  resv_str_t s;
  const unsigned char *p = get_field(e->data_, &s);
  if (!same_str(&s, &k->tenant)) return false;
  p = get_field(p, &s);
  if (!same_str(&s, &k->ns)) return false;
  get_field(p, &s);
  return same_str(&s, &k->key);
}

static bool owned_by(const entry_t *e, const resv_owner_t *o) {
  resv_str_t s;
  const unsigned char *p = get_field(owner_at(e), &s);
  if (!same_str(&s, &o->tenant)) return false;
  get_field(p, &s);
  return same_str(&s, &o->id);
}

/* ---- entries -------------------------------------------------------- */

static int64_t expires_of(const entry_t *e) { return e->confirmed ? 0 : e->when; }
static int64_t version_of(const entry_t *e) { return e->confirmed ? e->when : 0; }

static void put_field(entry_t *e, const resv_str_t *s) {
  size_t v = s->len;
  while (v >= 0x80) {
    e->data_[e->used++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  e->data_[e->used++] = (unsigned char)v;
  if (s->len) memcpy(e->data_ + e->used, s->ptr, s->len);
  e->used += (uint32_t)s->len;
}

static void put_hold(entry_t *e, const resv_str_t *attempt) {
  put_field(e, attempt);
  e->nholds++;
}

/* Makes an entry for key, owned by owner, held by attempt (NULL: none). */
static entry_t *new_entry(uint32_t hash, const resv_key_t *k,
                          const resv_owner_t *o, const resv_str_t *attempt,
                          resv_error_t *err) {
  size_t need = field_size(&k->tenant) + field_size(&k->ns) + field_size(&k->key) +
                field_size(&o->tenant) + field_size(&o->id) +
                (attempt ? field_size(attempt) : 0);
  entry_t *e = malloc(sizeof *e + need);
  if (!e) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a reservation");
    return NULL;
  }
  e->next = NULL;
  e->when = 0;
  e->hash = hash;
  e->nholds = 0;
  e->confirmed = false;
  e->used = 0;
  e->cap = (uint32_t)need;
  put_field(e, &k->tenant);
  put_field(e, &k->ns);
  put_field(e, &k->key);
  put_field(e, &o->tenant);
  put_field(e, &o->id);
  if (attempt) put_hold(e, attempt);
  return e;
}

/* Makes room for `more` bytes in the entry at *slot, moving it if it must
 * (the slot is updated; the chain's link is in the entry and moves with
 * it). Returns the entry, or NULL (entry unchanged) without memory. */
static entry_t *make_room(stripe_t *s, entry_t **slot, size_t more,
                          resv_error_t *err) {
  entry_t *e = *slot;
  size_t need = (size_t)e->used + more;
  if (need <= e->cap) return e;
  if (need > UINT32_MAX) {
    resv__fail(err, RESV_ENOMEM, "a reservation's holds would pass 4 GiB");
    return NULL;
  }
  size_t cap = (size_t)e->cap * 2 > need ? (size_t)e->cap * 2 : need;
  if (cap > UINT32_MAX) cap = need;
  e = realloc(e, sizeof *e + cap);
  if (!e) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a hold");
    return NULL;
  }
  s->bytes += cap - e->cap;
  e->cap = (uint32_t)cap;
  *slot = e;
  return e;
}

static void clear_holds(entry_t *e) {
  e->used = (uint32_t)holds_start(e);
  e->nholds = 0;
}

/* Where the hold `attempt` starts in data_, or 0 (data_ starts with the
 * key, never a hold) when the entry has none such; *end gets its end. */
static size_t find_hold(const entry_t *e, const resv_str_t *attempt, size_t *end) {
  const unsigned char *p = e->data_ + holds_start(e);
  resv_str_t h;
  for (uint32_t i = 0; i < e->nholds; i++) {
    const unsigned char *at = p;
    p = get_field(p, &h);
    if (same_str(&h, attempt)) {
      *end = (size_t)(p - e->data_);
      return (size_t)(at - e->data_);
    }
  }
  return 0;
}

static bool has_hold(const entry_t *e, const resv_str_t *attempt) {
  size_t end;
  return find_hold(e, attempt, &end) != 0;
}

/* Adds attempt to the holds of the entry at *slot unless it is there. */
static entry_t *add_hold(stripe_t *s, entry_t **slot, const resv_str_t *attempt,
                         resv_error_t *err) {
  entry_t *e = *slot;
  if (has_hold(e, attempt)) return e;
  if (!(e = make_room(s, slot, field_size(attempt), err))) return NULL;
  put_hold(e, attempt);
  return e;
}

static void pull_hold(entry_t *e, const resv_str_t *attempt) {
  size_t end, at = find_hold(e, attempt, &end);
  if (!at) return;
  memmove(e->data_ + at, e->data_ + end, e->used - end);
  e->used -= (uint32_t)(end - at);
  e->nholds--;
}

/* Gives the entry at *slot to owner, without holds, with room for `extra`
 * more bytes (a first hold). Returns the entry (maybe moved), or NULL
 * without memory, the entry then unchanged. */
static entry_t *set_owner(stripe_t *s, entry_t **slot, const resv_owner_t *o,
                          size_t extra, resv_error_t *err) {
  entry_t *e = *slot;
  uint32_t start = (uint32_t)(owner_at(e) - e->data_);
  size_t size = field_size(&o->tenant) + field_size(&o->id);
  if (start + size + extra > e->cap) {
    uint32_t used = e->used;
    e->used = start; /* nothing after the key needs keeping */
    if (!(e = make_room(s, slot, size + extra, err))) {
      (*slot)->used = used;
      return NULL;
    }
  }
  e->used = start;
  e->nholds = 0;
  put_field(e, &o->tenant);
  put_field(e, &o->id);
  return e;
}

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
    if (!e->confirmed && e->when <= limit) {
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

/* ---- answers -------------------------------------------------------- */

/* Holds copied into an answer without a heap array up to this many. */
#define ANSWER_HOLDS_ON_STACK 16

static bool answer_entry(resv_answer_t *a, int32_t status, const entry_t *e,
                         bool with_holds, resv_error_t *err) {
  resv_str_t tenant, id;
  const unsigned char *p = get_field(get_field(owner_at(e), &tenant), &id);
  resv_str_t on_stack[ANSWER_HOLDS_ON_STACK], *holds = on_stack;
  size_t nholds = with_holds ? e->nholds : 0;
  if (nholds > ANSWER_HOLDS_ON_STACK && !(holds = malloc(nholds * sizeof *holds)))
    return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
  for (size_t i = 0; i < nholds; i++) p = get_field(p, &holds[i]);
  bool ok = resv__answer_set(a, status,
                             e->confirmed ? RESV_STATE_CONFIRMED : RESV_STATE_PENDING,
                             expires_of(e), version_of(e), &tenant, &id,
                             nholds ? holds : NULL, nholds, err);
  if (holds != on_stack) free(holds);
  return ok;
}

/* A reservation another owner holds: confirmed, or pending and live. */
static bool held_by_other(const entry_t *e, const resv_owner_t *o, int64_t now) {
  return !owned_by(e, o) && (e->confirmed || e->when > now);
}

/* ---- operations ------------------------------------------------------ */

static bool do_reserve(stripe_t *s, entry_t **slot, uint32_t hash,
                       const resv_request_t *r, int64_t now, int32_t max_holds,
                       resv_answer_t *a, resv_error_t *err) {
  entry_t *e = *slot;
  int64_t expires;
  /* First, as the MongoDB store computes it before its round trip. */
  if (!resv__expiry(now, r->ttl_ms, &expires, err)) return false;
  if (e && held_by_other(e, &r->owner, now))
    return answer_entry(a, RESV_CONFLICT, e, false, err);
  if (e && e->confirmed) /* ours: kept exactly as it is */
    return answer_entry(a, RESV_CONFIRMED, e, false, err);
  if (e && e->when > now) { /* our live pending one: join it */
    if (e->nholds >= (uint32_t)max_holds && !has_hold(e, &r->attempt))
      return resv__fail_holds_full(err, max_holds);
    if (!(e = add_hold(s, slot, &r->attempt, err))) return false;
    if (expires > e->when) e->when = expires; /* later: no bound moves */
    return answer_entry(a, RESV_RESERVED, e, true, err);
  }
  /* A new key, or an expired pending reservation of anyone: start afresh. */
  if (!e) {
    if (!(e = new_entry(hash, &r->key, &r->owner, &r->attempt, err))) return false;
    link_new(s, slot, e);
  } else {
    if (!(e = set_owner(s, slot, &r->owner, field_size(&r->attempt), err))) return false;
    put_hold(e, &r->attempt);
  }
  e->confirmed = false;
  e->when = expires;
  note_expiry(s, expires);
  return answer_entry(a, RESV_RESERVED, e, true, err);
}

static bool do_confirm(stripe_t *s, entry_t **slot, uint32_t hash,
                       const resv_request_t *r, int64_t now,
                       resv_answer_t *a, resv_error_t *err) {
  entry_t *e = *slot;
  if (e && held_by_other(e, &r->owner, now))
    return answer_entry(a, RESV_CONFLICT, e, false, err);
  int64_t version = r->version;
  if (e && e->confirmed && e->when > version) version = e->when;
  if (!e) {
    if (!(e = new_entry(hash, &r->key, &r->owner, NULL, err))) return false;
    link_new(s, slot, e);
  } else if (!owned_by(e, &r->owner)) {
    if (!(e = set_owner(s, slot, &r->owner, 0, err))) return false;
  } else {
    clear_holds(e);
  }
  e->confirmed = true;
  e->when = version;
  return answer_entry(a, RESV_CONFIRMED, e, false, err);
}

static bool do_abandon(stripe_t *s, entry_t **slot, const resv_request_t *r,
                       resv_answer_t *a, resv_error_t *err) {
  entry_t *e = *slot;
  if (!e || !owned_by(e, &r->owner)) return resv__answer_status(a, RESV_ABSENT, err);
  pull_hold(e, &r->attempt);
  if (e->confirmed || e->nholds > 0) return resv__answer_status(a, RESV_KEPT, err);
  unlink_entry(s, slot);
  return resv__answer_status(a, RESV_ABANDONED, err);
}

static bool do_release(stripe_t *s, entry_t **slot, const resv_request_t *r,
                       resv_answer_t *a, resv_error_t *err) {
  if (!*slot || !owned_by(*slot, &r->owner)) return resv__answer_status(a, RESV_ABSENT, err);
  unlink_entry(s, slot);
  return resv__answer_status(a, RESV_RELEASED, err);
}

static bool do_get(const entry_t *e, int64_t now, resv_answer_t *a, resv_error_t *err) {
  if (!e) return resv__answer_status(a, RESV_ABSENT, err);
  int32_t status = e->confirmed ? RESV_CONFIRMED
                   : e->when > now ? RESV_PENDING : RESV_EXPIRED;
  return answer_entry(a, status, e, !e->confirmed, err);
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
  int64_t limit = resv__add_ms_sat(now, -m->grace_ms);
  bool writes = r->op == RESV_OP_RESERVE || r->op == RESV_OP_CONFIRM;
  table_t *t = type_table(type->backend_state, writes, err);
  if (r->op == RESV_OP_SWEEP) return do_sweep(t, limit, a, err);
  if (!t && writes) return false;
  if (!t) { /* nothing was ever written: every key is absent */
    if (r->op == RESV_OP_ABANDON || r->op == RESV_OP_RELEASE || r->op == RESV_OP_GET)
      return resv__answer_status(a, RESV_ABSENT, err);
    return resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
  uint32_t hash = hash_key(&r->key);
  stripe_t *s = &t->stripes[hash & (STRIPES - 1)];
  bool ok = false;
  entry_t *none = NULL;
  pthread_mutex_lock(&s->mutex);
  entry_t **slot = find_slot(s, hash, &r->key, writes, &none);
  if (!slot) {
    pthread_mutex_unlock(&s->mutex);
    return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
  }
  switch (r->op) {
  case RESV_OP_RESERVE:
    ok = do_reserve(s, slot, hash, r, now, m->max_holds, a, err);
    break;
  case RESV_OP_CONFIRM: ok = do_confirm(s, slot, hash, r, now, a, err); break;
  case RESV_OP_ABANDON: ok = do_abandon(s, slot, r, a, err); break;
  case RESV_OP_RELEASE: ok = do_release(s, slot, r, a, err); break;
  case RESV_OP_GET: ok = do_get(*slot, now, a, err); break;
  default: ok = resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
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
