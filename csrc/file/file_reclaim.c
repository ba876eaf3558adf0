/* file_reclaim.c: the reclaiming of expired reservations in a type's
 * database, inside one write transaction.
 *
 * Reclaiming walks the database a few records per write transaction from
 * where the previous walk stopped, so each write pays O(1) visits and a
 * full pass over n records takes n / steps writes: expired reservations go
 * within a bounded delay, and no call ever pauses for the whole store.
 *
 * It deletes only sound pending reservations whose expiry passed (the
 * rules' resv__rules_reclaimable says which); it must not touch a record
 * that fails its checksum or its layout, which stays for resv check to
 * show, and it begins and ends no transaction (its callers do, through
 * file_txn.c). */
#include "file_internal.h"
#include "file_record.h"
#include "rules.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
/* True for a sound pending reservation that expired at or before limit;
 * a damaged record is left where it is, for resv check to show. */
static bool reclaimable(const resv__file_bounds_t *b, const MDB_val *key, const MDB_val *val,
                        int64_t limit) {
  const unsigned char *k = key->mv_data;
  if (key->mv_size < 1 || (k[0] != RESV__FILE_TAG_KEY && k[0] != RESV__FILE_TAG_HASHED))
    return false;
  if (!resv__file_in_map(b, key, val)) return false;
  bool confirmed;
  int64_t expires_at;
  /* What the bytes say first: most records are not to be reclaimed, and
   * one that is must then pass its checksum and its layout. */
  if (resv__file_rec_glance(val, &confirmed, &expires_at) &&
      !resv__rules_reclaimable(confirmed, expires_at, limit))
    return false;
  resv__file_rec_t rec;
  if (!resv__file_rec_decode(key, val, &rec, NULL)) return false;
  bool expired = resv__rules_reclaimable(rec.state == RESV_STATE_CONFIRMED, rec.expires_at, limit);
  resv__file_rec_free(&rec);
  return expired;
}

/* Keys to delete once a walk's cursor is done with them. */
typedef struct doomed {
  unsigned char *p;
  size_t len, cap;
} doomed_t;

static bool doom(doomed_t *d, const MDB_val *key) {
  size_t need = d->len + 2 + key->mv_size;
  if (need > d->cap) {
    size_t cap = need > 2 * d->cap ? need : 2 * d->cap;
    unsigned char *p = realloc(d->p, cap);
    if (!p) return false;
    d->p = p;
    d->cap = cap;
  }
  d->p[d->len] = (unsigned char)(key->mv_size >> 8);
  d->p[d->len + 1] = (unsigned char)key->mv_size;
  memcpy(d->p + d->len + 2, key->mv_data, key->mv_size);
  d->len = need;
  return true;
}

/* Deletes the doomed keys in order, each relinking the one after it. */
static int delete_doomed(MDB_txn *txn, MDB_dbi dbi, const doomed_t *d, size_t *deleted) {
  for (size_t at = 0; at < d->len;) {
    MDB_val key = {(size_t)d->p[at] << 8 | d->p[at + 1], d->p + at + 2};
    int rc = resv__file_chain_delete(txn, dbi, &key);
    if (rc) return rc;
    ++*deleted;
    at += 2 + key.mv_size;
  }
  return 0;
}

int resv__file_walk(MDB_txn *txn, MDB_dbi dbi, unsigned char *at,
                    size_t *at_len, int64_t limit, size_t steps,
                    size_t *deleted) {
  MDB_cursor *c;
  MDB_val key, val;
  resv__file_bounds_t b;
  doomed_t d = {0};
  resv__file_bounds_of(txn, false, &b);
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
    if (reclaimable(&b, &key, &val, limit) && !doom(&d, &key)) rc = ENOMEM;
    if (rc == 0) rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
  }
  if (rc == MDB_NOTFOUND) {
    *at_len = 0; /* the end: the next walk starts again */
    rc = 0;
  } else if (rc == 0) {
    memcpy(at, key.mv_data, key.mv_size);
    *at_len = key.mv_size;
  }
  mdb_cursor_close(c);
  if (rc == 0) rc = delete_doomed(txn, dbi, &d, deleted);
  free(d.p);
  return rc;
}

int resv__file_reclaim(MDB_txn *txn, resv__file_type_t *ft, int64_t limit,
                       size_t steps, size_t *deleted) {
  return resv__file_walk(txn, ft->dbi, ft->sweep_at, &ft->sweep_len, limit,
                         steps, deleted);
}

int resv__file_reclaim_some(MDB_txn *txn, resv__file_type_t *ft, int64_t limit,
                            size_t steps, unsigned every, size_t *deleted) {
  if (++ft->writes < every) return 0;
  ft->writes = 0;
  return resv__file_reclaim(txn, ft, limit, steps * every, deleted);
}
