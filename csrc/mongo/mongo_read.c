/* mongo_read.c: the reads of one key's document that the operations
 * make (get; the read after an abandon or release that matched nothing;
 * the duplicate-key read of reserve and confirm), and
 * resv__mongo_find_one, the one-document find the other files use. Every
 * read goes to the primary with the time left as maxTimeMS; resv__read_mode_t
 * (mongo_internal.h) says by which filter and with which read concern.
 *
 * It must not write, nor decide an answer: it hands back the decoded
 * document, or RESV_EFORMAT for one that is not a reservation of this
 * layout, and whether the collection still has its format record. */
#include "mongo_internal.h"
#include "doc_bson.h"

bool resv__mongo_find_one(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const bson_t *filter, bool local, int64_t deadline,
                          bson_t *out, bool *found, bson_error_t *error) {
  resv__bw_t w;
  bson_t opts;
  mongoc_cursor_t *cursor;
  const bson_t *doc;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bool ok;

  resv__bw_init(&w);
  resv__bw_int64(&w, K("limit"), 1);
  resv__bw_bool(&w, K("singleBatch"), true);
  /* No time left: the smallest limit, so the server answers 50 at once. */
  resv__bw_int64(&w, K("maxTimeMS"), ms == 0 ? 0 : ms < 0 ? 1 : ms);
  if (local) {
    size_t rc = resv__bw_doc(&w, K("readConcern"));
    resv__bw_utf8(&w, K("level"), K("local"));
    resv__bw_end(&w, rc);
  }
  resv__bw_finish(&w, &opts);
  cursor = mongoc_collection_find_with_opts(coll, filter, &opts, m->primary);

  *found = mongoc_cursor_next(cursor, &doc);
  if (*found)
    bson_copy_to(doc, out);
  else
    bson_init(out);
  ok = !mongoc_cursor_error(cursor, error);
  mongoc_cursor_destroy(cursor);
  resv__bw_free(&w);
  return ok;
}

static bool find_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_key_t *k, bool by_id_only, bool local,
                     int64_t deadline, bson_t *raw, bool *found,
                     resv_error_t *err) {
  resv__bw_t w;
  bson_t filter;
  bson_error_t error;
  bool ok;

  resv__bw_init(&w);
  if (by_id_only)
    resv__mongo_put_id(&w, K("_id"), k);
  else
    resv__mongo_put_f_key(&w, k);
  resv__bw_finish(&w, &filter);
  ok = resv__mongo_find_one(m, coll, &filter, local, deadline, raw, found,
                            &error);
  resv__bw_free(&w);
  return ok ||
         resv__mongo_fail(m, err, &error, deadline, "read reservation");
}

/* One find for the key's document and the format record together, by
 * _id {$in: [<key's _id>, "format"]} (the _id index, one round trip, as
 * the key's read alone): the key's document into raw (*found), and
 * whether the format record is there (*format_seen). A collection without
 * it was dropped while the store ran, or emptied, and must be set up
 * again. Only where _id alone is the read's filter (not on a mongos, where
 * the format record lives on a shard the key does not route to). */
static bool find_key_and_format(const resv__mongo_t *m,
                                mongoc_collection_t *coll, const resv_key_t *k,
                                bool local, int64_t deadline, bson_t *raw,
                                bool *found, bool *format_seen,
                                resv_error_t *err) {
  resv__bw_t fw, ow;
  bson_t filter, opts;
  bson_error_t error;
  mongoc_cursor_t *cursor;
  const bson_t *doc;
  bson_iter_t it;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bool ok;

  resv__bw_init(&fw);
  size_t id = resv__bw_doc(&fw, K("_id"));
  size_t in = resv__bw_array(&fw, K("$in"));
  resv__mongo_put_id(&fw, K("0"), k);
  resv__bw_utf8(&fw, K("1"), K("format"));
  resv__bw_end(&fw, in);
  resv__bw_end(&fw, id);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&ow);
  resv__bw_int64(&ow, K("limit"), 2);
  resv__bw_bool(&ow, K("singleBatch"), true);
  resv__bw_int64(&ow, K("maxTimeMS"), ms == 0 ? 0 : ms < 0 ? 1 : ms);
  if (local) {
    size_t rc = resv__bw_doc(&ow, K("readConcern"));
    resv__bw_utf8(&ow, K("level"), K("local"));
    resv__bw_end(&ow, rc);
  }
  resv__bw_finish(&ow, &opts);
  cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, m->primary);
  *found = *format_seen = false;
  bson_init(raw);
  while (mongoc_cursor_next(cursor, &doc)) {
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
      *format_seen = true;
    } else if (!*found) {
      bson_destroy(raw);
      bson_copy_to(doc, raw);
      *found = true;
    }
  }
  ok = !mongoc_cursor_error(cursor, &error);
  mongoc_cursor_destroy(cursor);
  resv__bw_free(&ow);
  resv__bw_free(&fw);
  return ok ||
         resv__mongo_fail(m, err, &error, deadline, "read reservation");
}

bool resv__mongo_read_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const resv_key_t *k, resv__read_mode_t mode,
                          int64_t deadline, bson_t *raw,
                          resv__doc_t *doc, bool *found, bool *gone,
                          resv_error_t *err) {
  bool local = mode != RESV__READ_GET;

  if (gone && !m->is_mongos) {
    bool format_seen;
    if (!find_key_and_format(m, coll, k, local, deadline, raw, found,
                             &format_seen, err))
      return false;
    *gone = !format_seen;
  } else if (!find_key(m, coll, k, !m->is_mongos, local, deadline, raw,
                       found, err)) {
    return false;
  }
  if (!*found && m->is_mongos && mode == RESV__READ_DUPLICATE) {
    bson_destroy(raw);
    if (!find_key(m, coll, k, true, local, deadline, raw, found, err))
      return false;
  }
  return !*found || resv__doc_decode(raw, doc, err);
}

