/* file_format.c: a type's format record, and the listing of each type in
 * the store's "resv" database, inside one transaction.
 *
 * It reads and writes only the format record and the "type <collection>"
 * keys; it must not begin or end a transaction (its callers do, through
 * file_txn.c), nor touch a type's reservations. */
#include "file_internal.h"
#include "file_record.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const unsigned char format_key[] = "\0format";
int resv__file_type_listed(MDB_txn *txn, const char *collection, bool add, bool *listed) {
  MDB_dbi marker;
  char name[RESV__MAX_NAMESPACE + 8];
  int n = snprintf(name, sizeof name, "type %s", collection);
  MDB_val key = {(size_t)n, name}, val = {0, (void *)""};
  int rc = mdb_dbi_open(txn, "resv", 0, &marker);
  if (rc) return rc;
  rc = mdb_get(txn, marker, &key, &val);
  *listed = rc == 0;
  if (rc == MDB_NOTFOUND && add) {
    val.mv_size = 0;
    return mdb_put(txn, marker, &key, &val, 0);
  }
  return rc == MDB_NOTFOUND ? 0 : rc;
}

int resv__file_format(MDB_txn *txn, MDB_dbi dbi, const char *collection,
                      resv_error_t *err, bool *ok) {
  MDB_val key = {sizeof format_key - 1, (void *)format_key}, val;
  *ok = true;
  int rc = mdb_get(txn, dbi, &key, &val);
  if (rc == MDB_NOTFOUND) {
    bool listed;
    if ((rc = resv__file_type_listed(txn, collection, true, &listed))) return rc;
    if (listed) {
      *ok = resv__fail_format(err, collection,
                              "the type has no format record but the store lists it: "
                              "the file is damaged");
      return 0;
    }
    resv__file_buf_t w;
    if (!resv__file_format_encode(&w, &key, 1, resv__file_key_link(&key))) {
      resv__file_buf_free(&w);
      return ENOMEM;
    }
    val.mv_data = w.p;
    val.mv_size = w.len;
    rc = mdb_put(txn, dbi, &key, &val, 0);
    resv__file_buf_free(&w);
    return rc;
  }
  if (rc) return rc;
  int32_t format;
  const char *why;
  if (!resv__file_format_decode(&key, &val, &format, &why))
    *ok = resv__fail_format(err, collection, why);
  else if (format != 1)
    *ok = resv__fail_format_number(err, collection, true, format);
  return 0;
}
