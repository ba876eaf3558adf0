/* file_ops.c: the file store's records and rules, inside one transaction.
 *
 * A type's LMDB database holds the documents of its MongoDB collection
 * (SPEC section 3) as BSON, byte for byte what the MongoDB store writes:
 * the format record {_id: "format", format: 1} and one record per key
 * {_id: {t, n, k}, tenant_id, key, owner: {tenant_id, id}, expires_at,
 * holds | version}. So a type copies to MongoDB and back without loss,
 * and a record is read with the MongoDB store's own strict decoder
 * (mongo_decode.c): anything that is not exactly a format-1 reservation
 * answers RESV_EFORMAT and is never written or deleted.
 *
 * The rules are memory.c's, the reference model, step for step: a reserve
 * or a confirm meets a reservation held by another owner (confirmed, or
 * pending with expires_at > now) as a conflict; the owner's confirmed one
 * is kept; the owner's live pending one is joined; anything else (absent,
 * or pending and expired) starts afresh. Every answer is filled before the
 * record is written, from the caller's strings, because a write may move
 * the pages the decoded record points into.
 *
 * Reclaiming walks the database a few records per write transaction from
 * where the previous walk stopped, so each write pays O(1) visits and a
 * full pass over n records takes n / steps writes: expired reservations go
 * within a bounded delay, and no call ever pauses for the whole store. */
#include "file_internal.h"
#include "mongo_bson.h"
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASHED_PREFIX 17 /* tag and 16 bytes of hash */
#define HASHED_KEY (HASHED_PREFIX + 4)
#define HOLDS_ON_STACK 16

static const unsigned char format_key[] = "\0format";

/* A reservation's record as found by lookup. */
typedef struct found {
  bool present;
  unsigned char key[RESV__FILE_KEY_MAX + 1]; /* its LMDB key, or the free one */
  size_t key_len;
  bson_t bson;              /* static, over LMDB's page */
  resv__mongo_doc_t doc;    /* when present */
  bool peek;                /* decide only: put and del write nothing */
  bool write_needed;        /* a peek met a put or a del */
} found_t;

/* ---- keys ------------------------------------------------------------ */

static uint64_t fnv(uint64_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)p[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* 16 bytes of hash of the key's three parts (0xff, never in UTF-8,
 * between them). Not cryptographic: a collision only lengthens a scan. */
static void hash_key(const resv_key_t *k, unsigned char out[16]) {
  uint64_t h[2] = {0xcbf29ce484222325ULL, 0x84222325cbf29ce4ULL};
  for (int i = 0; i < 2; i++) {
    h[i] = fnv(h[i], k->tenant.ptr, k->tenant.len);
    h[i] = fnv(h[i], "\xff", 1);
    h[i] = fnv(h[i], k->ns.ptr, k->ns.len);
    h[i] = fnv(h[i], "\xff", 1);
    h[i] = fnv(h[i], k->key.ptr, k->key.len);
    h[i] = mix(h[i] + (uint64_t)i);
  }
  memcpy(out, h, 16);
}

static void put_part(unsigned char **p, const resv_str_t *s) {
  if (s->len) memcpy(*p, s->ptr, s->len);
  *p += s->len;
}

/* The direct key of k into out, or 0 when it would be too long. */
static size_t direct_key(const resv_key_t *k, unsigned char *out) {
  size_t n = 3 + k->tenant.len + k->ns.len + k->key.len;
  if (n > RESV__FILE_KEY_MAX) return 0;
  unsigned char *p = out;
  *p++ = RESV__FILE_TAG_KEY;
  put_part(&p, &k->tenant);
  *p++ = 0;
  put_part(&p, &k->ns);
  *p++ = 0;
  put_part(&p, &k->key);
  return n;
}

