/* memory_entry.h: the memory store's entry, one allocation holding a
 * reservation's key, owner and holds, and the functions that read and
 * write it: the key's hash, the fields (a varint length, then the bytes),
 * making room, a new owner, the holds. Included by memory.c alone; the
 * stripes, reclaiming and the calls are there. Nothing here locks or
 * decides: the entry is storage. */
#ifndef RESV_MEMORY_ENTRY_H
#define RESV_MEMORY_ENTRY_H

#include "base.h"

#include <stdlib.h>
#include <string.h>

/* An entry is one allocation: a 32-byte header, then its fields in data_,
 * each a length (a varint: 1 byte up to 127, at most 3 for max_string's
 * 2^20) and its bytes: the key (tenant, namespace, key), the owner
 * (tenant, id), then each hold. No slack: a join that outgrows the entry
 * reallocs it (and relinks it through its slot). */
typedef struct entry {
  struct entry *next;  /* bucket chain */
  int64_t when;        /* pending: expires_at; confirmed: version */
  uint32_t hash;       /* entry_hash's */
  uint32_t nholds : 31;
  uint32_t confirmed : 1;
  uint32_t used;       /* bytes of data_ in use */
  uint32_t cap;        /* bytes of data_ allocated */
  unsigned char data_[];
} entry_t;

_Static_assert(sizeof(entry_t) == 32, "an entry's header is 32 bytes");
/* ---- keys ----------------------------------------------------------- */

#define HASH_K UINT64_C(0x9e3779b97f4a7c15)

static inline uint64_t hash_word(uint64_t h, uint64_t w) {
  return ((h << 5 | h >> 59) ^ w) * HASH_K;
}

/* Eight bytes at a time, then the rest, then the length (which keeps
 * ("ab", "c") and ("a", "bc") apart). */
static inline uint64_t hash_bytes(uint64_t h, const char *p, size_t n) {
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
static inline uint32_t entry_hash(const resv_key_t *k) {
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

static inline size_t varint_size(size_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static inline size_t field_size(const resv_str_t *s) { return varint_size(s->len) + s->len; }

/* Reads the field at p into *out; returns where the next one starts. */
static inline const unsigned char *get_field(const unsigned char *p, resv_str_t *out) {
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
static inline bool same_str(const resv_str_t *a, const resv_str_t *b) {
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
static inline const unsigned char *skip_fields(const unsigned char *p, int n) {
  resv_str_t s;
  while (n--) p = get_field(p, &s);
  return p;
}

/* Where the owner's fields start, and where the holds do. */
static inline const unsigned char *owner_at(const entry_t *e) { return skip_fields(e->data_, 3); }
static inline size_t holds_start(const entry_t *e) {
  return (size_t)(skip_fields(owner_at(e), 2) - e->data_);
}

static inline bool entry_is(const entry_t *e, uint32_t hash, const resv_key_t *k) {
  if (e->hash != hash) return false;
  resv_str_t s;
  const unsigned char *p = get_field(e->data_, &s);
  if (!same_str(&s, &k->tenant)) return false;
  p = get_field(p, &s);
  if (!same_str(&s, &k->ns)) return false;
  get_field(p, &s);
  return same_str(&s, &k->key);
}

/* ---- entries -------------------------------------------------------- */

static inline int64_t expires_of(const entry_t *e) { return e->confirmed ? 0 : e->when; }
static inline int64_t version_of(const entry_t *e) { return e->confirmed ? e->when : 0; }

static inline void put_field(entry_t *e, const resv_str_t *s) {
  size_t v = s->len;
  while (v >= 0x80) {
    e->data_[e->used++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  e->data_[e->used++] = (unsigned char)v;
  if (s->len) memcpy(e->data_ + e->used, s->ptr, s->len);
  e->used += (uint32_t)s->len;
}

static inline void put_hold(entry_t *e, const resv_str_t *attempt) {
  put_field(e, attempt);
  e->nholds++;
}

/* Makes an entry for key, owned by owner, held by attempt (NULL: none). */
static inline entry_t *new_entry(uint32_t hash, const resv_key_t *k,
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
 * it), adding what it grew by to *bytes (its stripe's count). Returns the
 * entry, or NULL (entry unchanged) without memory. */
static inline entry_t *make_room(size_t *bytes, entry_t **slot, size_t more,
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
  *bytes += cap - e->cap;
  e->cap = (uint32_t)cap;
  *slot = e;
  return e;
}

static inline void clear_holds(entry_t *e) {
  e->used = (uint32_t)holds_start(e);
  e->nholds = 0;
}

/* Where the hold `attempt` starts in data_, or 0 (data_ starts with the
 * key, never a hold) when the entry has none such; *end gets its end. */
static inline size_t find_hold(const entry_t *e, const resv_str_t *attempt, size_t *end) {
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

static inline void pull_hold(entry_t *e, const resv_str_t *attempt) {
  size_t end, at = find_hold(e, attempt, &end);
  if (!at) return;
  memmove(e->data_ + at, e->data_ + end, e->used - end);
  e->used -= (uint32_t)(end - at);
  e->nholds--;
}

/* Gives the entry at *slot to owner, without holds, with room for `extra`
 * more bytes (a first hold), as make_room. Returns the entry (maybe
 * moved), or NULL without memory, the entry then unchanged. */
static inline entry_t *set_owner(size_t *bytes, entry_t **slot, const resv_owner_t *o,
                                 size_t extra, resv_error_t *err) {
  entry_t *e = *slot;
  uint32_t start = (uint32_t)(owner_at(e) - e->data_);
  size_t size = field_size(&o->tenant) + field_size(&o->id);
  if (start + size + extra > e->cap) {
    uint32_t used = e->used;
    e->used = start; /* nothing after the key needs keeping */
    if (!(e = make_room(bytes, slot, size + extra, err))) {
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

#endif
