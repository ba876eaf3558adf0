/* file_upgrade.c: a store of format 1, whose records are BSON documents,
 * rewritten into format 2's records (file_record.h) at open.
 *
 * Format 1 keeps each record as its MongoDB document, without a checksum.
 * Read with format 2's decoder, a BSON document would fail its checksum
 * and answer format for every key; so the open that finds the store's
 * format record at 1 rewrites every record of every type in the one write
 * transaction that also marks the store 2 (file_store.c): the store is
 * upgraded whole or not at all, and a crash in between leaves format 1.
 *
 * A document is read by the format-1 decoder (csrc/doc/doc_decode.c),
 * the one the MongoDB store reads its documents with; one it refuses (put
 * there by hand) is left as it is, and answers format as it did, now for
 * its checksum. A type's
 * format record {_id: "format", format: N} becomes the record of format
 * N (a type of another format stays refused). */
#include "file_internal.h"
#include "doc.h"
#include "file_record.h"

#include <bson/bson.h>
#include <string.h>

#define TYPE_PREFIX "wow_reservation__"

/* The format-2 record of one format-1 record into w; false when it is
 * not of the layout (left as it is). */
static bool convert(const MDB_val *key, const MDB_val *val, uint32_t prev,
                    resv__file_buf_t *w) {
  bson_t b;
  bson_iter_t it;
  const unsigned char *k = key->mv_data;
  if (key->mv_size < 1 || !bson_init_static(&b, val->mv_data, val->mv_size)) return false;
  if (k[0] == RESV__FILE_TAG_FORMAT) {
    if (!bson_iter_init_find(&it, &b, "format") || !BSON_ITER_HOLDS_NUMBER(&it)) return false;
    return resv__file_format_encode(w, key, (int32_t)bson_iter_as_int64(&it), 0);
  }
  resv__doc_t d;
  if (!resv__doc_decode(&b, &d, NULL)) return false;
  bool confirmed = d.state == RESV_STATE_CONFIRMED;
  bool ok = resv__file_rec_encode(w, key, &d.key, &d.owner, confirmed,
                                  confirmed ? 0 : d.expires_at, confirmed ? d.version : 0,
                                  d.holds, d.nholds, prev);
  resv__doc_free(&d);
  return ok;
}

/* Puts w under a copy of key, then finds the key again with c, to go on
 * from it (a put of another size moves the records under a cursor). */
static int put_at(MDB_txn *txn, MDB_dbi dbi, MDB_cursor *c, const MDB_val *key,
                  const resv__file_buf_t *w) {
  unsigned char at[RESV__FILE_KEY_MAX + 1];
  MDB_val k = {key->mv_size, at}, nv = {w->len, w->p}, v;
  if (key->mv_size > sizeof at) return MDB_BAD_VALSIZE;
  memcpy(at, key->mv_data, key->mv_size);
  int rc = mdb_put(txn, dbi, &k, &nv, 0);
  return rc ? rc : mdb_cursor_get(c, &k, &v, MDB_SET);
}

/* Every record of one type's database, chained in key order (the format
 * record, first, gets the last key's link at the end). */
static int upgrade_type(MDB_txn *txn, MDB_dbi dbi) {
  MDB_cursor *c;
  MDB_val key, val;
  uint32_t prev = 0;
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  for (rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
    resv__file_buf_t w;
    uint32_t link = resv__file_key_link(&key);
    if (convert(&key, &val, prev, &w)) rc = put_at(txn, dbi, c, &key, &w);
    resv__file_buf_free(&w);
    prev = link;
    if (rc) break;
  }
  mdb_cursor_close(c);
  if (rc != MDB_NOTFOUND) return rc;
  static const unsigned char format_key[] = "\0format";
  key.mv_data = (void *)format_key;
  key.mv_size = sizeof format_key - 1;
  if ((rc = mdb_get(txn, dbi, &key, &val))) return rc == MDB_NOTFOUND ? 0 : rc;
  resv__file_buf_t w;
  if (resv__file_rec_relink(&w, &key, &val, prev)) {
    MDB_val nv = {w.len, w.p};
    rc = mdb_put(txn, dbi, &key, &nv, 0);
  }
  resv__file_buf_free(&w);
  return rc;
}

int resv__file_upgrade(MDB_txn *txn) {
  MDB_dbi main_dbi;
  MDB_cursor *c;
  MDB_val key, val;
  int rc = mdb_dbi_open(txn, NULL, 0, &main_dbi);
  if (rc || (rc = mdb_cursor_open(txn, main_dbi, &c))) return rc;
  for (rc = mdb_cursor_get(c, &key, &val, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
    char name[RESV__MAX_NAMESPACE + 1];
    if (key.mv_size < sizeof TYPE_PREFIX - 1 || key.mv_size >= sizeof name ||
        memcmp(key.mv_data, TYPE_PREFIX, sizeof TYPE_PREFIX - 1))
      continue;
    memcpy(name, key.mv_data, key.mv_size);
    name[key.mv_size] = '\0';
    MDB_dbi dbi;
    bool listed;
    if ((rc = mdb_dbi_open(txn, name, 0, &dbi)) || (rc = upgrade_type(txn, dbi)) ||
        (rc = resv__file_type_listed(txn, name, true, &listed)))
      break;
  }
  mdb_cursor_close(c);
  return rc == MDB_NOTFOUND ? 0 : rc;
}
