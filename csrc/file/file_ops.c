/* file_ops.c: the file store's rules, inside one transaction.
 *
 * A type's LMDB database holds a format record and one record per key
 * with the fields of the MongoDB layout (file_record.h says how), each
 * with a checksum of its key and bytes. A record that fails its checksum
 * or its layout answers RESV_EFORMAT naming the type and the key, and is
 * never written, deleted or decoded into an answer.
 *
 * A lookup also checks the records around the place of its key: LMDB
 * finds a key through branch pages that carry no checksum, so a damaged
 * byte there (or in a key) could lead a lookup to a wrong leaf and answer
 * absent for a key that is there. The first key at or after the key asked
 * (MDB_SET_RANGE) must be that key or a greater one, the key before it a
 * smaller one, and when the key is absent both neighbours must pass their
 * checksums (which cover their keys) and be linked to each other
 * (file_chain.c): a lookup led astray, a record hidden by a damaged page,
 * or a key whose bytes changed, meets a key out of place, a broken link or
 * a checksum that fails, and answers RESV_EFORMAT instead of absent.
 *
 * The rules are rules.c's, the same decision as the memory store's: this
 * file finds the record, shows it to the rules and writes what they
 * decide. Every answer is filled before the record is written, because a
 * write may move the pages the decoded record points into.
 *
 * Reclaiming is file_reclaim.c's, the format record file_format.c's. */
#include "file_internal.h"
#include "file_record.h"
#include "rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HASHED_PREFIX 17 /* tag and 16 bytes of hash */
#define HASHED_KEY (HASHED_PREFIX + 4)
#define HOLDS_ON_STACK 16

/* A reservation's record as found by lookup. */
typedef struct found {
  bool present;
  unsigned char key[RESV__FILE_KEY_MAX + 1]; /* its LMDB key, or the free one */
  size_t key_len;
  resv__file_rec_t rec;     /* when present */
  bool placed;              /* absent, and place is where its key goes */
  resv__file_place_t place;
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

/* ---- reading --------------------------------------------------------- */

/* LMDB's order of keys (bytewise, a prefix first). */
static int key_cmp(const MDB_val *a, const void *b, size_t b_len) {
  size_t n = a->mv_size < b_len ? a->mv_size : b_len;
  int c = n ? memcmp(a->mv_data, b, n) : 0;
  if (c) return c;
  return a->mv_size < b_len ? -1 : a->mv_size > b_len;
}

static bool sound_at(const resv__file_bounds_t *b, const MDB_val *key, const MDB_val *val) {
  return resv__file_in_map(b, key, val) && resv__file_rec_sound(key, val);
}

/* RESV_EFORMAT naming the type and the key, then why. */
static bool damaged(resv_error_t *err, const resv__file_type_t *ft, const resv_key_t *k,
                    const char *why) {
  return resv__fail(err, RESV_EFORMAT,
                    "%s: the record of key (%.*s, %.*s, %.*s) is not a format-1 "
                    "reservation: %s; nothing was written (resv check lists the damage)",
                    ft->collection, (int)k->tenant.len, k->tenant.ptr, (int)k->ns.len,
                    k->ns.ptr, (int)k->key.len, k->key.ptr, why);
}

static bool decode(const resv__file_bounds_t *b, const MDB_val *key, const MDB_val *val,
                   resv__file_rec_t *rec, const resv__file_type_t *ft,
                   const resv_key_t *k, resv_error_t *err) {
  resv_error_t why;
  if (!resv__file_in_map(b, key, val)) return damaged(err, ft, k, "its size is damaged");
  if (resv__file_rec_decode(key, val, rec, &why)) return true;
  if (why.code == RESV_ENOMEM) return resv__fail(err, RESV_ENOMEM, "%s", why.message);
  return damaged(err, ft, k, why.message);
}

/* The key asked (want) is not at the cursor: rc is what MDB_SET_RANGE
 * gave. The key there must be greater than want, the one before it
 * smaller, both sound, and the later one's link (the format record's,
 * past the last key) must name the earlier (file_chain.c), or the lookup
 * was led astray or a record was lost. Returns an LMDB error, or 0 with
 * *ok, and then the place of want in at. */
static int check_gap(MDB_cursor *c, int rc, const resv__file_bounds_t *b, const void *want,
                     size_t want_len, bool *ok, resv__file_place_t *at) {
  MDB_val key, val, after, after_val;
  bool last = rc == MDB_NOTFOUND;
  *ok = false;
  if (rc == 0) {
    if ((rc = mdb_cursor_get(c, &after, &after_val, MDB_GET_CURRENT))) return rc;
    if (key_cmp(&after, want, want_len) <= 0 || !sound_at(b, &after, &after_val)) return 0;
    rc = mdb_cursor_get(c, &key, &val, MDB_PREV);
  } else if (last) {
    rc = mdb_cursor_get(c, &key, &val, MDB_LAST);
  }
  if (rc == MDB_NOTFOUND) return 0; /* not even the format record before it */
  if (rc) return rc;
  at->prev = resv__file_key_link(&key);
  at->tail = last;
  *ok = key_cmp(&key, want, want_len) < 0 && sound_at(b, &key, &val) &&
        resv__file_chain_gap(c, at->prev, last ? NULL : &after, last ? NULL : &after_val);
  return 0;
}

static const char gap_damage[] =
    "a lookup of it met damage (keys out of order or not linked, or a neighbour "
    "failing its checksum): the file is damaged";

/* Finds the record of a direct key (f->key) with a cursor. */
static int lookup_direct(MDB_cursor *c, const resv__file_bounds_t *b, const resv__file_type_t *ft,
                         const resv_key_t *k, found_t *f, resv_error_t *err, bool *ok) {
  MDB_val key = {f->key_len, f->key}, val;
  int rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE);
  if (rc == 0 && key_cmp(&key, f->key, f->key_len) == 0) {
    if (!decode(b, &key, &val, &f->rec, ft, k, err)) return *ok = false, 0;
    f->present = true;
    return 0;
  }
  if (rc && rc != MDB_NOTFOUND) return rc;
  if ((rc = check_gap(c, rc, b, f->key, f->key_len, ok, &f->place))) return rc;
  if (!*ok) damaged(err, ft, k, gap_damage);
  f->placed = *ok;
  return 0;
}

