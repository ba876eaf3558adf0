/* mongo_options.c: a type's collection checked for options that change
 * what "the same key" means.
 *
 * The store may meet a collection it did not create: an administrator
 * made it, or another program did, with create options of their own.
 * Some of those would make the store answer differently from the
 * embedded stores, so set-up reads the collection's
 * entry in listCollections (filtered by its name; the readWrite role
 * allows it) and refuses with RESV_EFORMAT, naming the option, a
 * collection that is
 *   - not a plain collection (a view, or a time series, which keeps no
 *     unique _id index);
 *   - collated by default other than simple: the _id index and every
 *     filter would then match keys that differ in case or accents;
 *   - validated: the server could refuse the store's documents. A
 *     validator is accepted only when it provably accepts anything (an
 *     empty one, validationLevel "off", or validationAction "warn");
 *   - capped: the server removes its oldest documents by itself, live
 *     reservations among them.
 * Nothing is written to a refused collection. */
#include "mongo_internal.h"

#include <stdio.h>
#include <string.h>

/* The string at key in doc, or NULL. */
static const char *utf8_at(const bson_t *doc, const char *key) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, doc, key) && BSON_ITER_HOLDS_UTF8(&it))
    return bson_iter_utf8(&it, NULL);
  return NULL;
}

static bool refuse(resv_error_t *err, const char *collection, const char *what,
                   const char *why) {
  return resv__fail(err, RESV_EFORMAT,
                    "%s %s: %s; nothing was written", collection, what, why);
}

/* A default collation other than simple is refused, shown as {locale,
 * strength} (strength 3 when the server leaves it out). */
static bool check_collation(const bson_t *options, const char *collection,
                            resv_error_t *err) {
  bson_iter_t it, field;
  bson_t collation;
  const uint8_t *data;
  uint32_t len;
  const char *locale;
  int strength = 3;
  char what[160];

  if (!bson_iter_init_find(&it, options, "collation") ||
      !BSON_ITER_HOLDS_DOCUMENT(&it))
    return true;
  bson_iter_document(&it, &len, &data);
  if (!bson_init_static(&collation, data, len))
    return refuse(err, collection, "has a default collation",
                  "it cannot be read");
  locale = utf8_at(&collation, "locale");
  if (locale && strcmp(locale, "simple") == 0)
    return true;
  if (bson_iter_init_find(&field, &collation, "strength") &&
      BSON_ITER_HOLDS_NUMBER(&field))
    strength = (int)bson_iter_as_int64(&field);
  snprintf(what, sizeof what,
           "has a default collation {locale: \"%.60s\", strength: %d}",
           locale ? locale : "?", strength);
  return refuse(err, collection, what,
                "the same key would match other keys; the store uses only "
                "collections with the simple collation");
}

/* A validator is refused unless it cannot refuse anything. */
static bool check_validator(const bson_t *options, const char *collection,
                            resv_error_t *err) {
  bson_iter_t it;
  const char *level = utf8_at(options, "validationLevel");
  const char *action = utf8_at(options, "validationAction");
  uint32_t len = 0;
  const uint8_t *data;

  if (!bson_iter_init_find(&it, options, "validator"))
    return true;
  if (BSON_ITER_HOLDS_DOCUMENT(&it)) {
    bson_iter_document(&it, &len, &data);
    if (len <= 5) /* {} */
      return true;
  }
  if ((level && strcmp(level, "off") == 0) ||
      (action && strcmp(action, "warn") == 0))
    return true;
  return refuse(err, collection, "has a validator",
                "the server could refuse the store's documents; the store "
                "uses only collections without one (or with "
                "validationLevel \"off\")");
}

/* Checks one listCollections entry: its type, then its options. */
static bool check_entry(const bson_t *entry, const char *collection,
                        resv_error_t *err) {
  const char *type = utf8_at(entry, "type");
  bson_iter_t it;
  bson_t options;
  const uint8_t *data;
  uint32_t len;

  if (type && strcmp(type, "timeseries") == 0)
    return refuse(err, collection, "is a time-series collection",
                  "it keeps no unique _id; the store uses only plain "
                  "collections");
  if (type && strcmp(type, "collection") != 0) {
    char what[64];
    snprintf(what, sizeof what, "is a %.20s, not a collection", type);
    return refuse(err, collection, what,
                  "the store uses only plain collections");
  }
  if (!bson_iter_init_find(&it, entry, "options") ||
      !BSON_ITER_HOLDS_DOCUMENT(&it))
    return true;
  bson_iter_document(&it, &len, &data);
  if (!bson_init_static(&options, data, len))
    return true;
  if (bson_iter_init_find(&it, &options, "capped") && bson_iter_as_bool(&it))
    return refuse(err, collection, "is capped",
                  "the server removes its oldest documents by itself, live "
                  "reservations among them; the store uses only collections "
                  "that are not capped");
  if (bson_iter_init_find(&it, &options, "timeseries"))
    return refuse(err, collection, "is a time-series collection",
                  "it keeps no unique _id; the store uses only plain "
                  "collections");
  return check_collation(&options, collection, err) &&
         check_validator(&options, collection, err);
}

bool resv__mongo_check_options(const resv__mongo_t *m, mongoc_database_t *db,
                               const char *collection, int64_t deadline,
                               resv_error_t *err) {
  bson_t opts = BSON_INITIALIZER, filter;
  const bson_t *entry;
  bson_error_t error;
  bool ok = true;

  bson_append_document_begin(&opts, "filter", -1, &filter);
  BSON_APPEND_UTF8(&filter, "name", collection);
  bson_append_document_end(&opts, &filter);
  mongoc_cursor_t *cursor = mongoc_database_find_collections_with_opts(db, &opts);
  while (ok && mongoc_cursor_next(cursor, &entry))
    ok = check_entry(entry, collection, err);
  if (ok && mongoc_cursor_error(cursor, &error))
    ok = resv__mongo_fail(m, err, &error, deadline, "list collections");
  mongoc_cursor_destroy(cursor);
  bson_destroy(&opts);
  return ok;
}