static bool str_eq(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static bool same_key(const resv_key_t *a, const resv_key_t *b) {
  return str_eq(a->tenant, b->tenant) && str_eq(a->ns, b->ns) && str_eq(a->key, b->key);
}

/* ---- reading --------------------------------------------------------- */

static bool decode(const MDB_val *v, bson_t *b, resv__mongo_doc_t *doc,
                   resv_error_t *err) {
  if (!bson_init_static(b, v->mv_data, v->mv_size))
    return resv__fail(err, RESV_EFORMAT,
                      "document is not a format-1 reservation: corrupt BSON");
  return resv__mongo_decode(b, doc, err);
}

/* Finds the record of k. Returns an LMDB error, or 0 with *ok false for a
 * record that is not a format-1 reservation of k. When absent, f->key is
 * the key a new record takes. */
static int lookup(MDB_txn *txn, MDB_dbi dbi, const resv_key_t *k, found_t *f,
                  resv_error_t *err, bool *ok) {
  MDB_val key, val;
  f->present = false;
  *ok = true;
  f->key_len = direct_key(k, f->key);
  if (f->key_len) {
    key.mv_data = f->key;
    key.mv_size = f->key_len;
    int rc = mdb_get(txn, dbi, &key, &val);
    if (rc == MDB_NOTFOUND) return 0;
    if (rc) return rc;
    if (!decode(&val, &f->bson, &f->doc, err)) return *ok = false, 0;
    if (!same_key(&f->doc.key, k)) {
      resv__mongo_doc_free(&f->doc);
      *ok = resv__fail(err, RESV_EFORMAT,
                       "document is not a format-1 reservation: stored under "
                       "another key than its _id");
      return 0;
    }
    f->present = true;
    return 0;
  }

  /* A long key: scan the records sharing its hash. */
  f->key[0] = RESV__FILE_TAG_HASHED;
  hash_key(k, f->key + 1);
  uint32_t next_seq = 0;
  MDB_cursor *c;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  key.mv_data = f->key;
  key.mv_size = HASHED_PREFIX;
  rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE);
  while (rc == 0 && key.mv_size == HASHED_KEY &&
         memcmp(key.mv_data, f->key, HASHED_PREFIX) == 0) {
    const unsigned char *s = (const unsigned char *)key.mv_data + HASHED_PREFIX;
    uint32_t seq = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
    if (seq >= next_seq) next_seq = seq + 1;
    if (!decode(&val, &f->bson, &f->doc, err)) {
      *ok = false;
      break;
    }
    if (same_key(&f->doc.key, k)) {
      memcpy(f->key, key.mv_data, HASHED_KEY);
      f->present = true;
      break;
    }
    resv__mongo_doc_free(&f->doc);
    rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
  }
  mdb_cursor_close(c);
  if (rc && rc != MDB_NOTFOUND) {
    if (f->present) resv__mongo_doc_free(&f->doc);
    return rc;
  }
  f->key_len = HASHED_KEY;
  if (!f->present) {
    unsigned char *s = f->key + HASHED_PREFIX;
    s[0] = (unsigned char)(next_seq >> 24);
    s[1] = (unsigned char)(next_seq >> 16);
    s[2] = (unsigned char)(next_seq >> 8);
    s[3] = (unsigned char)next_seq;
  }
  return 0;
}

/* ---- writing --------------------------------------------------------- */

/* The record of a reservation, as the MongoDB store writes its document. */
static void encode(resv__bw_t *w, const resv_key_t *k, const resv_owner_t *o,
                   bool confirmed, int64_t expires_at, int64_t version,
                   const resv_str_t *holds, size_t nholds) {
  resv__bw_init(w);
  size_t id = resv__bw_doc(w, K("_id"));
  resv__bw_utf8(w, K("t"), k->tenant.ptr, k->tenant.len);
  resv__bw_utf8(w, K("n"), k->ns.ptr, k->ns.len);
  resv__bw_utf8(w, K("k"), k->key.ptr, k->key.len);
  resv__bw_end(w, id);
  resv__bw_utf8(w, K("tenant_id"), k->tenant.ptr, k->tenant.len);
  resv__bw_utf8(w, K("key"), k->key.ptr, k->key.len);
  size_t owner = resv__bw_doc(w, K("owner"));
  resv__bw_utf8(w, K("tenant_id"), o->tenant.ptr, o->tenant.len);
  resv__bw_utf8(w, K("id"), o->id.ptr, o->id.len);
  resv__bw_end(w, owner);
  if (confirmed) {
    resv__bw_null(w, K("expires_at"));
    resv__bw_int64(w, K("version"), version);
  } else {
    resv__bw_int64(w, K("expires_at"), expires_at);
    size_t arr = resv__bw_array(w, K("holds"));
    for (size_t i = 0; i < nholds; i++) {
      char buf[16];
      const char *name;
      size_t len = bson_uint32_to_string((uint32_t)i, &name, buf, sizeof buf);
      resv__bw_utf8(w, name, len, holds[i].ptr, holds[i].len);
    }
    resv__bw_end(w, arr);
  }
  resv__bw_end(w, 0);
}