/* Finds the record of a long key among those sharing its hash. When
 * absent, f->key is the key a new record takes. */
static int lookup_hashed(MDB_cursor *c, const resv__file_bounds_t *b, const resv__file_type_t *ft,
                         const resv_key_t *k, found_t *f, resv_error_t *err, bool *ok) {
  MDB_val key, val;
  f->key[0] = RESV__FILE_TAG_HASHED;
  hash_key(k, f->key + 1);
  uint32_t next_seq = 0;
  key.mv_data = f->key;
  key.mv_size = HASHED_PREFIX;
  int rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE), first = rc;
  while (rc == 0 && key.mv_size == HASHED_KEY &&
         memcmp(key.mv_data, f->key, HASHED_PREFIX) == 0) {
    const unsigned char *s = (const unsigned char *)key.mv_data + HASHED_PREFIX;
    uint32_t seq = (uint32_t)s[0] << 24 | (uint32_t)s[1] << 16 | (uint32_t)s[2] << 8 | s[3];
    if (seq >= next_seq) next_seq = seq + 1;
    if (!decode(b, &key, &val, &f->rec, ft, k, err)) return *ok = false, 0;
    if (resv__key_eq(&f->rec.key, k)) {
      memcpy(f->key, key.mv_data, HASHED_KEY);
      f->present = true;
      break;
    }
    resv__file_rec_free(&f->rec);
    rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
  }
  if (rc && rc != MDB_NOTFOUND) {
    if (f->present) resv__file_rec_free(&f->rec);
    return rc;
  }
  f->key_len = HASHED_KEY;
  if (f->present) return 0;
  if (next_seq == 0) { /* none shares the hash: check where it would be */
    key.mv_data = f->key;
    key.mv_size = HASHED_PREFIX;
    if (first == 0) first = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE);
    resv__file_place_t before_prefix;
    if ((rc = check_gap(c, first, b, f->key, HASHED_PREFIX, ok, &before_prefix))) return rc;
    if (!*ok) return damaged(err, ft, k, gap_damage), 0;
  }
  unsigned char *s = f->key + HASHED_PREFIX;
  s[0] = (unsigned char)(next_seq >> 24);
  s[1] = (unsigned char)(next_seq >> 16);
  s[2] = (unsigned char)(next_seq >> 8);
  s[3] = (unsigned char)next_seq;
  return 0;
}

