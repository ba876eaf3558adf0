/* memory.c: the embedded store, and the reference model of the MongoDB one.
 *
 * Each aggregate type has its own table (as each has its own collection),
 * split into stripes by the key's hash, each stripe a chained hash table
 * under its own mutex. A call hashes its key, locks one stripe, does O(1)
 * work and copies its answer out; no lock is held across anything slow and
 * calls on different keys rarely meet.
 *
 * The rules are SPEC section 5 read as the MongoDB store executes them, so
 * both give the same answers for the same calls and clock: a reserve or a
 * confirm matches a reservation only when it is the owner's or pending and
 * expired (expires_at <= now), and otherwise meets it as a conflict; an
 * abandon pulls its hold and deletes only a pending reservation of the
 * owner left without holds. Expired reservations stay until taken over,
 * abandoned or released, exactly as their documents stay in MongoDB. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRIPES 64 /* a power of two */
#define INITIAL_BUCKETS 16

typedef struct entry {
  struct entry *next; /* bucket chain */
  uint64_t hash;
  char *owner; /* owner tenant bytes, then owner id bytes */
  size_t owner_tenant_len;
  size_t owner_id_len;
  bool confirmed;
  int64_t expires_at; /* pending only */
  int64_t version;    /* confirmed only */
  resv_str_t *holds;  /* each hold's bytes are malloc'd */
  size_t nholds;
  size_t holds_cap;
  size_t tenant_len; /* the key: tenant, namespace, key bytes in key_[] */
  size_t ns_len;
  size_t key_len;
  char key_[];
} entry_t;

typedef struct stripe {
  pthread_mutex_t mutex;
  entry_t **buckets;
  size_t nbuckets; /* a power of two */
  size_t count;
} stripe_t;

typedef struct table {
  stripe_t stripes[STRIPES];
} table_t;

/* ---- keys ----------------------------------------------------------- */

