/* mongo_put.c: resv_type_put on MongoDB, and the document of a scan's
 * entry that both stores holding these documents write.
 *
 * A put copies one reservation, exactly as another store holds it, into a
 * key that is free: MongoDB's insert of the document with its _id, so the
 * _id index decides, atomically, whether the key was free (any document
 * already there, a reservation or not, expired or live, fails the insert
 * with a duplicate key and is never touched). After a duplicate key the
 * document is read by _id: the same reservation (key, owner, state,
 * expiry and holds in order, or version) answers RESV_PUT_SAME, anything
 * else RESV_PUT_DIFFERENT. So a copy run twice, or resumed after it was
 * interrupted, writes each reservation once and overwrites nothing. */
#include "doc_bson.h"
#include "mongo_internal.h"

#include <string.h>

void resv__scan_entry_encode(const resv_scan_entry_t *e, resv__bw_t *w) {
  resv__bw_init(w);
  size_t id = resv__bw_doc(w, K("_id"));
  resv__bw_utf8(w, K("t"), e->tenant.ptr, e->tenant.len);
  resv__bw_utf8(w, K("n"), e->ns.ptr, e->ns.len);
  resv__bw_utf8(w, K("k"), e->key.ptr, e->key.len);
  resv__bw_end(w, id);
  resv__bw_utf8(w, K("tenant_id"), e->tenant.ptr, e->tenant.len);
  resv__bw_utf8(w, K("key"), e->key.ptr, e->key.len);
  size_t owner = resv__bw_doc(w, K("owner"));
  resv__bw_utf8(w, K("tenant_id"), e->owner_tenant.ptr, e->owner_tenant.len);
  resv__bw_utf8(w, K("id"), e->owner_id.ptr, e->owner_id.len);
  resv__bw_end(w, owner);
  if (e->state == RESV_STATE_CONFIRMED) {
    resv__bw_null(w, K("expires_at"));
    resv__bw_int64(w, K("version"), e->version);
  } else {
    resv__bw_int64(w, K("expires_at"), e->expires_at);
    size_t arr = resv__bw_array(w, K("holds"));
    for (size_t i = 0; i < e->nholds; i++) {
      char buf[16];
      const char *name;
      size_t len = bson_uint32_to_string((uint32_t)i, &name, buf, sizeof buf);
      resv__bw_utf8(w, name, len, e->holds[i].ptr, e->holds[i].len);
    }
    resv__bw_end(w, arr);
  }
  resv__bw_end(w, 0);
}

static bool same(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

bool resv__scan_entry_matches(const resv_scan_entry_t *e, const resv__mongo_doc_t *d) {
  if (!same(d->key.tenant, e->tenant) || !same(d->key.ns, e->ns) ||
      !same(d->key.key, e->key) || !same(d->owner.tenant, e->owner_tenant) ||
      !same(d->owner.id, e->owner_id) || d->state != e->state)
    return false;
  if (d->state == RESV_STATE_CONFIRMED) return d->version == e->version;
  if (d->expires_at != e->expires_at || d->nholds != e->nholds) return false;
  for (size_t i = 0; i < d->nholds; i++)
    if (!same(d->holds[i], e->holds[i])) return false;
  return true;
}

bool resv__mongo_put(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_scan_entry_t *e, int64_t deadline, int32_t *outcome,
                     resv_error_t *err) {
  resv__bw_t w;
  bson_t doc, reply, opts = BSON_INITIALIZER;
  bson_error_t error;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  resv__scan_entry_encode(e, &w);
  bson_init_static(&doc, w.buf, w.len); /* encode ended the document */
  if (ms > 0) BSON_APPEND_INT64(&opts, "maxTimeMS", ms);
  bool ok = mongoc_collection_insert_one(coll, &doc, &opts, &reply, &error);
  bson_destroy(&reply);
  bson_destroy(&opts);
  if (ok) {
    *outcome = RESV_PUT_ADDED;
  } else if (resv__mongo_is_duplicate(&error)) {
    bson_t filter = BSON_INITIALIZER, found_doc, idv;
    bool found;
    bson_append_document_begin(&filter, "_id", 3, &idv);
    bson_append_utf8(&idv, "t", 1, e->tenant.ptr, (int)e->tenant.len);
    bson_append_utf8(&idv, "n", 1, e->ns.ptr, (int)e->ns.len);
    bson_append_utf8(&idv, "k", 1, e->key.ptr, (int)e->key.len);
    bson_append_document_end(&filter, &idv);
    ok = resv__mongo_find_one(m, coll, &filter, true, deadline, &found_doc, &found, &error);
    if (!ok) {
      resv__mongo_fail(m, err, &error, deadline, "put: read the key's document");
    } else {
      resv__mongo_doc_t d;
      *outcome = RESV_PUT_DIFFERENT;
      if (found && resv__mongo_decode(&found_doc, &d, NULL)) {
        if (resv__scan_entry_matches(e, &d)) *outcome = RESV_PUT_SAME;
        resv__mongo_doc_free(&d);
      }
    }
    bson_destroy(&filter);
    bson_destroy(&found_doc);
  } else {
    resv__mongo_fail(m, err, &error, deadline, "put");
  }
  resv__bw_free(&w);
  return ok;
}