/* Finds the record of k. Returns an LMDB error, or 0 with *ok false (err
 * filled) for a record that is not a sound format-1 reservation of k, or
 * damage met on the way. When absent, f->key is the key a new record
 * takes. */
static int lookup(MDB_txn *txn, bool read_only, const resv__file_type_t *ft,
                  const resv_key_t *k, found_t *f, resv_error_t *err, bool *ok) {
  MDB_cursor *c;
  resv__file_bounds_t b;
  f->present = f->placed = false;
  *ok = true;
  resv__file_bounds_of(txn, read_only, &b);
  int rc = mdb_cursor_open(txn, ft->dbi, &c);
  if (rc) return rc;
  f->key_len = direct_key(k, f->key);
  if (f->key_len)
    rc = lookup_direct(c, &b, ft, k, f, err, ok);
  else
    rc = lookup_hashed(c, &b, ft, k, f, err, ok);
  mdb_cursor_close(c);
  return rc;
}

/* ---- writing --------------------------------------------------------- */

/* What a record of a reservation holds, for encode. */
typedef struct fields {
  const resv_key_t *key;
  const resv_owner_t *owner;
  bool confirmed;
  int64_t expires_at, version;
  const resv_str_t *holds;
  size_t nholds;
} fields_t;

/* The record of x under f's key, linked to prev; false when out of
 * memory. */
static bool encode(resv__file_buf_t *w, const found_t *f, const fields_t *x, uint32_t prev) {
  MDB_val key = {f->key_len, (void *)f->key};
  return resv__file_rec_encode(w, &key, x->key, x->owner, x->confirmed, x->expires_at,
                               x->version, x->holds, x->nholds, prev);
}

typedef struct new_record {
  const found_t *f;
  const fields_t *x;
} new_record_t;

/* The chain's put of a new record (resv__file_put_new_fn). */
static int put_new(MDB_cursor *c, uint32_t prev, bool append, void *arg) {
  const new_record_t *n = arg;
  resv__file_buf_t w;
  MDB_val key = {n->f->key_len, (void *)n->f->key};
  int rc = ENOMEM;
  if (encode(&w, n->f, n->x, prev)) {
    MDB_val val = {w.len, w.p};
    rc = mdb_cursor_put(c, &key, &val, append ? MDB_APPEND : MDB_NOOVERWRITE);
  }
  resv__file_buf_free(&w);
  return rc;
}

/* Puts the record of x under f's key; a new record is chained in, and
 * takes its link then. */
static int put(MDB_txn *txn, MDB_dbi dbi, const found_t *f, const fields_t *x) {
  MDB_val key = {f->key_len, (void *)f->key};
  if (!f->present) {
    new_record_t n = {f, x};
    return resv__file_chain_insert(txn, dbi, &key, f->placed ? &f->place : NULL, put_new, &n);
  }
  resv__file_buf_t w;
  int rc = ENOMEM;
  if (encode(&w, f, x, f->rec.prev)) {
    MDB_val val = {w.len, w.p};
    rc = mdb_put(txn, dbi, &key, &val, 0);
  }
  resv__file_buf_free(&w);
  return rc;
}

static int del(MDB_txn *txn, MDB_dbi dbi, found_t *f) {
  MDB_val key = {f->key_len, f->key};
  if (f->peek) {
    f->write_needed = true;
    return 0;
  }
  return resv__file_chain_delete(txn, dbi, &key);
}

/* ---- the rules --------------------------------------------------------- */