static int put(MDB_txn *txn, MDB_dbi dbi, found_t *f, resv__bw_t *w) {
  MDB_val key = {f->key_len, f->key}, val = {w->len, w->buf};
  int rc = 0;
  if (f->peek)
    f->write_needed = true;
  else
    rc = mdb_put(txn, dbi, &key, &val, 0);
  resv__bw_free(w);
  return rc;
}

static int del(MDB_txn *txn, MDB_dbi dbi, found_t *f) {
  MDB_val key = {f->key_len, f->key};
  if (f->peek) {
    f->write_needed = true;
    return 0;
  }
  return mdb_del(txn, dbi, &key, NULL);
}

/* ---- the rules --------------------------------------------------------- */

static bool confirmed(const resv__mongo_doc_t *d) { return d->state == RESV_STATE_CONFIRMED; }

/* Held by another owner: confirmed, or pending and live. */
static bool held_by_other(const resv__mongo_doc_t *d, const resv_owner_t *o, int64_t now) {
  return !resv__mongo_doc_owned_by(d, o) && (confirmed(d) || d->expires_at > now);
}

static int do_reserve(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv_request_t *r,
                      int64_t now, int32_t max_holds, resv_answer_t *a,
                      resv_error_t *err, bool *ok) {
  resv__mongo_doc_t *d = &f->doc;
  int64_t expires_at;
  /* First, as the other stores compute it. */
  if (!(*ok = resv__expiry(now, r->ttl_ms, &expires_at, err))) return 0;
  if (f->present && held_by_other(d, &r->owner, now)) {
    *ok = resv__mongo_doc_answer(d, RESV_CONFLICT, false, a, err);
    return 0;
  }
  if (f->present && confirmed(d)) { /* ours: kept exactly as it is */
    *ok = resv__mongo_doc_answer(d, RESV_CONFIRMED, false, a, err);
    return 0;
  }
  resv_str_t on_stack[HOLDS_ON_STACK], *holds = on_stack;
  size_t nholds = 0;
  bool join = f->present && d->expires_at > now; /* our live pending one */
  size_t need = join ? d->nholds + 1 : 1;
  if (need > HOLDS_ON_STACK && !(holds = malloc(need * sizeof *holds))) {
    *ok = resv__fail(err, RESV_ENOMEM, "out of memory for the holds");
    return 0;
  }
  bool held = false;
  if (join) {
    for (size_t i = 0; i < d->nholds; i++) {
      holds[nholds++] = d->holds[i];
      held = held || str_eq(d->holds[i], r->attempt);
    }
    if (!held && d->nholds >= (size_t)max_holds) {
      if (holds != on_stack) free(holds);
      *ok = resv__fail_holds_full(err, max_holds);
      return 0;
    }
    if (d->expires_at > expires_at) expires_at = d->expires_at;
  }
  if (!held) holds[nholds++] = r->attempt;
  resv__bw_t w;
  encode(&w, &r->key, &r->owner, false, expires_at, 0, holds, nholds);
  *ok = resv__answer_set(a, RESV_RESERVED, RESV_STATE_PENDING, expires_at, 0,
                         &r->owner.tenant, &r->owner.id, holds, nholds, err);
  if (holds != on_stack) free(holds);
  if (!*ok) {
    resv__bw_free(&w);
    return 0;
  }
  return put(txn, dbi, f, &w);
}

static int do_confirm(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv_request_t *r,
                      int64_t now, resv_answer_t *a, resv_error_t *err, bool *ok) {
  resv__mongo_doc_t *d = &f->doc;
  if (f->present && held_by_other(d, &r->owner, now)) {
    *ok = resv__mongo_doc_answer(d, RESV_CONFLICT, false, a, err);
    return 0;
  }
  int64_t version = r->version;
  if (f->present && confirmed(d) && d->version > version) version = d->version;
  *ok = resv__answer_set(a, RESV_CONFIRMED, RESV_STATE_CONFIRMED, 0, version,
                         &r->owner.tenant, &r->owner.id, NULL, 0, err);
  if (!*ok) return 0;
  resv__bw_t w;
  encode(&w, &r->key, &r->owner, true, 0, version, NULL, 0);
  return put(txn, dbi, f, &w);
}

