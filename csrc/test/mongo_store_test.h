/* mongo_store_test.h: what the files of the mongo_store suite share
 * (test_mongo_store.c, test_mongo_calls.c, test_mongo_sharded.c): small
 * helpers on a raw client and on types, and the lists of tests the other
 * files add to the suite's test cases. */
#ifndef RESV_MONGO_STORE_TEST_H
#define RESV_MONGO_STORE_TEST_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "mongo_internal.h"
#include "emu.h"
#include "tests.h"

static inline const char *db_of(const mongoc_uri_t *uri) {
  const char *db = mongoc_uri_get_database(uri);
  return db && *db ? db : "resv";
}

static inline bool raw_collection_exists(emu_raw_t *r, const char *collection) {
  bson_error_t error;
  mongoc_database_t *db = mongoc_client_get_database(r->client, db_of(r->uri));
  bool exists = mongoc_database_has_collection(db, collection, &error);
  mongoc_database_destroy(db);
  return exists;
}

/* A type on a collection name chosen here, so several stores (standing in
 * for several processes) can share it. */
static inline resv_type_t *named_type(resv_store_t *s, const char *aggregate) {
  resv_error_t err;
  resv_type_t *t =
      resv_store_type(s, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  return t;
}

static inline void unique_name(char *buf, size_t size, const char *prefix) {
  static int counter;
  snprintf(buf, size, "%s%dn%d", prefix, (int)getpid(), counter++);
}

static inline bool call_fails(resv_type_t *t, const resv_request_t *r, int32_t code,
                              resv_error_t *err) {
  resv_answer_t a = {0};
  bool ok = resv_call(t, r, &a, err);
  resv_answer_clear(&a);
  return !ok && err->code == code;
}

/* The call tests (test_mongo_calls.c), added to the "store" test case. */
void mongo_store_add_call_tests(TCase *tc);
/* test_mongo_conforms.c */
void mongo_store_add_conforms_tests(TCase *tc);
/* The sharded tests (test_mongo_sharded.c): the "sharded" test case. */
void mongo_store_add_sharded_tests(TCase *tc);

#endif