/* The rules' view of the record f found. */
static void view_of(const found_t *f, resv__view_t *v) {
  const resv__file_rec_t *d = &f->rec;
  if (!f->present)
    *v = (resv__view_t){.state = RESV_STATE_NONE};
  else
    *v = (resv__view_t){.state = d->state, .owner = d->owner, .expires_at = d->expires_at,
                        .version = d->version, .holds = d->holds, .nholds = d->nholds};
}

/* Writes the record the decision d describes under f's key (a peek only
 * notes that it would). */
static int put_decided(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv__view_t *v,
                       const resv__decision_t *d, const resv_request_t *r,
                       resv_error_t *err, bool *ok) {
  if (f->peek) {
    f->write_needed = true;
    return 0;
  }
  resv_str_t on_stack[HOLDS_ON_STACK], *holds = on_stack;
  size_t need = (f->present ? f->rec.nholds : 0) + 1;
  if (need > HOLDS_ON_STACK && !(holds = malloc(need * sizeof *holds)))
    return *ok = resv__fail(err, RESV_ENOMEM, "out of memory for the holds"), 0;
  bool confirmed = d->state == RESV_STATE_CONFIRMED;
  fields_t x = {.key = &r->key, .owner = &r->owner, .confirmed = confirmed,
                .expires_at = confirmed ? 0 : d->expires_at,
                .version = confirmed ? d->version : 0, .holds = holds};
  x.nholds = resv__rules_holds(v, d, &r->attempt, holds);
  int rc = put(txn, dbi, f, &x);
  if (holds != on_stack) free(holds);
  return rc;
}

/* Writes decision d (a delete or a record) on the record f found. */
static int write_decided(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv__view_t *v,
                         const resv__decision_t *d, const resv_request_t *r,
                         resv_error_t *err, bool *ok) {
  if (d->write == RESV__WRITE_DELETE) return del(txn, dbi, f);
  return put_decided(txn, dbi, f, v, d, r, err, ok);
}

/* The request decided by the rules (rules.c), answered from the record as
 * it is (a write may move the pages it points into), then written. */
static int decide(MDB_txn *txn, MDB_dbi dbi, found_t *f, const resv_request_t *r,
                  int64_t now, int32_t max_holds, resv_answer_t *a,
                  resv_error_t *err, bool *ok, resv__decision_t *d) {
  resv__view_t v;
  view_of(f, &v);
  *ok = resv__rules_decide(&v, r, now, max_holds, d, err) &&
        resv__rules_answer(&v, d, r, a, err);
  if (!*ok || d->write == RESV__WRITE_NOTHING) return 0;
  return write_decided(txn, dbi, f, &v, d, r, err, ok);
}

/* ---- plans: a write that takes what its peek found -------------------- */

/* What the peek found of a key (f), for its write. */
static resv__file_seen_t seen_of(const found_t *f) {
  resv__file_seen_t s = {.present = f->present, .placed = f->placed};
  if (f->present)
    s.place = (resv__file_place_t){f->rec.prev, false};
  else if (f->placed)
    s.place = f->place;
  return s;
}

/* Whether the write d of a key the peek found (present or not) may take
 * what the peek saw instead of looking the key up again: a new record, a
 * record rewritten without its holds (those the peek saw live in its
 * pages) or deleted (the delete finds its record itself). */
static bool takes_seen(bool present, const resv__decision_t *d) {
  return d->write == RESV__WRITE_RECORD ? !(present && resv__rules_holds_read_view(d))
                                        : d->write == RESV__WRITE_DELETE && present;
}

/* f and v as the peek saw the key (s), f's LMDB key left to the caller.
 * A record's holds are not read (takes_seen), so v shows none. */
static void found_from(const resv__file_seen_t *s, found_t *f, resv__view_t *v) {
  f->peek = false;
  f->present = s->present;
  f->placed = s->placed;
  f->place = s->place;
  f->rec.prev = s->place.prev;
  f->rec.holds = NULL;
  f->rec.nholds = 0;
  *v = (resv__view_t){.state = RESV_STATE_NONE};
}

/* ---- several keys ------------------------------------------------------ */

