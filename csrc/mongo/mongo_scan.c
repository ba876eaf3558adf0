/* mongo_scan.c: a page of resv_type_scan on MongoDB: one find sorted by
 * _id, with a limit, from the primary.
 *
 * The cursor handed out is the BSON document {_id: <the last _id>}, and
 * the next page asks for the _ids after it. An _id of any BSON type may
 * be in the collection (a reservation's is a document, but check must
 * see whatever was put there), and $gt compares within one type only
 * (type bracketing), so "after v" is { $or: [ {_id: {$gt: v}}, {_id:
 * {$type: T}} for each type T that sorts after v's ] }, in MongoDB's
 * order of types: numbers, strings, documents, binary data, ObjectIds,
 * booleans, dates. (An _id of another type, null, a regex or a timestamp,
 * is listed when it falls on a page; the emulator has no $type for them.)
 * The format record {_id: "format"} is read first, on the first page, and
 * never listed. Reads nothing else and writes nothing: a collection that
 * does not exist gives an empty page and format 0. Each document found
 * becomes an entry through doc_scan.c. */
#include "mongo_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const type_order[] = {"number", "string", "object",
                                         "binData", "objectId", "bool", "date"};
#define NTYPES (sizeof type_order / sizeof *type_order)

/* v's place in type_order, or NTYPES for a type not in it. */
static size_t type_rank(const bson_iter_t *v) {
  switch (bson_iter_type(v)) {
  case BSON_TYPE_INT32: case BSON_TYPE_INT64: case BSON_TYPE_DOUBLE:
  case BSON_TYPE_DECIMAL128: return 0;
  case BSON_TYPE_UTF8: case BSON_TYPE_SYMBOL: return 1;
  case BSON_TYPE_DOCUMENT: return 2;
  case BSON_TYPE_BINARY: return 3;
  case BSON_TYPE_OID: return 4;
  case BSON_TYPE_BOOL: return 5;
  case BSON_TYPE_DATE_TIME: return 6;
  default: return NTYPES;
  }
}

/* The filter of a page into filter: every _id but "format", after the
 * cursor's when there is one. False for a cursor that is not ours. */
static bool page_filter(const resv_str_t *after, bson_t *filter) {
  bson_t and, c0, c0_id, or, clause, clause_id;
  bson_t cur;
  bson_iter_t v;

  bson_init(filter);
  bson_append_array_begin(filter, "$and", 4, &and);
  bson_append_document_begin(&and, "0", 1, &c0);
  bson_append_document_begin(&c0, "_id", 3, &c0_id);
  bson_append_utf8(&c0_id, "$ne", 3, "format", 6);
  bson_append_document_end(&c0, &c0_id);
  bson_append_document_end(&and, &c0);
  if (after->len) {
    if (!bson_init_static(&cur, (const uint8_t *)after->ptr, after->len) ||
        !bson_validate(&cur, BSON_VALIDATE_NONE, NULL) ||
        !bson_iter_init_find(&v, &cur, "_id")) {
      bson_append_array_end(filter, &and);
      return false;
    }
    size_t rank = type_rank(&v);
    bson_t c1;
    bson_append_document_begin(&and, "1", 1, &c1);
    bson_append_array_begin(&c1, "$or", 3, &or);
    char index[16];
    int n = 0;
    snprintf(index, sizeof index, "%d", n++);
    bson_append_document_begin(&or, index, -1, &clause);
    bson_append_document_begin(&clause, "_id", 3, &clause_id);
    bson_append_iter(&clause_id, "$gt", 3, &v);
    bson_append_document_end(&clause, &clause_id);
    bson_append_document_end(&or, &clause);
    for (size_t t = rank + 1; t < NTYPES; t++) {
      snprintf(index, sizeof index, "%d", n++);
      bson_append_document_begin(&or, index, -1, &clause);
      bson_append_document_begin(&clause, "_id", 3, &clause_id);
      bson_append_utf8(&clause_id, "$type", 5, type_order[t], -1);
      bson_append_document_end(&clause, &clause_id);
      bson_append_document_end(&or, &clause);
    }
    bson_append_array_end(&c1, &or);
    bson_append_document_end(&and, &c1);
  }
  bson_append_array_end(filter, &and);
  return true;
}

bool resv__mongo_scan(const resv__mongo_t *m, mongoc_collection_t *coll,
                      const resv_str_t *after, size_t limit, int64_t now,
                      int64_t deadline, resv_scan_t *scan, resv_error_t *err) {
  bson_error_t error;
  bson_t filter, opts, sort, last = BSON_INITIALIZER;
  bool ok = true;

  if (!after->len) {
    bson_t format_id = BSON_INITIALIZER, found_doc;
    bool found;
    BSON_APPEND_UTF8(&format_id, "_id", "format");
    ok = resv__mongo_find_one(m, coll, &format_id, false, deadline, &found_doc, &found, &error);
    if (!ok)
      resv__mongo_fail(m, err, &error, deadline, "scan: read the format record");
    else
      ok = resv__scan_set_format(scan, found ? bson_get_data(&found_doc) : NULL,
                                 found ? found_doc.len : 0, err);
    bson_destroy(&format_id);
    bson_destroy(&found_doc);
    if (!ok) return false;
  }
  if (!page_filter(after, &filter)) {
    bson_destroy(&filter);
    return resv__fail(err, RESV_EINVALID, "after: not a cursor of this store");
  }
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bson_init(&opts);
  bson_append_document_begin(&opts, "sort", 4, &sort);
  BSON_APPEND_INT32(&sort, "_id", 1);
  bson_append_document_end(&opts, &sort);
  BSON_APPEND_INT64(&opts, "limit", (int64_t)limit + 1);
  BSON_APPEND_INT64(&opts, "maxTimeMS", ms == 0 ? 0 : ms < 0 ? 1 : ms);
  mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, m->primary);
  const bson_t *doc;
  while (ok && mongoc_cursor_next(cursor, &doc)) {
    if (scan->count == limit) {
      /* One more follows: the page ends at the last one taken. */
      ok = resv__scan_set_next(scan, (const char *)bson_get_data(&last), last.len) ||
           resv__fail(err, RESV_ENOMEM, "out of memory");
      break;
    }
    bson_iter_t id;
    bson_reinit(&last);
    if (bson_iter_init_find(&id, doc, "_id")) bson_append_iter(&last, "_id", 3, &id);
    ok = resv__scan_add_document(scan, bson_get_data(doc), doc->len, now, err);
  }
  if (ok && mongoc_cursor_error(cursor, &error))
    ok = resv__mongo_fail(m, err, &error, deadline, "scan");
  mongoc_cursor_destroy(cursor);
  bson_destroy(&filter);
  bson_destroy(&opts);
  bson_destroy(&last);
  return ok;
}
