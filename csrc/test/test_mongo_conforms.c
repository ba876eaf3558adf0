/* test_mongo_conforms.c: the server's half of the layout check against
 * the client's. Every write's filter carries the conformance predicate
 * ($expr, resv__doc_conforms_new in csrc/doc/doc_decode.c), meant to be
 * true exactly for the documents resv__doc_decode accepts (docs/mongodb.md,
 * "One round trip per call"). Here 2,000 documents near the layout
 * (sound reservations, most with one or two fields dropped, added, given
 * another value or swapped) are stored at keys of their own, and for each the
 * server is asked whether a write's filter at that key matches it (_id,
 * tenant_id, key and the predicate, as the store sends them): the answer
 * must be the decoder's. On the emulator this checks the emulator's
 * operators as much as the predicate; with MONGODB_URI set, MongoDB's. */
#include "mongo_store_test.h"

/* A document as (name, value) pairs in order, each value extended JSON. */
#define MAX_FIELDS 12
typedef struct fields {
  const char *name[MAX_FIELDS];
  const char *value[MAX_FIELDS];
  size_t n;
} fields_t;

static const char *const names[] = {"tenant_id", "key", "owner", "expires_at",
                                    "holds", "version", "note"};

/* Values a field may take, the right types and the near misses, by the
 * field they are near: numbers (expires_at, version), holds, owners. A
 * changed value is one of its field's own kind two times in three. */
static const char *const numbers[] = {
    "null", "{\"$numberInt\": \"1\"}", "{\"$numberInt\": \"-1\"}", "{\"$numberLong\": \"5\"}",
    "{\"$numberLong\": \"-1\"}", "{\"$numberLong\": \"0\"}",
    "{\"$numberLong\": \"9000000000000\"}", "{\"$numberDouble\": \"1.5\"}", "\"5\"", "true"};
static const char *const holds[] = {
    "[]", "[\"a\"]", "[\"a\", \"b\"]", "[\"a\", \"a\"]", "[\"\", \"b\"]", "[\"\"]",
    "[\"a\", {\"$numberInt\": \"1\"}]", "[[\"a\"]]", "[null]", "\"a\"", "{\"0\": \"a\"}"};
static const char *const owners[] = {
    "{\"tenant_id\": \"t1\", \"id\": \"u\"}", "{\"tenant_id\": \"\", \"id\": \"u\"}",
    "{\"id\": \"u\", \"tenant_id\": \"t1\"}", "{\"tenant_id\": \"t1\", \"id\": \"\"}",
    "{\"tenant_id\": \"t1\", \"id\": \"u\", \"x\": 1}", "[{\"tenant_id\": \"t1\", \"id\": \"u\"}]",
    "{\"tenant_id\": 1, \"id\": \"u\"}", "{\"tenant_id\": \"t1\", \"id\": [\"u\"]}",
    "{\"tenant_id\": \"t1\"}", "{}", "\"u\""};
static const char *const others[] = {"\"\"", "\"u\"", "[\"\"]", "{\"t\": \"\", \"n\": \"email\", \"k\": \"k\"}"};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PICK(a, seed) ((a)[(size_t)rand_r(seed) % COUNT(a)])

/* A value for field name: of its kind, or of any. */
static const char *value_for(const char *name, unsigned *seed) {
  int kind = rand_r(seed) % 3 ? -1 : rand_r(seed) % 4;
  if (kind < 0)
    kind = strcmp(name, "owner") == 0 ? 2 : strcmp(name, "holds") == 0 ? 1
         : strcmp(name, "expires_at") == 0 || strcmp(name, "version") == 0 ? 0 : 3;
  return kind == 0 ? PICK(numbers, seed) : kind == 1 ? PICK(holds, seed)
       : kind == 2 ? PICK(owners, seed) : PICK(others, seed);
}

static void set(fields_t *f, const char *name, const char *value) {
  f->name[f->n] = name;
  f->value[f->n++] = value;
}

/* The JSON of key k<i>'s _id and key fields, which the fields point at. */
typedef struct key_json {
  char id[64], key[32];
} key_json_t;

/* A sound reservation at key k<i>: pending or confirmed (r's bits), its
 * numbers int64 or int32. */
static void base(fields_t *f, key_json_t *k, int i, unsigned r) {
  snprintf(k->id, sizeof k->id, "{\"t\": \"\", \"n\": \"email\", \"k\": \"k%d\"}", i);
  snprintf(k->key, sizeof k->key, "\"k%d\"", i);
  f->n = 0;
  set(f, "_id", k->id);
  set(f, "tenant_id", "\"\"");
  set(f, "key", k->key);
  set(f, "owner", "{\"tenant_id\": \"t1\", \"id\": \"u\"}");
  bool pending = r & 1, wide = r & 2;
  if (pending) {
    set(f, "expires_at", wide ? "{\"$numberLong\": \"9000000000000\"}"
                              : "{\"$numberInt\": \"2000000000\"}");
    set(f, "holds", (r & 4) ? "[\"a\", \"b\"]" : "[\"a\"]");
  } else {
    set(f, "expires_at", "null");
    set(f, "version", wide ? "{\"$numberLong\": \"3\"}" : "{\"$numberInt\": \"3\"}");
  }
}

static bool has(const fields_t *f, const char *name) {
  for (size_t i = 0; i < f->n; i++)
    if (strcmp(f->name[i], name) == 0) return true;
  return false;
}