/* Key i of a *_all request r as a request of its own (for the writes). */
static resv_request_t key_request(const resv_request_t *r, size_t i) {
  resv_request_t one = *r;
  one.key = r->keys[i];
  return one;
}

/* Looks up every key of r into f[0 .. *found), their views into v; stops
 * at the first error or damage. */
static int lookup_all(MDB_txn *txn, bool read_only, const resv__file_type_t *ft,
                      const resv_request_t *r, found_t *f, resv__view_t *v, size_t *found,
                      resv_error_t *err, bool *ok) {
  int rc = 0;
  *ok = true;
  for (*found = 0; rc == 0 && *ok && *found < r->nkeys; ++*found) {
    f[*found].peek = true;
    rc = lookup(txn, read_only, ft, &r->keys[*found], &f[*found], err, ok);
    if (rc || !*ok) break;
    view_of(&f[*found], &v[*found]);
  }
  return rc;
}

/* What the writes of a call did to the chain, for the keys written
 * after them: the links before its new records (each went into the gap,
 * as the peek saw the chain, after the key of that link), and whether a
 * write changed it in a way those do not tell (a delete, a new record
 * whose place the peek did not prove). */
typedef struct moved {
  uint32_t before[RESV__FILE_PLAN_KEYS];
  size_t n;
  bool unknown;
} moved_t;

/* Whether what the peek saw of a key (s) still holds for its write (d):
 * a record rewritten without its holds (which the peek's snapshot held)
 * or deleted, or no record and its gap proven; and no write of the call
 * before put a new record into the gap before that record or place (the
 * same link before it), nor changed the chain otherwise. */
static bool still_seen(const resv__file_seen_t *s, const resv__decision_t *d,
                       const moved_t *m) {
  if (m->unknown || !takes_seen(s->present, d) || (!s->present && !s->placed)) return false;
  for (size_t j = 0; j < m->n; j++)
    if (m->before[j] == s->place.prev) return false;
  return true;
}

/* Notes in m what the write d of a key the peek saw as s does to the
 * chain (a record rewritten keeps its link and its neighbours'). */
static void note_write(moved_t *m, const resv__file_seen_t *s, const resv__decision_t *d) {
  if (d->write == RESV__WRITE_DELETE || (!s->present && !s->placed) ||
      m->n == RESV__FILE_PLAN_KEYS)
    m->unknown = true;
  else if (!s->present)
    m->before[m->n++] = s->place.prev;
}

/* f and v of key k as the peek saw it (s, still_seen), without a lookup:
 * false for a hashed key, whose LMDB key only a lookup finds. */
static bool from_seen(const resv_key_t *k, const resv__file_seen_t *s, found_t *f,
                      resv__view_t *v) {
  if (!(f->key_len = direct_key(k, f->key))) return false;
  found_from(s, f, v);
  return true;
}

/* Writes each key's decision d[i]. On its record looked up anew: a write
 * to one key may move the pages, or change the link, of another's record;
 * seen not NULL (the peek's, on this transaction's snapshot): from what
 * the peek saw while that still holds (still_seen). A failure after a
 * write returns an LMDB-level error, so that the store aborts the
 * transaction (a batch of the commit queue included) and no key of the
 * call is written. */
static int write_all(MDB_txn *txn, resv__file_type_t *ft, const resv_request_t *r,
                     const resv__decision_t *d, const resv__file_seen_t *seen,
                     resv_error_t *err, bool *ok) {
  int rc = 0;
  bool wrote = false;
  moved_t moved = {.n = 0, .unknown = seen == NULL};
  for (size_t i = 0; rc == 0 && *ok && i < r->nkeys; i++) {
    if (d[i].write == RESV__WRITE_NOTHING) continue;
    resv_request_t one = key_request(r, i);
    found_t f = {.peek = false};
    resv__view_t v;
    bool looked = !(seen && still_seen(&seen[i], &d[i], &moved) &&
                    from_seen(&one.key, &seen[i], &f, &v));
    if (looked && (rc = lookup(txn, false, ft, &one.key, &f, err, ok)) == 0 && *ok)
      view_of(&f, &v);
    if (seen) note_write(&moved, &seen[i], &d[i]);
    if (rc == 0 && *ok) rc = write_decided(txn, ft->dbi, &f, &v, &d[i], &one, err, ok);
    if (looked && f.present) resv__file_rec_free(&f.rec);
    if (rc == 0 && !*ok && wrote) rc = err->code == RESV_ENOMEM ? ENOMEM : MDB_CORRUPTED;
    wrote = true;
  }
  return rc;
}

