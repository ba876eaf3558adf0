/* file_chain.c: the links between a type's records (file_record.h), kept
 * on every insert and delete, and checked by a lookup that would answer
 * absent.
 *
 * Each record holds the CRC32C of the key before it, and the format
 * record (always the first key) that of the last key: a gap between two
 * neighbouring keys is proven empty when the later one's link names the
 * earlier. LMDB finds a key through pages that carry no checksum; a
 * damaged page may hide records (a count of nodes that shrank), show one
 * record twice or lead the lookup to another page, and then the keys
 * around the place of the key asked no longer link: the lookup answers
 * RESV_EFORMAT instead of absent. An insert relinks the record after the
 * new one (or the format record) to it, a delete relinks it to the
 * deleted record's own link: one more put of the same size, in the same
 * transaction, in place through the cursor that found it. */
#include "file_internal.h"
#include "file_record.h"

#include <string.h>

static const unsigned char format_key[] = "\0format";

/* Rewrites the record at the cursor (k, v) with link, in place (the
 * same size): a record without a link (damaged, or not the store's) is
 * left as it is, the chain is broken there already. */
static int relink_here(MDB_cursor *c, const MDB_val *k, const MDB_val *v, uint32_t link) {
  unsigned char at[RESV__FILE_KEY_MAX + 1];
  if (k->mv_size > sizeof at) return 0;
  memcpy(at, k->mv_data, k->mv_size);
  MDB_val key = {k->mv_size, at};
  resv__file_buf_t w;
  int rc = 0;
  if (resv__file_rec_relink(&w, &key, v, link)) {
    MDB_val nv = {w.len, w.p};
    rc = mdb_cursor_put(c, &key, &nv, MDB_CURRENT);
  }
  resv__file_buf_free(&w);
  return rc;
}

static bool is_format(const MDB_val *k) {
  return k->mv_size == sizeof format_key - 1 && memcmp(k->mv_data, format_key, k->mv_size) == 0;
}

/* From the record before the place of the one relinked (the cursor),
 * to the record after it: the next one, or past the last the format
 * record (always the first key). MDB_NOTFOUND when there is none. */
static int to_after(MDB_cursor *c, bool tail, MDB_val *k, MDB_val *v) {
  int rc = mdb_cursor_get(c, k, v, tail ? MDB_FIRST : MDB_NEXT);
  return rc == 0 && tail && !is_format(k) ? MDB_NOTFOUND : rc;
}

/* Writes the new record of key through c (put_new) at its place, then
 * relinks the record after it (past the last key, the format record) to
 * key. */
static int insert_at(MDB_cursor *c, const MDB_val *key, const resv__file_place_t *at,
                     resv__file_put_new_fn *put_new, void *arg) {
  MDB_val k, v;
  int rc = put_new(c, at->prev, at->tail, arg);
  if (rc == 0 && (rc = to_after(c, at->tail, &k, &v)) == 0)
    rc = relink_here(c, &k, &v, resv__file_key_link(key));
  return rc;
}

/* One cursor finds the key before key's place (unless at says where it
 * is), writes the new record there (a search of its own only when it
 * lands on another page), then moves on to the record after it. */
int resv__file_chain_insert(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key,
                            const resv__file_place_t *at, resv__file_put_new_fn *put_new,
                            void *arg) {
  MDB_cursor *c;
  MDB_val k = *key, v;
  resv__file_place_t found = {0, false};
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  if (!at) {
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
    found.tail = rc == MDB_NOTFOUND;
    if (rc == 0 || found.tail) rc = mdb_cursor_get(c, &k, &v, found.tail ? MDB_LAST : MDB_PREV);
    if (rc == 0) {
      found.prev = resv__file_key_link(&k);
      at = &found;
    } else if (rc == MDB_NOTFOUND) { /* not even the format record: nothing to chain */
      rc = put_new(c, 0, false, arg);
    }
  }
  if (at) rc = insert_at(c, key, at, put_new, arg);
  mdb_cursor_close(c);
  return rc;
}

/* One cursor: key's record (its link), the record after it relinked to
 * that link, then key's record deleted. */
int resv__file_chain_delete(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key) {
  MDB_cursor *c;
  MDB_val k = *key, v;
  uint32_t prev;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY);
  if (rc == 0 && resv__file_rec_link(key, &v, &prev)) {
    rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
    bool tail = rc == MDB_NOTFOUND;
    if (tail) rc = to_after(c, true, &k, &v);
    if (rc == 0) rc = relink_here(c, &k, &v, prev);
    if (rc == 0) { /* back to key's record */
      k = *key;
      rc = tail ? mdb_cursor_get(c, &k, &v, MDB_SET_KEY) : mdb_cursor_get(c, &k, &v, MDB_PREV);
    }
  }
  if (rc == 0) rc = mdb_cursor_del(c, 0);
  mdb_cursor_close(c);
  return rc;
}

bool resv__file_chain_gap(MDB_cursor *c, uint32_t want, const MDB_val *after,
                          const MDB_val *after_val) {
  uint32_t link;
  MDB_val k, v;
  if (after) return resv__file_rec_link(after, after_val, &link) && link == want;
  /* The format record is the first key (the cursor is there already, a
   * walk down the left edge), unless a damaged page put another first. */
  int rc = mdb_cursor_get(c, &k, &v, MDB_FIRST);
  if (rc == 0 && !is_format(&k)) {
    k.mv_data = (void *)format_key;
    k.mv_size = sizeof format_key - 1;
    rc = mdb_cursor_get(c, &k, &v, MDB_SET_KEY);
  }
  return rc == 0 && resv__file_rec_link(&k, &v, &link) && link == want;
}
