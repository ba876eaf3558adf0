/* doc_scan.c: a stored format-1 document as an entry of resv_type_scan,
 * and a format record as the scan's format.
 *
 * A document becomes an entry through doc_decode.c's strict decoder, the
 * one every call reads with. What it accepts is a reservation, with the
 * status get would answer at the same clock; anything else is an entry of
 * status RESV_NONE that names its _id and the decoder's reason, so a tool
 * lists what does not conform without ever failing on it. libbson only:
 * nothing here talks to a server. */
#include "doc.h"

#include <string.h>

static bool nomem(resv_error_t *err) {
  return resv__fail(err, RESV_ENOMEM, "out of memory");
}

/* The relaxed extended JSON of the value at it, into the entry's id. */
static bool id_json(resv_scan_t *scan, resv_scan_entry_t *e, const bson_iter_t *it) {
  bson_t one = BSON_INITIALIZER;
  size_t len = 0;
  char *json = NULL;
  bool ok = bson_append_iter(&one, "_id", 3, it) &&
            (json = bson_as_relaxed_extended_json(&one, &len)) != NULL;
  bson_destroy(&one);
  if (!ok) return resv__scan_copy_str(scan, &e->id, "?", 1);
  /* "{ "_id" : VALUE }": keep VALUE. */
  const char *v = strstr(json, ": ");
  v = v ? v + 2 : json;
  size_t n = strlen(v);
  if (n >= 2 && v[n - 1] == '}' && v[n - 2] == ' ') n -= 2;
  ok = resv__scan_copy_str(scan, &e->id, v, n);
  bson_free(json);
  return ok;
}

/* A non-conforming document's key, when its _id is {t, n, k} of strings. */
static bool id_key(resv_scan_t *scan, resv_scan_entry_t *e, const bson_iter_t *id) {
  static const char *const names[] = {"t", "n", "k"};
  resv_str_t *outs[] = {&e->tenant, &e->ns, &e->key};
  resv_str_t parts[3];
  bson_iter_t sub;
  if (!BSON_ITER_HOLDS_DOCUMENT(id) || !bson_iter_recurse(id, &sub)) return true;
  for (int i = 0; i < 3; i++) {
    uint32_t len;
    if (!bson_iter_next(&sub) || strcmp(bson_iter_key(&sub), names[i]) != 0 ||
        !BSON_ITER_HOLDS_UTF8(&sub))
      return true;
    parts[i].ptr = bson_iter_utf8(&sub, &len);
    parts[i].len = len;
  }
  for (int i = 0; i < 3; i++)
    if (!resv__scan_copy_str(scan, outs[i], parts[i].ptr, parts[i].len)) return false;
  return true;
}

bool resv__scan_add_document(resv_scan_t *scan, const uint8_t *doc, size_t len,
                             int64_t now, resv_error_t *err) {
  resv_scan_entry_t *e = resv__scan_push(scan);
  if (!e) return nomem(err);
  bson_t b;
  resv__doc_t d;
  resv_error_t why;
  bool bson_ok = bson_init_static(&b, doc, len);
  if (bson_ok && resv__doc_decode(&b, &d, &why)) {
    resv__scan_doc_t view = {&d.key, &d.owner, d.state, d.expires_at, d.version,
                             d.holds, d.nholds};
    bool ok = resv__scan_fill(scan, e, &view, now);
    resv__doc_free(&d);
    return ok || nomem(err);
  }
  if (bson_ok && why.code == RESV_ENOMEM) return nomem(err);
  e->status = RESV_NONE;
  e->state = RESV_STATE_NONE;
  const char *problem = bson_ok ? why.message : "corrupt BSON";
  /* Drop the decoder's "document is not a format-1 reservation: ". */
  const char *colon = strstr(problem, ": ");
  if (colon && strncmp(problem, "document is not", 15) == 0) problem = colon + 2;
  if (!resv__scan_copy_str(scan, &e->problem, problem, strlen(problem))) return nomem(err);
  bson_iter_t it;
  if (bson_ok && bson_iter_init_find(&it, &b, "_id")) {
    if (!id_json(scan, e, &it) || !id_key(scan, e, &it)) return nomem(err);
  } else if (!resv__scan_copy_str(scan, &e->id, "(none)", 6)) {
    return nomem(err);
  }
  return true;
}

bool resv__scan_set_format(resv_scan_t *scan, const uint8_t *doc, size_t len,
                           resv_error_t *err) {
  const char *problem = NULL;
  char why[128];
  bson_t b;
  bson_iter_t it;
  if (!doc) {
    scan->format = 0;
    return true;
  }
  if (!bson_init_static(&b, doc, len) || !bson_iter_init(&it, &b)) {
    problem = "the format record is corrupt BSON";
  } else if (!bson_iter_find(&it, "format") || !BSON_ITER_HOLDS_NUMBER(&it)) {
    resv__format_problem(why, sizeof why, false, 0);
    problem = why;
  } else if (bson_iter_as_int64(&it) != 1 || bson_iter_as_double(&it) != 1.0) {
    resv__format_problem(why, sizeof why, true, bson_iter_as_double(&it));
    problem = why;
  }
  if (!problem) {
    scan->format = 1;
    return true;
  }
  scan->format = -1;
  return resv__scan_copy_str(scan, &scan->format_problem, problem, strlen(problem)) || nomem(err);
}