/* A peek of a call of several keys that decided to write, on n keys found
 * as f says: the plan of the write on the same snapshot (none past
 * RESV__FILE_PLAN_KEYS keys). */
static void plan_all(MDB_txn *txn, const found_t *f, const resv__decision_t *d, size_t n,
                     resv__file_peek_t *peek) {
  if (n > RESV__FILE_PLAN_KEYS) return;
  peek->planned = true;
  peek->txnid = mdb_txn_id(txn);
  peek->nkeys = n;
  for (size_t i = 0; i < n; i++) {
    peek->seen[i] = seen_of(&f[i]);
    peek->decisions[i] = d[i];
  }
}

/* What a call of several keys keeps per key: on the stack up to
 * ALL_ON_STACK keys, else in one allocation. Few: a found_t has room for
 * an LMDB key. */
#define ALL_ON_STACK 4
typedef struct per_key {
  found_t f[ALL_ON_STACK];
  resv__view_t v[ALL_ON_STACK];
  resv__decision_t d[ALL_ON_STACK];
} per_key_t;

/* A reserve_all, confirm_all or abandon_all in txn: every key decided by
 * the rules (rules.c) on the records as the call found them and answered,
 * then the writes, all in the one transaction. peek not NULL: decide only,
 * and say whether any key would write, and plan the writes (plan_all). */
static int apply_all(MDB_txn *txn, resv__file_type_t *ft, const resv_request_t *r,
                     int64_t now, int32_t max_holds, resv_answer_t *a, resv_error_t *err,
                     bool *ok, resv__file_peek_t *peek) {
  size_t n = r->nkeys, found = 0;
  per_key_t on_stack;
  found_t *f = on_stack.f;
  resv__view_t *v = on_stack.v;
  resv__decision_t *d = on_stack.d;
  int32_t status;
  int rc = 0;
  if (n > ALL_ON_STACK) {
    if (!(f = malloc(n * (sizeof *f + sizeof *v + sizeof *d)))) {
      *ok = resv__fail(err, RESV_ENOMEM, "out of memory for a call of several keys");
      return 0;
    }
    v = (resv__view_t *)(void *)(f + n);
    d = (resv__decision_t *)(void *)(v + n);
  }
  rc = lookup_all(txn, peek != NULL, ft, r, f, v, &found, err, ok);
  if (rc || !*ok) goto done;
  *ok = resv__rules_decide_all(v, r, now, max_holds, d, &status, err) &&
        resv__rules_answer_all(v, d, status, r, a, err);
  for (size_t i = 0; *ok && peek && i < n; i++)
    peek->write_needed = peek->write_needed || d[i].write != RESV__WRITE_NOTHING;
  if (*ok && peek && peek->write_needed) plan_all(txn, f, d, n, peek);
  if (*ok && !peek) rc = write_all(txn, ft, r, d, NULL, err, ok);
done:
  for (size_t i = 0; i < found; i++)
    if (f[i].present) resv__file_rec_free(&f[i].rec);
  if (f != on_stack.f) free(f);
  return rc;
}

/* A peek of one key that decided a write the same snapshot can make
 * without looking the key up again (takes_seen): what the write is to
 * write. */
static void plan(MDB_txn *txn, const found_t *f, const resv__decision_t *d,
                 resv__file_peek_t *peek) {
  if (!takes_seen(f->present, d)) return;
  peek->planned = true;
  peek->txnid = mdb_txn_id(txn);
  peek->seen[0] = seen_of(f);
  peek->decisions[0] = *d;
  peek->key_len = f->key_len;
  memcpy(peek->key, f->key, f->key_len);
}

