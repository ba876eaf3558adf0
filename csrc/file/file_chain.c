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
 * transaction. */
#include "file_internal.h"
#include "file_record.h"

#include <string.h>

static const unsigned char format_key[] = "\0format";

/* Relinks the first record after key (the format record when key is the
 * last) to link. A record without a link (damaged, or not the store's) is
 * left as it is: the chain is broken there already. */
static int relink_after(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key, uint32_t link) {
  MDB_cursor *c;
  MDB_val k = *key, v;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
  if (rc == 0 && k.mv_size == key->mv_size && memcmp(k.mv_data, key->mv_data, k.mv_size) == 0)
    rc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
  mdb_cursor_close(c);
  if (rc == MDB_NOTFOUND) {
    k.mv_data = (void *)format_key;
    k.mv_size = sizeof format_key - 1;
    rc = mdb_get(txn, dbi, &k, &v);
  }
  if (rc) return rc;
  unsigned char at[RESV__FILE_KEY_MAX + 1];
  if (k.mv_size > sizeof at) return 0;
  memcpy(at, k.mv_data, k.mv_size);
  k.mv_data = at;
  resv__file_buf_t w;
  if (resv__file_rec_relink(&w, &k, &v, link)) {
    MDB_val nv = {w.len, w.p};
    rc = mdb_put(txn, dbi, &k, &nv, 0);
  }
  resv__file_buf_free(&w);
  return rc;
}

int resv__file_chain_insert(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key, uint32_t *prev) {
  MDB_cursor *c;
  MDB_val k = *key, v;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  rc = mdb_cursor_get(c, &k, &v, MDB_SET_RANGE);
  rc = rc == 0 ? mdb_cursor_get(c, &k, &v, MDB_PREV)
       : rc == MDB_NOTFOUND ? mdb_cursor_get(c, &k, &v, MDB_LAST) : rc;
  if (rc == 0) *prev = resv__file_key_link(&k);
  mdb_cursor_close(c);
  if (rc == MDB_NOTFOUND) { /* not even the format record: nothing to chain */
    *prev = 0;
    return 0;
  }
  return rc ? rc : relink_after(txn, dbi, key, resv__file_key_link(key));
}

int resv__file_chain_delete(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key) {
  MDB_val v;
  uint32_t prev;
  int rc = mdb_get(txn, dbi, (MDB_val *)key, &v);
  if (rc) return rc;
  if (resv__file_rec_link(key, &v, &prev) && (rc = relink_after(txn, dbi, key, prev)))
    return rc;
  return mdb_del(txn, dbi, (MDB_val *)key, NULL);
}

bool resv__file_chain_gap(MDB_txn *txn, MDB_dbi dbi, const MDB_val *before,
                          const MDB_val *after, const MDB_val *after_val) {
  uint32_t link;
  MDB_val k, v;
  if (after)
    return resv__file_rec_link(after, after_val, &link) && link == resv__file_key_link(before);
  k.mv_data = (void *)format_key;
  k.mv_size = sizeof format_key - 1;
  return mdb_get(txn, dbi, &k, &v) == 0 && resv__file_rec_link(&k, &v, &link) &&
         link == resv__file_key_link(before);
}
