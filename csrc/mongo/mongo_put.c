/* mongo_put.c: resv_type_put on MongoDB.
 *
 * A put copies one reservation, exactly as another store holds it, into a
 * key that is free: MongoDB's insert of the document with its _id, so the
 * _id index decides, atomically, whether the key was free (any document
 * already there, a reservation or not, expired or live, fails the insert
 * with a duplicate key and is never touched). After a duplicate key the
 * document is read by _id: the same reservation (key, owner, state,
 * expiry and holds in order, or version) answers RESV_PUT_SAME, anything
 * else RESV_PUT_DIFFERENT. So a copy run twice, or resumed after it was
 * interrupted, writes each reservation once and overwrites nothing. The
 * document is doc_entry.c's. */
#include "doc_bson.h"
#include "mongo_internal.h"

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
      resv__doc_t d;
      *outcome = RESV_PUT_DIFFERENT;
      if (found && resv__doc_decode(&found_doc, &d, NULL)) {
        if (resv__scan_entry_matches(e, &d)) *outcome = RESV_PUT_SAME;
        resv__doc_free(&d);
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