int resv__file_apply(MDB_txn *txn, resv__file_type_t *ft,
                     const resv_request_t *r, int64_t now, int32_t max_holds,
                     resv_answer_t *a, resv_error_t *err, bool *ok,
                     resv__file_peek_t *peek) {
  if (peek) {
    peek->write_needed = peek->planned = false;
    peek->nkeys = 0;
  }
  if (resv__op_is_all(r->op))
    return apply_all(txn, ft, r, now, max_holds, a, err, ok, peek);
  found_t f;
  resv__decision_t d;
  f.peek = peek != NULL;
  f.write_needed = false;
  /* A get and a peek run in a read-only transaction (file_store.c). */
  bool read_only = peek != NULL || r->op == RESV_OP_GET;
  int rc = lookup(txn, read_only, ft, &r->key, &f, err, ok);
  if (rc || !*ok) return rc;
  rc = decide(txn, ft->dbi, &f, r, now, max_holds, a, err, ok, &d);
  if (peek && rc == 0 && *ok && f.write_needed) {
    peek->write_needed = true;
    plan(txn, &f, &d, peek);
  }
  if (f.present) resv__file_rec_free(&f.rec);
  return rc;
}

int resv__file_apply_planned(MDB_txn *txn, resv__file_type_t *ft, const resv_request_t *r,
                             const resv__file_peek_t *peek, resv_error_t *err, bool *ok,
                             bool *done) {
  *done = false;
  if (!peek->planned || mdb_txn_id(txn) != peek->txnid + 1) return 0;
  if (peek->nkeys) {
    *ok = *done = true;
    return write_all(txn, ft, r, peek->decisions, peek->seen, err, ok);
  }
  found_t f;
  resv__view_t v;
  found_from(&peek->seen[0], &f, &v);
  f.key_len = peek->key_len;
  memcpy(f.key, peek->key, peek->key_len);
  *ok = *done = true;
  return write_decided(txn, ft->dbi, &f, &v, &peek->decisions[0], r, err, ok);
}

/* ---- copying ----------------------------------------------------------- */

/* True when the record d is the reservation e describes. */
static bool entry_matches(const resv_scan_entry_t *e, const resv__file_rec_t *d) {
  if (!resv__str_eq(d->owner.tenant, e->owner_tenant) || !resv__str_eq(d->owner.id, e->owner_id) ||
      d->state != e->state)
    return false;
  if (d->state == RESV_STATE_CONFIRMED) return d->version == e->version;
  if (d->expires_at != e->expires_at || d->nholds != e->nholds) return false;
  for (size_t i = 0; i < d->nholds; i++)
    if (!resv__str_eq(d->holds[i], e->holds[i])) return false;
  return true;
}

int resv__file_put(MDB_txn *txn, resv__file_type_t *ft, const resv_scan_entry_t *e,
                   int32_t *outcome, resv_error_t *err, bool *ok) {
  found_t f = {0};
  resv_key_t k = {e->tenant, e->ns, e->key};
  resv_error_t ignored;
  int rc = lookup(txn, false, ft, &k, &f, &ignored, ok);
  if (rc) return rc;
  if (!*ok) {
    /* A record that is not a reservation of k holds the key. */
    *ok = true;
    *outcome = RESV_PUT_DIFFERENT;
    return 0;
  }
  if (f.present) {
    *outcome = entry_matches(e, &f.rec) ? RESV_PUT_SAME : RESV_PUT_DIFFERENT;
    resv__file_rec_free(&f.rec);
    return 0;
  }
  resv_owner_t o = {e->owner_tenant, e->owner_id};
  bool confirmed = e->state == RESV_STATE_CONFIRMED;
  fields_t x = {.key = &k, .owner = &o, .confirmed = confirmed,
                .expires_at = confirmed ? 0 : e->expires_at,
                .version = confirmed ? e->version : 0, .holds = e->holds,
                .nholds = confirmed ? 0 : e->nholds};
  *outcome = RESV_PUT_ADDED;
  return put(txn, ft->dbi, &f, &x);
}