static int do_abandon(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv_request_t *r,
                      resv_answer_t *a, resv_error_t *err, bool *ok) {
  resv__mongo_doc_t *d = &f->doc;
  if (!f->present || !resv__mongo_doc_owned_by(d, &r->owner)) {
    *ok = resv__answer_status(a, RESV_ABSENT, err);
    return 0;
  }
  if (confirmed(d)) {
    *ok = resv__answer_status(a, RESV_KEPT, err);
    return 0;
  }
  /* Pull the attempt: the decoded holds are ours to reorder. */
  size_t n = 0;
  for (size_t i = 0; i < d->nholds; i++)
    if (!str_eq(d->holds[i], r->attempt)) d->holds[n++] = d->holds[i];
  if (n == 0) {
    *ok = resv__answer_status(a, RESV_ABANDONED, err);
    return *ok ? del(txn, dbi, f) : 0;
  }
  *ok = resv__answer_status(a, RESV_KEPT, err);
  if (!*ok || n == d->nholds) return 0; /* not our hold: nothing changes */
  resv__bw_t w;
  encode(&w, &r->key, &r->owner, false, d->expires_at, 0, d->holds, n);
  return put(txn, dbi, f, &w);
}

static int do_release(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv_request_t *r,
                      resv_answer_t *a, resv_error_t *err, bool *ok) {
  if (!f->present || !resv__mongo_doc_owned_by(&f->doc, &r->owner)) {
    *ok = resv__answer_status(a, RESV_ABSENT, err);
    return 0;
  }
  *ok = resv__answer_status(a, RESV_RELEASED, err);
  return *ok ? del(txn, dbi, f) : 0;
}

static bool do_get(const found_t *f, int64_t now, resv_answer_t *a, resv_error_t *err) {
  if (!f->present) return resv__answer_status(a, RESV_ABSENT, err);
  const resv__mongo_doc_t *d = &f->doc;
  int32_t status = confirmed(d) ? RESV_CONFIRMED
                   : d->expires_at > now ? RESV_PENDING : RESV_EXPIRED;
  return resv__mongo_doc_answer(d, status, !confirmed(d), a, err);
}

