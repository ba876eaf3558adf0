/* doc_decode.c: the format-1 document, read.
 *
 * Reading: a stored document is checked field by field against docs/design.md
 * section 3, in order: _id {t, n, k}, tenant_id, key, owner {tenant_id, id},
 * expires_at (int64, or null when confirmed), then holds (an array of
 * strings, pending only) or version (int64, confirmed only), and nothing
 * else. Every string must be UTF-8 without NUL, and tenant_id/key must
 * repeat the _id's. A document that is not exactly this is not ours to
 * interpret: it answers RESV_EFORMAT, so a collection written by something
 * else can never crash the store or be mistaken for a reservation.
 */
#include "doc.h"

#include <stdlib.h>
#include <string.h>

static bool bad(resv_error_t *err, const char *what) {
  return resv__fail(err, RESV_EFORMAT,
                    "document is not a format-1 reservation: %s", what);
}

/* Reads the next field of it, which must be named name and hold valid
 * UTF-8 without NUL, into out. */
static bool next_string(bson_iter_t *it, const char *name, resv_str_t *out) {
  uint32_t len;
  const char *s;

  if (!bson_iter_next(it) || strcmp(bson_iter_key(it), name) != 0 ||
      !BSON_ITER_HOLDS_UTF8(it))
    return false;
  s = bson_iter_utf8(it, &len);
  if (!resv__utf8_valid(s, len))
    return false;
  out->ptr = s;
  out->len = len;
  return true;
}

/* Reads the next field of it, which must be a document named name whose
 * fields are exactly names[0..n) holding strings, into outs. */
static bool next_subdoc(bson_iter_t *it, const char *name,
                        const char *const *names, resv_str_t *outs,
                        size_t n) {
  bson_iter_t sub;

  if (!bson_iter_next(it) || strcmp(bson_iter_key(it), name) != 0 ||
      !BSON_ITER_HOLDS_DOCUMENT(it) || !bson_iter_recurse(it, &sub))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!next_string(&sub, names[i], &outs[i]))
      return false;
  return !bson_iter_next(&sub);
}

static bool read_int64(const bson_iter_t *it, int64_t *out) {
  if (BSON_ITER_HOLDS_INT64(it))
    *out = bson_iter_int64(it);
  else if (BSON_ITER_HOLDS_INT32(it))
    *out = bson_iter_int32(it);
  else
    return false;
  return true;
}

/* Reads the holds array: strings, no duplicates (a set). */
static bool read_holds(const bson_iter_t *it, resv__doc_t *out,
                       resv_error_t *err) {
  bson_iter_t arr;
  size_t n = 0, cap = 0;

  if (!BSON_ITER_HOLDS_ARRAY(it) || !bson_iter_recurse(it, &arr))
    return bad(err, "holds is not an array");
  while (bson_iter_next(&arr)) {
    uint32_t len;
    const char *s;

    if (!BSON_ITER_HOLDS_UTF8(&arr))
      return bad(err, "a hold is not a string");
    s = bson_iter_utf8(&arr, &len);
    if (len == 0 || !resv__utf8_valid(s, len))
      return bad(err, "a hold is empty or not UTF-8");
    if (n == cap) {
      size_t ncap = cap ? cap * 2 : 4;
      resv_str_t *grown = realloc(out->holds, ncap * sizeof *grown);
      if (!grown)
        return resv__fail(err, RESV_ENOMEM, "out of memory");
      out->holds = grown;
      cap = ncap;
    }
    out->holds[n].ptr = s;
    out->holds[n].len = len;
    out->nholds = ++n;
  }
  bool distinct;
  if (!resv__strs_distinct(out->holds, n, &distinct, err))
    return false;
  if (!distinct)
    return bad(err, "holds has a duplicate");
  /* An empty array is legal: abandon leaves one between its pull and its
   * delete, and for good if the delete never ran. */
  return true;
}

static bool decode(const bson_t *doc, resv__doc_t *out,
                   resv_error_t *err) {
  static const char *const id_names[] = {"t", "n", "k"};
  static const char *const owner_names[] = {"tenant_id", "id"};
  resv_str_t id[3], owner[2], tenant, key;
  bson_iter_t it;

  if (!bson_iter_init(&it, doc))
    return bad(err, "corrupt BSON");
  if (!next_subdoc(&it, "_id", id_names, id, 3))
    return bad(err, "_id is not {t, n, k}");
  if (!next_string(&it, "tenant_id", &tenant) || !resv__str_eq(tenant, id[0]))
    return bad(err, "tenant_id missing or not the _id's");
  if (!next_string(&it, "key", &key) || !resv__str_eq(key, id[2]))
    return bad(err, "key missing or not the _id's");
  if (id[1].len == 0 || id[2].len == 0)
    return bad(err, "empty namespace or key");
  if (!next_subdoc(&it, "owner", owner_names, owner, 2) || owner[1].len == 0)
    return bad(err, "owner is not {tenant_id, id}");
  out->key.tenant = id[0];
  out->key.ns = id[1];
  out->key.key = id[2];
  out->owner.tenant = owner[0];
  out->owner.id = owner[1];

  if (!bson_iter_next(&it) || strcmp(bson_iter_key(&it), "expires_at") != 0)
    return bad(err, "expires_at missing");
  if (BSON_ITER_HOLDS_NULL(&it)) {
    out->state = RESV_STATE_CONFIRMED;
    if (!bson_iter_next(&it) || strcmp(bson_iter_key(&it), "version") != 0 ||
        !read_int64(&it, &out->version) || out->version < 0)
      return bad(err, "a confirmed reservation without an int64 version");
  } else {
    out->state = RESV_STATE_PENDING;
    if (!read_int64(&it, &out->expires_at))
      return bad(err, "expires_at is neither int64 nor null");
    if (!bson_iter_next(&it) || strcmp(bson_iter_key(&it), "holds") != 0)
      return bad(err, "a pending reservation without holds");
    if (!read_holds(&it, out, err))
      return false;
  }
  if (bson_iter_next(&it))
    return bad(err, "an unknown field after the reservation's fields");
  return true;
}