static uint64_t hash_bytes(uint64_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

/* FNV-1a over the three parts, separated by 0xff, a byte UTF-8 never has,
 * so ("ab", "c") and ("a", "bc") hash apart. */
static uint64_t hash_key(const resv_key_t *k) {
  static const char sep = (char)0xff;
  uint64_t h = 0xcbf29ce484222325ULL;
  h = hash_bytes(h, k->tenant.ptr, k->tenant.len);
  h = hash_bytes(h, &sep, 1);
  h = hash_bytes(h, k->ns.ptr, k->ns.len);
  h = hash_bytes(h, &sep, 1);
  h = hash_bytes(h, k->key.ptr, k->key.len);
  /* Mix the high bits down: the stripe takes the low bits. */
  return h ^ (h >> 29);
}

static bool same_bytes(const char *a, size_t alen, const resv_str_t *b) {
  return alen == b->len && (alen == 0 || memcmp(a, b->ptr, alen) == 0);
}

static bool entry_is(const entry_t *e, uint64_t hash, const resv_key_t *k) {
  return e->hash == hash && same_bytes(e->key_, e->tenant_len, &k->tenant) &&
         same_bytes(e->key_ + e->tenant_len, e->ns_len, &k->ns) &&
         same_bytes(e->key_ + e->tenant_len + e->ns_len, e->key_len, &k->key);
}

static bool owned_by(const entry_t *e, const resv_owner_t *o) {
  return same_bytes(e->owner, e->owner_tenant_len, &o->tenant) &&
         same_bytes(e->owner + e->owner_tenant_len, e->owner_id_len, &o->id);
}

/* ---- entries -------------------------------------------------------- */

static void clear_holds(entry_t *e) {
  for (size_t i = 0; i < e->nholds; i++) free((void *)e->holds[i].ptr);
  e->nholds = 0;
}

static void free_entry(entry_t *e) {
  clear_holds(e);
  free(e->holds);
  free(e->owner);
  free(e);
}

static bool set_owner(entry_t *e, const resv_owner_t *o, resv_error_t *err) {
  char *owner = malloc(o->tenant.len + o->id.len + 1);
  if (!owner) return resv__fail(err, RESV_ENOMEM, "out of memory for an owner");
  if (o->tenant.len) memcpy(owner, o->tenant.ptr, o->tenant.len);
  if (o->id.len) memcpy(owner + o->tenant.len, o->id.ptr, o->id.len);
  free(e->owner);
  e->owner = owner;
  e->owner_tenant_len = o->tenant.len;
  e->owner_id_len = o->id.len;
  return true;
}

static bool has_hold(const entry_t *e, const resv_str_t *attempt) {
  for (size_t i = 0; i < e->nholds; i++)
    if (same_bytes(e->holds[i].ptr, e->holds[i].len, attempt)) return true;
  return false;
}

static bool add_hold(entry_t *e, const resv_str_t *attempt, resv_error_t *err) {
  if (has_hold(e, attempt)) return true;
  if (e->nholds == e->holds_cap) {
    size_t cap = e->holds_cap ? e->holds_cap * 2 : 2;
    resv_str_t *holds = realloc(e->holds, cap * sizeof *holds);
    if (!holds) return resv__fail(err, RESV_ENOMEM, "out of memory for a hold");
    e->holds = holds;
    e->holds_cap = cap;
  }
  char *copy = malloc(attempt->len ? attempt->len : 1);
  if (!copy) return resv__fail(err, RESV_ENOMEM, "out of memory for a hold");
  memcpy(copy, attempt->ptr, attempt->len);
  e->holds[e->nholds].ptr = copy;
  e->holds[e->nholds].len = attempt->len;
  e->nholds++;
  return true;
}

static void pull_hold(entry_t *e, const resv_str_t *attempt) {
  for (size_t i = 0; i < e->nholds; i++) {
    if (same_bytes(e->holds[i].ptr, e->holds[i].len, attempt)) {
      free((void *)e->holds[i].ptr);
      memmove(&e->holds[i], &e->holds[i + 1], (e->nholds - i - 1) * sizeof *e->holds);
      e->nholds--;
      return;
    }
  }
}

/* ---- stripes -------------------------------------------------------- */

static entry_t **find_slot(stripe_t *s, uint64_t hash, const resv_key_t *k) {
  entry_t **slot = &s->buckets[(hash >> 6) & (s->nbuckets - 1)];
  while (*slot && !entry_is(*slot, hash, k)) slot = &(*slot)->next;
  return slot;
}

static void grow(stripe_t *s) {
  size_t n = s->nbuckets * 2;
  entry_t **buckets = calloc(n, sizeof *buckets);
  if (!buckets) return; /* stay at this size: slower, still correct */
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
  s->buckets = buckets;
  s->nbuckets = n;
}

static entry_t *insert(stripe_t *s, entry_t **slot, uint64_t hash,
                       const resv_key_t *k, resv_error_t *err) {
  entry_t *e = calloc(1, sizeof *e + k->tenant.len + k->ns.len + k->key.len);
  if (!e) {
    resv__fail(err, RESV_ENOMEM, "out of memory for a reservation");
    return NULL;
  }
  e->hash = hash;
  e->tenant_len = k->tenant.len;
  e->ns_len = k->ns.len;
  e->key_len = k->key.len;
  memcpy(e->key_, k->tenant.ptr, k->tenant.len);
  memcpy(e->key_ + k->tenant.len, k->ns.ptr, k->ns.len);
  memcpy(e->key_ + k->tenant.len + k->ns.len, k->key.ptr, k->key.len);
  *slot = e;
  if (++s->count > s->nbuckets) grow(s);
  return e;
}

static void unlink_entry(stripe_t *s, entry_t **slot) {
  entry_t *e = *slot;
  *slot = e->next;
  s->count--;
  free_entry(e);
}

/* ---- answers -------------------------------------------------------- */

static bool answer_entry(resv_answer_t *a, int32_t status, const entry_t *e,
                         bool with_holds, resv_error_t *err) {
  resv_str_t tenant = {e->owner, e->owner_tenant_len};
  resv_str_t id = {e->owner + e->owner_tenant_len, e->owner_id_len};
  return resv__answer_set(a, status,
                          e->confirmed ? RESV_STATE_CONFIRMED : RESV_STATE_PENDING,
                          e->confirmed ? 0 : e->expires_at,
                          e->confirmed ? e->version : 0, &tenant, &id,
                          with_holds ? e->holds : NULL, with_holds ? e->nholds : 0, err);
}

/* A reservation another owner holds: confirmed, or pending and live. */
static bool held_by_other(const entry_t *e, const resv_owner_t *o, int64_t now) {
  return !owned_by(e, o) && (e->confirmed || e->expires_at > now);
}

/* ---- operations ------------------------------------------------------ */

static bool do_reserve(stripe_t *s, entry_t **slot, uint64_t hash,
                       const resv_request_t *r, int64_t now,
                       resv_answer_t *a, resv_error_t *err) {
  entry_t *e = *slot;
  if (e && held_by_other(e, &r->owner, now))
    return answer_entry(a, RESV_CONFLICT, e, false, err);
  if (e && e->confirmed) /* ours: kept exactly as it is */
    return answer_entry(a, RESV_CONFIRMED, e, false, err);
  if (e && e->expires_at > now) { /* our live pending one: join it */
    if (!add_hold(e, &r->attempt, err)) return false;
    if (now + r->ttl_ms > e->expires_at) e->expires_at = now + r->ttl_ms;
    return answer_entry(a, RESV_RESERVED, e, true, err);
  }
  /* A new key, or an expired pending reservation of anyone: start afresh. */
  bool created = !e;
  if (created && !(e = insert(s, slot, hash, &r->key, err))) return false;
  if (!set_owner(e, &r->owner, err)) goto fail;
  clear_holds(e);
  if (!add_hold(e, &r->attempt, err)) goto fail;
  e->confirmed = false;
  e->version = 0;
  e->expires_at = now + r->ttl_ms;
  return answer_entry(a, RESV_RESERVED, e, true, err);
fail:
  if (created) unlink_entry(s, slot);
  return false;
}

static bool do_confirm(stripe_t *s, entry_t **slot, uint64_t hash,
                       const resv_request_t *r, int64_t now,
                       resv_answer_t *a, resv_error_t *err) {
  entry_t *e = *slot;
  if (e && held_by_other(e, &r->owner, now))
    return answer_entry(a, RESV_CONFLICT, e, false, err);
  int64_t version = r->version;
  if (e && e->confirmed && e->version > version) version = e->version;
  bool created = !e;
  if (created && !(e = insert(s, slot, hash, &r->key, err))) return false;
  if (!owned_by(e, &r->owner) && !set_owner(e, &r->owner, err)) {
    if (created) unlink_entry(s, slot);
    return false;
  }
  clear_holds(e);
  e->confirmed = true;
  e->expires_at = 0;
  e->version = version;
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
                   : e->expires_at > now ? RESV_PENDING : RESV_EXPIRED;
  return answer_entry(a, status, e, !e->confirmed, err);
}

static bool memory_execute(void *backend, resv_type_t *type,
                           const resv_request_t *r, int64_t now,
                           int64_t deadline, resv_answer_t *a, resv_error_t *err) {
  table_t *t = type->backend_state;
  uint64_t hash = hash_key(&r->key);
  stripe_t *s = &t->stripes[hash & (STRIPES - 1)];
  bool ok = false;
  pthread_mutex_lock(&s->mutex);
  entry_t **slot = find_slot(s, hash, &r->key);
  switch (r->op) {
  case RESV_OP_RESERVE: ok = do_reserve(s, slot, hash, r, now, a, err); break;
  case RESV_OP_CONFIRM: ok = do_confirm(s, slot, hash, r, now, a, err); break;
  case RESV_OP_ABANDON: ok = do_abandon(s, slot, r, a, err); break;
  case RESV_OP_RELEASE: ok = do_release(s, slot, r, a, err); break;
  case RESV_OP_GET: ok = do_get(*slot, now, a, err); break;
  default: ok = resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
  pthread_mutex_unlock(&s->mutex);
  return ok;
}

/* ---- the backend ----------------------------------------------------- */

static void memory_type_free(void *backend, resv_type_t *type) {
  table_t *t = type->backend_state;
  if (!t) return;
  for (size_t i = 0; i < STRIPES; i++) {
    stripe_t *s = &t->stripes[i];
    for (size_t b = 0; b < s->nbuckets; b++) {
      entry_t *e = s->buckets[b];
      while (e) {
        entry_t *next = e->next;
        free_entry(e);
        e = next;
      }
    }
    free(s->buckets);
    pthread_mutex_destroy(&s->mutex);
  }
  free(t);
  type->backend_state = NULL;
}

static bool memory_type_init(void *backend, resv_type_t *type, resv_error_t *err) {
  table_t *t = calloc(1, sizeof *t);
  if (!t) return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
  type->backend_state = t;
  for (size_t i = 0; i < STRIPES; i++) {
    stripe_t *s = &t->stripes[i];
    pthread_mutex_init(&s->mutex, NULL);
    s->nbuckets = INITIAL_BUCKETS;
    s->buckets = calloc(INITIAL_BUCKETS, sizeof *s->buckets);
    if (!s->buckets) {
      for (size_t j = i + 1; j < STRIPES; j++) pthread_mutex_init(&t->stripes[j].mutex, NULL);
      memory_type_free(backend, type);
      return resv__fail(err, RESV_ENOMEM, "out of memory for a type's table");
    }
  }
  return true;
}

static void memory_describe(void *backend, char *buf, size_t size) {
  snprintf(buf, size, "resv store (memory)");
}

/* The memory store keeps all its state in its types: the backend itself
 * is a token. */
static char memory_backend;

static void memory_destroy(void *backend) {}

static const resv__backend_ops_t memory_ops = {
    .name = "memory",
    .runs_inline = true,
    .type_init = memory_type_init,
    .type_free = memory_type_free,
    .execute = memory_execute,
    .describe = memory_describe,
    .is_sharded = NULL,
    .destroy = memory_destroy,
};

void *resv__memory_open(const resv_options_t *options,
                        const resv__backend_ops_t **ops, resv_error_t *err) {
  *ops = &memory_ops;
  return &memory_backend;
}