/* One random change, never to _id (always first, as MongoDB keeps it). */
static void mutate(fields_t *f, unsigned *seed) {
  size_t i = 1 + (size_t)rand_r(seed) % (f->n > 1 ? f->n - 1 : 1);
  switch (rand_r(seed) % 4) {
  case 0: /* drop a field */
    if (f->n > 1) {
      memmove(&f->name[i], &f->name[i + 1], (f->n - i - 1) * sizeof f->name[0]);
      memmove(&f->value[i], &f->value[i + 1], (f->n - i - 1) * sizeof f->value[0]);
      f->n--;
    }
    break;
  case 1: { /* add a field it does not have, anywhere after _id */
    const char *name = PICK(names, seed);
    if (has(f, name) || f->n == MAX_FIELDS) break;
    size_t at = 1 + (size_t)rand_r(seed) % f->n;
    memmove(&f->name[at + 1], &f->name[at], (f->n - at) * sizeof f->name[0]);
    memmove(&f->value[at + 1], &f->value[at], (f->n - at) * sizeof f->value[0]);
    f->name[at] = name;
    f->value[at] = value_for(name, seed);
    f->n++;
    break;
  }
  case 2: /* another value */
    if (f->n > 1) f->value[i] = value_for(f->name[i], seed);
    break;
  default: { /* two fields swapped */
    size_t j = 1 + (size_t)rand_r(seed) % (f->n > 1 ? f->n - 1 : 1);
    const char *name = f->name[i], *value = f->value[i];
    f->name[i] = f->name[j], f->value[i] = f->value[j];
    f->name[j] = name, f->value[j] = value;
  }
  }
}

static void to_json(const fields_t *f, char *out, size_t size) {
  size_t len = (size_t)snprintf(out, size, "{");
  for (size_t i = 0; i < f->n && len < size; i++)
    len += (size_t)snprintf(out + len, size - len, "%s\"%s\": %s", i ? ", " : "", f->name[i],
                            f->value[i]);
  if (len < size) snprintf(out + len, size - len, "}");
}

/* Whether a write's filter at key k<i> (F(key) and the predicate) matches
 * the document stored there. */
static bool filter_matches(emu_raw_t *r, const bson_t *conforms, int i) {
  char key[32];
  snprintf(key, sizeof key, "k%d", i);
  bson_t filter, id;
  bson_init(&filter);
  bson_append_document_begin(&filter, "_id", -1, &id);
  BSON_APPEND_UTF8(&id, "t", "");
  BSON_APPEND_UTF8(&id, "n", "email");
  BSON_APPEND_UTF8(&id, "k", key);
  bson_append_document_end(&filter, &id);
  BSON_APPEND_UTF8(&filter, "tenant_id", "");
  BSON_APPEND_UTF8(&filter, "key", key);
  BSON_APPEND_DOCUMENT(&filter, "$expr", conforms);
  char *json = emu_raw_find_json(r, &filter);
  bson_destroy(&filter);
  bson_free(json);
  return json != NULL;
}

START_TEST(test_the_servers_layout_check_is_the_decoders) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "conforms");
  bson_t *conforms = resv__doc_conforms_new();
  emu_raw_t r;
  emu_raw_open(&r, uri, resv_type_collection(t));
  enum { DOCS = 2000 };
  unsigned seed = 20261203;
  int accepted = 0, refused = 0, wrong = 0;
  char failures[4096] = "";
  for (int i = 0; i < DOCS; i++) {
    char json[1024];
    key_json_t k;
    fields_t f;
    base(&f, &k, i, (unsigned)rand_r(&seed));
    int changes = i < 8 ? 0 : 1 + (rand_r(&seed) % 3 == 0); /* a few sound ones as they are */
    for (int c = 0; c < changes; c++) mutate(&f, &seed);
    to_json(&f, json, sizeof json);
    emu_raw_insert(&r, json);

    bson_error_t error;
    bson_t *doc = bson_new_from_json((const uint8_t *)json, -1, &error);
    ck_assert_msg(doc, "%s: %s", json, error.message);
    resv__doc_t d;
    resv_error_t err;
    bool decodes = resv__doc_decode(doc, &d, &err);
    if (decodes) resv__doc_free(&d);
    bson_destroy(doc);
    bool matches = filter_matches(&r, conforms, i);
    decodes ? accepted++ : refused++;
    if (matches != decodes && wrong++ < 4) {
      size_t len = strlen(failures);
      snprintf(failures + len, sizeof failures - len, "\n  %s: decoder %s, server %s", json,
               decodes ? "accepts" : "refuses", matches ? "matches" : "does not");
    }
  }
  ck_assert_msg(wrong == 0, "%d of %d documents judged otherwise by the server:%s", wrong,
                DOCS, failures);
  /* Both sides of the rule were tried, many times. */
  ck_assert_int_ge(accepted, DOCS / 10);
  ck_assert_int_ge(refused, DOCS / 2);
  emu_raw_close(&r);
  bson_destroy(conforms);
  resv_store_close(s);
}
END_TEST

void mongo_store_add_conforms_tests(TCase *tc) {
  const TTest *tests[] = {test_the_servers_layout_check_is_the_decoders, NULL};
  test_tcase_add(tc, tests);
}