bool resv__doc_decode(const bson_t *doc, resv__doc_t *out,
                        resv_error_t *err) {
  memset(out, 0, sizeof *out);
  if (decode(doc, out, err))
    return true;
  resv__doc_free(out);
  return false;
}

void resv__doc_free(resv__doc_t *doc) {
  free(doc->holds);
  doc->holds = NULL;
  doc->nholds = 0;
}

bool resv__doc_owned_by(const resv__doc_t *doc,
                              const resv_owner_t *owner) {
  return resv__str_eq(doc->owner.tenant, owner->tenant) &&
         resv__str_eq(doc->owner.id, owner->id);
}

bool resv__doc_answer(const resv__doc_t *doc, int32_t status,
                            bool with_holds, resv_answer_t *answer,
                            resv_error_t *err) {
  bool pending = doc->state == RESV_STATE_PENDING;
  bool holds = pending && with_holds;
  return resv__answer_set(answer, status, doc->state,
                          pending ? doc->expires_at : 0,
                          pending ? 0 : doc->version, &doc->owner.tenant,
                          &doc->owner.id, holds ? doc->holds : NULL,
                          holds ? doc->nholds : 0, err);
}

/* The same rule, for the server: an aggregation expression that is true
 * exactly for the documents decode accepts (but for the bytes of their
 * strings, which the server does not look into: UTF-8 validity and NUL
 * bytes stay the decoder's). Every write's filter carries it as $expr
 * (mongo_build.c), so a document that is not a format-1 reservation never
 * matches a write: the owner's own reserve, confirm, abandon and release
 * leave it as it is, and answer RESV_EFORMAT once they read it.
 *
 * The filter's plain equalities already fix _id (an embedded document
 * compares field by field, names, order and types), tenant_id and key
 * (but an array holding the value matches them too). The expression adds:
 *   1. the top-level fields, by name, order and $type, are one of the four
 *      shapes decode takes: expires_at an int64 or int32 and then holds an
 *      array, or expires_at null and then version an int64 or int32;
 *   2. owner is {tenant_id: <string>, id: <string>} in this order, id not
 *      empty;
 *   3. the holds are non-empty strings without duplicates: filtering the
 *      valid ones and dropping duplicates ($setUnion of one array) leaves
 *      as many as there are;
 *   4. a version is not negative.
 * Each part is safe on any document (no $objectToArray of a non-document,
 * no $size of a non-array), so the server never fails evaluating it,
 * whatever the order in which it evaluates $and's arguments. All of it
 * is documented MongoDB 5.0+ aggregation ($expr, $objectToArray, $map,
 * $type, $filter, $setUnion, $size, $literal). */
static const char conforms_json[] =
    "{\"$and\": ["
    " {\"$in\": ["
    "  {\"$map\": {\"input\": {\"$objectToArray\": \"$$ROOT\"},"
    "            \"in\": [\"$$this.k\", {\"$type\": \"$$this.v\"}]}},"
    "  {\"$literal\": ["
#define HEAD "[\"_id\", \"object\"], [\"tenant_id\", \"string\"], " \
             "[\"key\", \"string\"], [\"owner\", \"object\"], "
    "   [" HEAD "[\"expires_at\", \"long\"], [\"holds\", \"array\"]],"
    "   [" HEAD "[\"expires_at\", \"int\"], [\"holds\", \"array\"]],"
    "   [" HEAD "[\"expires_at\", \"null\"], [\"version\", \"long\"]],"
    "   [" HEAD "[\"expires_at\", \"null\"], [\"version\", \"int\"]]]}]},"
#undef HEAD
    " {\"$eq\": ["
    "  {\"$map\": {\"input\": {\"$objectToArray\": {\"$cond\": ["
    "      {\"$eq\": [{\"$type\": \"$owner\"}, \"object\"]}, \"$owner\", {}]}},"
    "            \"in\": [\"$$this.k\", {\"$type\": \"$$this.v\"}]}},"
    "  {\"$literal\": [[\"tenant_id\", \"string\"], [\"id\", \"string\"]]}]},"
    " {\"$ne\": [\"$owner.id\", \"\"]},"
#define HOLDS "{\"$cond\": [{\"$isArray\": \"$holds\"}, \"$holds\", []]}"
    " {\"$eq\": ["
    "  {\"$size\": {\"$setUnion\": [{\"$filter\": {\"input\": " HOLDS ","
    "     \"cond\": {\"$and\": [{\"$eq\": [{\"$type\": \"$$this\"}, \"string\"]},"
    "                         {\"$ne\": [\"$$this\", \"\"]}]}}}]}},"
    "  {\"$size\": " HOLDS "}]},"
#undef HOLDS
    " {\"$gte\": [{\"$ifNull\": [\"$version\", 0]}, 0]}"
    "]}";

bson_t *resv__doc_conforms_new(void) {
  bson_error_t error;
  bson_t *expr = bson_new_from_json((const uint8_t *)conforms_json, -1, &error);
  /* A constant: it parses, or this build is broken. */
  BSON_ASSERT(expr);
  return expr;
}