int resv__file_apply(MDB_txn *txn, resv__file_type_t *ft,
                     const resv_request_t *r, int64_t now, int32_t max_holds,
                     resv_answer_t *a, resv_error_t *err, bool *ok,
                     bool *write_needed) {
  found_t f;
  f.peek = write_needed != NULL;
  f.write_needed = false;
  int rc = lookup(txn, ft->dbi, &r->key, &f, err, ok);
  if (write_needed) *write_needed = false;
  if (rc || !*ok) return rc;
  switch (r->op) {
  case RESV_OP_RESERVE: rc = do_reserve(txn, ft->dbi, &f, r, now, max_holds, a, err, ok); break;
  case RESV_OP_CONFIRM: rc = do_confirm(txn, ft->dbi, &f, r, now, a, err, ok); break;
  case RESV_OP_ABANDON: rc = do_abandon(txn, ft->dbi, &f, r, a, err, ok); break;
  case RESV_OP_RELEASE: rc = do_release(txn, ft->dbi, &f, r, a, err, ok); break;
  case RESV_OP_GET: *ok = do_get(&f, now, a, err); break;
  default: *ok = resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
  if (f.present) resv__mongo_doc_free(&f.doc);
  if (write_needed) *write_needed = f.write_needed;
  return rc;
}

/* ---- copying ----------------------------------------------------------- */

int resv__file_put(MDB_txn *txn, resv__file_type_t *ft, const resv_scan_entry_t *e,
                   int32_t *outcome, resv_error_t *err, bool *ok) {
  found_t f = {0};
  resv_key_t k = {e->tenant, e->ns, e->key};
  resv_error_t ignored;
  int rc = lookup(txn, ft->dbi, &k, &f, &ignored, ok);
  if (rc) return rc;
  if (!*ok) {
    /* A record that is not a reservation of k holds the key. */
    *ok = true;
    *outcome = RESV_PUT_DIFFERENT;
    return 0;
  }
  if (f.present) {
    *outcome = resv__scan_entry_matches(e, &f.doc) ? RESV_PUT_SAME : RESV_PUT_DIFFERENT;
    resv__mongo_doc_free(&f.doc);
    return 0;
  }
  resv__bw_t w;
  resv__scan_entry_encode(e, &w);
  *outcome = RESV_PUT_ADDED;
  (void)err;
  return put(txn, ft->dbi, &f, &w);
}

/* ---- reclaiming --------------------------------------------------------- */

/* True for a format-1 pending reservation that expired at or before limit.
 * The expiry is looked at first, so a live record costs no full decode. */
static bool reclaimable(const MDB_val *key, const MDB_val *val, int64_t limit) {
  const unsigned char *k = key->mv_data;
  if (key->mv_size < 1 || (k[0] != RESV__FILE_TAG_KEY && k[0] != RESV__FILE_TAG_HASHED))
    return false;
  bson_t b;
  bson_iter_t it;
  if (!bson_init_static(&b, val->mv_data, val->mv_size) ||
      !bson_iter_init_find(&it, &b, "expires_at") || !BSON_ITER_HOLDS_INT64(&it) ||
      bson_iter_int64(&it) > limit)
    return false;
  resv__mongo_doc_t doc;
  if (!resv__mongo_decode(&b, &doc, NULL)) return false;
  resv__mongo_doc_free(&doc);
  return true;
}

int resv__file_walk(MDB_txn *txn, MDB_dbi dbi, unsigned char *at,
                    size_t *at_len, int64_t limit, size_t steps,
                    size_t *deleted) {
  MDB_cursor *c;
  MDB_val key, val;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  if (*at_len) {
    key.mv_data = at;
    key.mv_size = *at_len;
    rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE);
  } else {
    rc = mdb_cursor_get(c, &key, &val, MDB_FIRST);
  }
  for (size_t i = 0; rc == 0 && i < steps; i++) {
    if (reclaimable(&key, &val, limit)) {
      if ((rc = mdb_cursor_del(c, 0))) break;
      ++*deleted;
    }
    rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
  }
  if (rc == MDB_NOTFOUND) {
    *at_len = 0; /* the end: the next walk starts again */
    rc = 0;
  } else if (rc == 0) {
    memcpy(at, key.mv_data, key.mv_size);
    *at_len = key.mv_size;
  }
  mdb_cursor_close(c);
  return rc;
}

int resv__file_reclaim(MDB_txn *txn, resv__file_type_t *ft, int64_t limit,
                       size_t steps, size_t *deleted) {
  return resv__file_walk(txn, ft->dbi, ft->sweep_at, &ft->sweep_len, limit,
                         steps, deleted);
}

/* ---- the format record --------------------------------------------------- */

int resv__file_format(MDB_txn *txn, MDB_dbi dbi, const char *collection,
                      resv_error_t *err, bool *ok) {
  MDB_val key = {sizeof format_key - 1, (void *)format_key}, val;
  *ok = true;
  int rc = mdb_get(txn, dbi, &key, &val);
  if (rc == MDB_NOTFOUND) {
    resv__bw_t w;
    resv__bw_init(&w);
    resv__bw_utf8(&w, K("_id"), K("format"));
    resv__bw_int32(&w, K("format"), 1);
    resv__bw_end(&w, 0);
    val.mv_data = w.buf;
    val.mv_size = w.len;
    rc = mdb_put(txn, dbi, &key, &val, 0);
    resv__bw_free(&w);
    return rc;
  }
  if (rc) return rc;
  bson_t b;
  bson_iter_t it;
  if (!bson_init_static(&b, val.mv_data, val.mv_size) ||
      !bson_iter_init_find(&it, &b, "format") || !BSON_ITER_HOLDS_NUMBER(&it)) {
    *ok = resv__fail(err, RESV_EFORMAT,
                     "database %s has a format record without a numeric format; "
                     "nothing was written", collection);
    return 0;
  }
  double format = bson_iter_as_double(&it);
  if (format != 1)
    *ok = resv__fail(err, RESV_EFORMAT,
                     "database %s holds format %g, this store writes format 1; "
                     "nothing was written", collection, format);
  return 0;
}
