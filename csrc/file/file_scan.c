/* file_scan.c: a page of resv_type_scan in the file store, inside one
 * read-only transaction (a consistent snapshot, no writer's lock).
 *
 * The records are visited in LMDB's key order: the format record (tag
 * 0x00) first, which the first page reads into scan->format and no page
 * lists, then the reservations. The cursor handed out is the last
 * record's LMDB key, so the next page starts just past it (MDB_SET_RANGE),
 * whatever was written or deleted in between.
 *
 * A record becomes an entry through the decoder every call reads with
 * (file_record.c), checksum first: what it accepts is a reservation with
 * the status get would answer at the same clock; anything else, a damaged
 * record above all, is an entry of status RESV_NONE naming its key and
 * what is wrong, so resv check lists the damage without ever failing on
 * it. */
#include "file_internal.h"
#include "file_record.h"

#include <stdio.h>
#include <string.h>

static const unsigned char format_key[] = "\0format";

static bool nomem(resv_error_t *err) {
  return resv__fail(err, RESV_ENOMEM, "out of memory");
}

/* The JSON string of p[0..n) into out (at most size bytes, cut short past
 * it): printable ASCII as it is, any other byte escaped. */
static size_t json_str(char *out, size_t size, const char *p, size_t n) {
  size_t o = 0;
  if (o < size) out[o++] = '"';
  for (size_t i = 0; i < n && o + 8 < size; i++) {
    unsigned char c = (unsigned char)p[i];
    if (c == '"' || c == '\\')
      o += (size_t)snprintf(out + o, size - o, "\\%c", c);
    else if (c < 0x20 || c >= 0x7f)
      o += (size_t)snprintf(out + o, size - o, "\\u%04x", c);
    else
      out[o++] = (char)c;
  }
  if (o < size) out[o++] = '"';
  return o;
}

/* The entry's id: the MongoDB _id of a direct key, { "t" : ..., "n" :
 * ..., "k" : ... }, or the key's bytes in hex. */
static bool entry_id(resv_scan_t *scan, resv_scan_entry_t *e, const MDB_val *key) {
  char id[2048];
  size_t n = 0;
  resv_key_t k;
  if (resv__file_key_parts(key, &k)) {
    n += (size_t)snprintf(id + n, sizeof id - n, "{ \"t\" : ");
    n += json_str(id + n, sizeof id - n - 1, k.tenant.ptr, k.tenant.len);
    n += (size_t)snprintf(id + n, sizeof id - n, ", \"n\" : ");
    n += json_str(id + n, sizeof id - n - 1, k.ns.ptr, k.ns.len);
    n += (size_t)snprintf(id + n, sizeof id - n, ", \"k\" : ");
    n += json_str(id + n, sizeof id - n - 8, k.key.ptr, k.key.len);
    n += (size_t)snprintf(id + n, sizeof id - n, " }");
    if (!resv__scan_copy_str(scan, &e->tenant, k.tenant.ptr, k.tenant.len) ||
        !resv__scan_copy_str(scan, &e->ns, k.ns.ptr, k.ns.len) ||
        !resv__scan_copy_str(scan, &e->key, k.key.ptr, k.key.len))
      return false;
  } else {
    n += (size_t)snprintf(id, sizeof id, "key 0x");
    const unsigned char *p = key->mv_data;
    for (size_t i = 0; i < key->mv_size && n + 3 < sizeof id; i++)
      n += (size_t)snprintf(id + n, sizeof id - n, "%02x", p[i]);
  }
  return resv__scan_copy_str(scan, &e->id, id, n < sizeof id ? n : sizeof id - 1);
}

/* A new entry of scan from the record key/val. Fails only for memory. */
static bool add_record(resv_scan_t *scan, const resv__file_bounds_t *b, const MDB_val *key,
                       const MDB_val *val, int64_t now, resv_error_t *err) {
  resv_scan_entry_t *e = resv__scan_push(scan);
  if (!e) return nomem(err);
  resv__file_rec_t d;
  resv_error_t why = {0};
  bool inside = resv__file_in_map(b, key, val);
  if (inside && resv__file_rec_decode(key, val, &d, &why)) {
    resv__scan_doc_t view = {&d.key, &d.owner, d.state, d.expires_at, d.version,
                             d.holds, d.nholds};
    bool ok = resv__scan_fill(scan, e, &view, now);
    resv__file_rec_free(&d);
    return ok || nomem(err);
  }
  if (inside && why.code == RESV_ENOMEM) return nomem(err);
  e->status = RESV_NONE;
  e->state = RESV_STATE_NONE;
  const char *problem = inside ? why.message : "its size is damaged: the record is damaged";
  if (!resv__scan_copy_str(scan, &e->problem, problem, strlen(problem))) return nomem(err);
  if (!inside) return resv__scan_copy_str(scan, &e->id, "(a damaged key)", 15) || nomem(err);
  return entry_id(scan, e, key) || nomem(err);
}

/* scan->format from the format record (NULL: none). */
static bool set_format(resv_scan_t *scan, const MDB_val *key, const MDB_val *val,
                       resv_error_t *err) {
  int32_t format;
  const char *problem = NULL;
  char why[128];
  if (!val) {
    scan->format = 0;
    return true;
  }
  if (!resv__file_format_decode(key, val, &format, &problem)) {
    /* problem says why */
  } else if (format != 1) {
    resv__format_problem(why, sizeof why, true, format);
    problem = why;
  } else {
    scan->format = 1;
    return true;
  }
  scan->format = -1;
  return resv__scan_copy_str(scan, &scan->format_problem, problem, strlen(problem)) || nomem(err);
}

int resv__file_scan(MDB_txn *txn, MDB_dbi dbi, const resv_str_t *after,
                    size_t limit, int64_t now, resv_scan_t *scan,
                    resv_error_t *err, bool *ok) {
  MDB_cursor *c;
  MDB_val key, val;
  resv__file_bounds_t b;
  *ok = true;
  resv__file_bounds_of(txn, true, &b);
  if (after->len == 0) {
    key.mv_data = (void *)format_key;
    key.mv_size = sizeof format_key - 1;
    int rc = mdb_get(txn, dbi, &key, &val);
    if (rc && rc != MDB_NOTFOUND) return rc;
    if (!(*ok = set_format(scan, &key, rc ? NULL : &val, err))) return 0;
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
    if (!(*ok = add_record(scan, &b, &key, &val, now, err))) break;
    last = key;
  }
  mdb_cursor_close(c);
  return rc == MDB_NOTFOUND ? 0 : rc;
}
