/* file_scan.c: a page of resv_type_scan in the file store, inside one
 * read-only transaction (a consistent snapshot, no writer's lock).
 *
 * The records are visited in LMDB's key order: the format record (tag
 * 0x00) first, which the first page reads into scan->format and no page
 * lists, then the reservations. The cursor handed out is the last
 * record's LMDB key, so the next page starts just past it (MDB_SET_RANGE),
 * whatever was written or deleted in between. */
#include "file_internal.h"

#include <string.h>

static const unsigned char format_key[] = "\0format";

int resv__file_scan(MDB_txn *txn, MDB_dbi dbi, const resv_str_t *after,
                    size_t limit, int64_t now, resv_scan_t *scan,
                    resv_error_t *err, bool *ok) {
  MDB_cursor *c;
  MDB_val key, val;
  *ok = true;
  if (after->len == 0) {
    key.mv_data = (void *)format_key;
    key.mv_size = sizeof format_key - 1;
    int rc = mdb_get(txn, dbi, &key, &val);
    if (rc && rc != MDB_NOTFOUND) return rc;
    if (!(*ok = resv__scan_set_format(scan, rc ? NULL : val.mv_data,
                                      rc ? 0 : val.mv_size, err)))
      return 0;
  }
  if (after->len > RESV__FILE_KEY_MAX) {
    *ok = resv__fail(err, RESV_EINVALID, "after: not a cursor of this store");
    return 0;
  }
  int rc = mdb_cursor_open(txn, dbi, &c);
  if (rc) return rc;
  if (after->len) {
    key.mv_data = (void *)after->ptr;
    key.mv_size = after->len;
    rc = mdb_cursor_get(c, &key, &val, MDB_SET_RANGE);
    if (rc == 0 && key.mv_size == after->len && memcmp(key.mv_data, after->ptr, after->len) == 0)
      rc = mdb_cursor_get(c, &key, &val, MDB_NEXT);
  } else {
    rc = mdb_cursor_get(c, &key, &val, MDB_FIRST);
  }
  MDB_val last = {0, NULL};
  for (; rc == 0; rc = mdb_cursor_get(c, &key, &val, MDB_NEXT)) {
    const unsigned char *k = key.mv_data;
    if (key.mv_size >= 1 && k[0] == RESV__FILE_TAG_FORMAT) continue;
    if (scan->count == limit) {
      /* Another record follows: the page ends at the last one taken. */
      *ok = resv__scan_set_next(scan, last.mv_data, last.mv_size) ||
            resv__fail(err, RESV_ENOMEM, "out of memory");
      break;
    }
    if (!(*ok = resv__scan_add_document(scan, val.mv_data, val.mv_size, now, err))) break;
    last = key;
  }
  mdb_cursor_close(c);
  return rc == MDB_NOTFOUND ? 0 : rc;
}
