/* test_mongo_store.c: the MongoDB store against a server.
 *
 * Runs against RESV_TEST_URI (scripts/with-mongo: MONGODB_URI or a fresh
 * emulator) and fails, never skips, when it is unset. The layout test
 * reads the documents back with pymongo (layout_check.py), an independent
 * client, and compares them with docs/design.md section 3 as canonical extended
 * JSON, field order and number types included. Setting-up tests
 * look at the collection with a plain mongoc client, not through the
 * store. The suite's call tests are in test_mongo_calls.c, its sharded
 * tests in test_mongo_sharded.c. */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mongo_internal.h"
#include "emu.h"
#include "tests.h"
#include "mongo_store_test.h"

extern char **environ;

/* ---- helpers ---------------------------------------------------------- */

/* Runs argv, its stdout into out (NUL-terminated); returns its status. */
static int run_capture(char *const argv[], char *out, size_t size) {
  posix_spawn_file_actions_t fa;
  int fds[2], status = -1;
  size_t used = 0;
  pid_t pid;

  ck_assert(pipe(fds) == 0);
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  ck_assert(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  for (;;) {
    ssize_t n = read(fds[0], out + used, size - 1 - used);
    if (n <= 0)
      break;
    used += (size_t)n;
  }
  out[used] = '\0';
  close(fds[0]);
  waitpid(pid, &status, 0);
  return status;
}

/* The layout of coll as layout_check.py prints it. */
static void layout_of(const char *uri, const char *coll, char *out,
                      size_t size) {
  char python[] = "/usr/bin/python3", script[] = "csrc/test/layout_check.py";
  char *argv[] = {python, script, (char *)uri, (char *)coll, NULL};
  int status = run_capture(argv, out, size);
  ck_assert_msg(status == 0, "layout_check.py failed (%d): %s", status, out);
}

/* ---- tests ------------------------------------------------------------ */

START_TEST(test_layout_is_spec_section_3_field_by_field) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "layout");
  resv_answer_t a = {0};
  resv_error_t err;
  char got[4096];
  resv_key_t k = {resv_cstr("t1"), resv_cstr("email"), resv_cstr("ann@example.com")};
  resv_owner_t o = test_owner("t2", "u-1");
  static const char format_line[] =
      "{\"_id\": \"format\", \"format\": {\"$numberInt\": \"1\"}}\n";
  static const char head[] =
      "{\"_id\": {\"t\": \"t1\", \"n\": \"email\", \"k\": \"ann@example.com\"}, "
      "\"tenant_id\": \"t1\", \"key\": \"ann@example.com\", "
      "\"owner\": {\"tenant_id\": \"t2\", \"id\": \"u-1\"}, ";
  char want[4096];

  resv_store_set_time(s, 1000);
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a1"), 100, &a, &err));
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a2"), 50, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": {\"$numberLong\": \"1100\"}, "
           "\"holds\": [\"a1\", \"a2\"]}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  ck_assert(resv_confirm(t, &k, &o, 7, &a, &err));
  ck_assert_int_eq(a.status, RESV_CONFIRMED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": null, \"version\": {\"$numberLong\": \"7\"}}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  /* A confirm of a free key creates it confirmed, in the same layout; a
   * takeover of an expired reservation rewrites it in the same layout. */
  ck_assert(resv_release(t, &k, &o, &a, &err));
  ck_assert(resv_confirm(t, &k, &o, 3, &a, &err));
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s%s\"expires_at\": null, \"version\": {\"$numberLong\": \"3\"}}\n",
           format_line, head);
  ck_assert_str_eq(got, want);

  resv_owner_t other = test_owner("", "u-2");
  ck_assert(resv_release(t, &k, &o, &a, &err));
  ck_assert(resv_reserve(t, &k, &o, resv_cstr("a1"), 100, &a, &err));
  resv_store_set_time(s, 1100);
  ck_assert(resv_reserve(t, &k, &other, resv_cstr("$b"), 10, &a, &err));
  ck_assert_int_eq(a.status, RESV_RESERVED);
  layout_of(uri, resv_type_collection(t), got, sizeof got);
  snprintf(want, sizeof want,
           "%s{\"_id\": {\"t\": \"t1\", \"n\": \"email\", \"k\": \"ann@example.com\"}, "
           "\"tenant_id\": \"t1\", \"key\": \"ann@example.com\", "
           "\"owner\": {\"tenant_id\": \"\", \"id\": \"u-2\"}, "
           "\"expires_at\": {\"$numberLong\": \"1110\"}, \"holds\": [\"$b\"]}\n",
           format_line);
  ck_assert_str_eq(got, want);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

START_TEST(test_nothing_is_created_before_a_types_first_call) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "lazy");
  resv_answer_t a = {0};
  emu_raw_t r;

  emu_raw_open(&r, uri, resv_type_collection(t));
  ck_assert(!raw_collection_exists(&r, resv_type_collection(t)));
  test_get(t, "nobody", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  ck_assert(raw_collection_exists(&r, resv_type_collection(t)));
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\", \"format\": 1}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{}"), 1);
  emu_raw_close(&r);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

/* The w the backend opened on uri (with the write_concern option) sends
 * with every command: MONGOC_WRITE_CONCERN_W_MAJORITY, a number, or
 * INT32_MIN when the open failed (err says why). */
static int32_t opened_w(const char *uri, int32_t option, resv_error_t *err) {
  resv_options_t o = {.uri = uri, .threads = 1, .timeout_ms = 5000,
                      .write_concern = option};
  const resv__backend_ops_t *ops;
  char database[RESV__MAX_NAMESPACE] = "";
  resv__mongo_t *m =
      resv__mongo_open(&o, NULL, database, sizeof database, &ops, err);
  int32_t w;

  if (!m)
    return INT32_MIN;
  w = mongoc_write_concern_get_w(mongoc_uri_get_write_concern(m->uri));
  ops->destroy(m);
  return w;
}

/* uri with one more option ("w=2"), into out. */
static void uri_with(const char *uri, const char *option, char *out, size_t size) {
  snprintf(out, size, "%s%s%s", uri, strchr(uri, '?') ? "&" : (strchr(uri + 10, '/') ? "?" : "/?"),
           option);
}

START_TEST(test_writes_are_majority_unless_write_concern_says_otherwise) {
  const char *uri = test_mongo_uri();
  char with_w[512];
  resv_error_t err;

  ck_assert_int_eq(opened_w(uri, 0, &err), MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(uri, RESV_WRITE_MAJORITY, &err),
                   MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(uri, 1, &err), 1);
  ck_assert_int_eq(opened_w(uri, 3, &err), 3);
  /* A w the URI names is kept, unless the option says otherwise. */
  uri_with(uri, "w=2", with_w, sizeof with_w);
  ck_assert_int_eq(opened_w(with_w, 0, &err), 2);
  ck_assert_int_eq(opened_w(with_w, RESV_WRITE_MAJORITY, &err),
                   MONGOC_WRITE_CONCERN_W_MAJORITY);
  ck_assert_int_eq(opened_w(with_w, 1, &err), 1);
  /* Unacknowledged writes cannot tell reserved from conflict. */
  ck_assert_int_eq(opened_w(uri, -2, &err), INT32_MIN);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "write_concern"), "%s", err.message);
  uri_with(uri, "w=0", with_w, sizeof with_w);
  ck_assert_int_eq(opened_w(with_w, 0, &err), INT32_MIN);
  ck_assert_int_eq(err.code, RESV_EINVALID);
  ck_assert_msg(strstr(err.message, "w=0"), "%s", err.message);
  ck_assert_int_eq(opened_w(with_w, RESV_WRITE_MAJORITY, &err), INT32_MIN);

  /* And the store works with each accepted one. */
  for (int32_t w = RESV_WRITE_MAJORITY; w <= 1; w++) {
    resv_options_t o = {.threads = 1, .write_concern = w};
    resv_store_t *s;
    resv_answer_t a = {0};
    if (w == 0)
      continue;
    s = emu_open(uri, o);
    resv_type_t *t = test_fresh_type(s, "wc");
    test_reserve(t, "k", "u", "a", 60000, &a);
    ck_assert_int_eq(a.status, RESV_RESERVED);
    resv_answer_clear(&a);
    resv_store_close(s);
  }
}
END_TEST

/* Whether the backend opened on uri asks for a direct connection: 1 yes,
 * 0 directConnection=false, -1 unset. */
static int opened_direct(const char *uri) {
  resv_options_t o = {.uri = uri, .threads = 1, .timeout_ms = 5000};
  const resv__backend_ops_t *ops;
  char database[RESV__MAX_NAMESPACE] = "";
  resv_error_t err;
  resv__mongo_t *m = resv__mongo_open(&o, NULL, database, sizeof database, &ops, &err);
  int direct;

  ck_assert_msg(m, "open %s: %s", uri, err.message);
  direct = !mongoc_uri_has_option(m->uri, MONGOC_URI_DIRECTCONNECTION)
               ? -1
               : mongoc_uri_get_option_as_bool(m->uri, MONGOC_URI_DIRECTCONNECTION,
                                               false);
  ops->destroy(m);
  return direct;
}

START_TEST(test_a_single_host_uri_discovers_the_set) {
  const char *uri = test_mongo_uri();
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(parsed);
  bool one_host = hosts && !hosts->next && !mongoc_uri_get_srv_hostname(parsed);
  bool names_it = mongoc_uri_get_replica_set(parsed) ||
                  mongoc_uri_has_option(parsed, MONGOC_URI_DIRECTCONNECTION) ||
                  mongoc_uri_get_srv_hostname(parsed);
  char with[512];

  mongoc_uri_destroy(parsed);
  /* scripts/with-mongo's emulator: one host, nothing said. */
  ck_assert_msg(!names_it || getenv("MONGODB_URI"), "%s", uri);
  if (!names_it)
    ck_assert_int_eq(opened_direct(uri), 0);
  /* A URI that asks for a direct connection keeps it. */
  if (one_host) {
    uri_with(uri, "directConnection=true", with, sizeof with);
    ck_assert_int_eq(opened_direct(with), 1);
  }
}
END_TEST

/* The find commands a backend's pool sends, as canonical extended JSON. */
typedef struct seen_finds {
  pthread_mutex_t mutex;
  int n;
  char json[4][2048];
} seen_finds_t;

static void on_command_started(const mongoc_apm_command_started_t *event) {
  seen_finds_t *seen = mongoc_apm_command_started_get_context(event);
  if (strcmp(mongoc_apm_command_started_get_command_name(event), "find") != 0)
    return;
  char *json = bson_as_canonical_extended_json(
      mongoc_apm_command_started_get_command(event), NULL);
  pthread_mutex_lock(&seen->mutex);
  if (seen->n < 4)
    snprintf(seen->json[seen->n], sizeof seen->json[0], "%s", json);
  seen->n++;
  pthread_mutex_unlock(&seen->mutex);
  bson_free(json);
}

/* docs/design.md section 12: the read after a duplicate key uses read concern local
 * from the primary whatever the URI says, and on a mongos names the whole
 * shard key. The backend is opened on a URI asking readConcernLevel=
 * majority and its find commands are watched with command monitoring. */
START_TEST(test_the_read_after_a_duplicate_key_is_local_and_names_the_shard_key) {
  const char *uri = test_mongo_uri();
  char majority[512], database[RESV__MAX_NAMESPACE] = "";
  seen_finds_t seen = {.mutex = PTHREAD_MUTEX_INITIALIZER};
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "dupread");
  resv_answer_t a = {0};
  resv_error_t err;
  const resv__backend_ops_t *ops;

  test_reserve(t, "k", "ann", "a", 600000, &a); /* ann holds k */
  uri_with(uri, "readConcernLevel=majority", majority, sizeof majority);
  resv_options_t o = {.uri = majority, .threads = 1, .timeout_ms = 5000};
  resv__mongo_t *m = resv__mongo_open(&o, NULL, database, sizeof database, &ops, &err);
  ck_assert_msg(m, "%s", err.message);
  /* A pool of the test's own, with the backend's URI: the backend's pool
   * has the store's callbacks (mongo_skew.c), and a pool takes one set. */
  mongoc_client_pool_t *pool = mongoc_client_pool_new(m->uri);
  mongoc_client_pool_set_error_api(pool, MONGOC_ERROR_API_VERSION_2);
  mongoc_apm_callbacks_t *callbacks = mongoc_apm_callbacks_new();
  mongoc_apm_set_command_started_cb(callbacks, on_command_started);
  ck_assert(mongoc_client_pool_set_apm_callbacks(pool, callbacks, &seen));
  mongoc_client_t *client = mongoc_client_pool_pop(pool);
  mongoc_collection_t *coll =
      mongoc_client_get_collection(client, m->database, resv_type_collection(t));

  /* bob's reserve meets ann's document on the _id index: the conflict
   * path reads it. */
  resv_request_t bob = {.op = RESV_OP_RESERVE, .key = test_key("email", "k"),
                        .owner = test_owner("", "bob"), .attempt = resv_cstr("b"),
                        .ttl_ms = 60000};
  ck_assert_msg(resv__mongo_run(m, coll, &bob, resv_store_now(s),
                                resv__monotonic_ms() + 5000, &a, NULL, &err),
                "%s", err.message);
  ck_assert_int_eq(a.status, RESV_CONFLICT);
  ck_assert_int_eq(seen.n, 1);
  ck_assert_msg(strstr(seen.json[0], "\"readConcern\" : { \"level\" : \"local\" }"),
                "%s", seen.json[0]);
  const char *filter =
      m->is_mongos ? "\"filter\" : { \"_id\" : { \"t\" : \"\", \"n\" : \"email\", "
                     "\"k\" : \"k\" }, \"tenant_id\" : \"\", \"key\" : \"k\" }"
                   : "\"filter\" : { \"_id\" : { \"t\" : \"\", \"n\" : \"email\", "
                     "\"k\" : \"k\" } }";
  ck_assert_msg(strstr(seen.json[0], filter), "%s", seen.json[0]);

  /* A get keeps the URI's read concern: the URI's option did arrive. */
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "k")};
  ck_assert(resv__mongo_run(m, coll, &get, resv_store_now(s),
                            resv__monotonic_ms() + 5000, &a, NULL, &err));
  ck_assert_int_eq(seen.n, 2);
  ck_assert_msg(strstr(seen.json[1], "\"readConcern\" : { \"level\" : \"majority\" }"),
                "%s", seen.json[1]);

  resv_answer_clear(&a);
  mongoc_collection_destroy(coll);
  mongoc_client_pool_push(pool, client);
  mongoc_client_pool_destroy(pool);
  ops->destroy(m);
  mongoc_apm_callbacks_destroy(callbacks);
  resv_store_close(s);
}
END_TEST

/* docs/design.md section 12: a collection dropped while the store runs is set up
 * again, format record included, on the next call that finds it gone (a
 * get, or an abandon or release that matched nothing, reads the format
 * record with the key in the same find). On a mongos the format record
 * lives where the key does not route, so there the drop goes unseen: not
 * asserted. */
START_TEST(test_a_collection_dropped_under_a_running_store_is_set_up_again) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  resv_type_t *t = test_fresh_type(s, "dropped");
  resv_answer_t a = {0};
  bson_error_t error;
  emu_raw_t r;

  if (resv_store_is_sharded(s)) {
    resv_store_close(s);
    return;
  }
  test_reserve(t, "k1", "u", "a", 60000, &a);
  emu_raw_open(&r, uri, resv_type_collection(t));
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  ck_assert_msg(mongoc_collection_drop(r.coll, &error), "%s", error.message);

  test_get(t, "k1", &a); /* finds it gone */
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_reserve(t, "k2", "u", "a", 60000, &a); /* sets it up again */
  ck_assert_int_eq(a.status, RESV_RESERVED);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\", \"format\": 1}"), 1);

  /* A drop seen by an abandon that matched nothing. */
  ck_assert(mongoc_collection_drop(r.coll, &error));
  test_abandon(t, "k2", "u", "a", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  test_get(t, "k3", &a);
  ck_assert_int_eq(emu_raw_count(&r, "{\"_id\": \"format\"}"), 1);
  resv_answer_clear(&a);
  emu_raw_close(&r);
  resv_store_close(s);
}
END_TEST

/* The database: the option, else the URI's, else "resv". */
static void expect_database(const char *uri, const char *option, const char *want) {
  resv_options_t o = {.uri = uri, .database = option, .threads = 1};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  char text[512], tail[80];
  ck_assert_msg(s != NULL, "%s", err.message);
  resv_store_describe(s, text, sizeof text);
  snprintf(tail, sizeof tail, "/%s (", want);
  ck_assert_msg(strstr(text, tail), "\"%s\" lacks database %s", text, want);
  resv_store_close(s);
}

START_TEST(test_database_is_the_option_else_the_uris_else_resv) {
  const char *uri = test_mongo_uri();
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  const char *db = mongoc_uri_get_database(parsed);
  expect_database(uri, "fromoption", "fromoption");
  expect_database(uri, NULL, db && *db ? db : "resv");
  const mongoc_host_list_t *hosts = mongoc_uri_get_hosts(parsed);
  if (!mongoc_uri_get_username(parsed) && !mongoc_uri_get_replica_set(parsed) &&
      hosts && !hosts->next) {
    /* The same single server, named with a database in the path. */
    char with_db[300];
    snprintf(with_db, sizeof with_db, "mongodb://%s/fromuri?appname=x",
             hosts->host_and_port);
    expect_database(with_db, NULL, "fromuri");
  }
  mongoc_uri_destroy(parsed);
}
END_TEST

START_TEST(test_describe_names_the_host_and_topology) {
  const char *uri = test_mongo_uri();
  resv_store_t *s = test_open(uri);
  mongoc_uri_t *parsed = mongoc_uri_new(uri);
  char text[512];

  resv_store_describe(s, text, sizeof text);
  ck_assert_msg(strncmp(text, "mongodb ", 8) == 0, "%s", text);
  if (mongoc_uri_get_hosts(parsed))
    ck_assert_msg(strstr(text, mongoc_uri_get_hosts(parsed)->host_and_port),
                  "%s", text);
  if (mongoc_uri_get_password(parsed))
    ck_assert_msg(!strstr(text, mongoc_uri_get_password(parsed)), "%s", text);
  ck_assert(strstr(text, resv_store_is_sharded(s) ? "(mongos)" : "(mongod)"));
  mongoc_uri_destroy(parsed);
  resv_store_close(s);
}
END_TEST

/* A wrong password: whatever the server says (auth failure, or no auth at
 * all), the password is in no error message and not in describe. */
START_TEST(test_password_never_shows) {
  const char *uri = test_mongo_uri();
  const char *hosts = strstr(uri, "://"), *at;
  char with_password[512], text[512];
  resv_options_t o = {.threads = 1, .timeout_ms = 2000};
  resv_error_t err;

  hosts += 3;
  at = strchr(hosts, '@');
  if (at && (!strchr(hosts, '/') || at < strchr(hosts, '/')))
    hosts = at + 1;
  snprintf(with_password, sizeof with_password,
           "mongodb://resvtest:s3cr3t%%2Fpw@%s", hosts);
  o.uri = with_password;
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) {
    ck_assert_msg(!strstr(err.message, "s3cr3t"), "%s", err.message);
    return;
  }
  resv_store_describe(s, text, sizeof text);
  ck_assert_msg(!strstr(text, "s3cr3t"), "%s", text);
  resv_type_t *t = test_fresh_type(s, "secret");
  resv_request_t get = {.op = RESV_OP_GET, .key = test_key("email", "a")};
  resv_answer_t a = {0};
  if (!resv_call(t, &get, &a, &err))
    ck_assert_msg(!strstr(err.message, "s3cr3t"), "%s", err.message);
  resv_answer_clear(&a);
  resv_store_close(s);
}
END_TEST

Suite *mongo_store_suite(void) {
  Suite *s = suite_create("mongo_store");
  const TTest *store_tests[] = {
      test_layout_is_spec_section_3_field_by_field,
      test_nothing_is_created_before_a_types_first_call,
      test_describe_names_the_host_and_topology,
      test_writes_are_majority_unless_write_concern_says_otherwise,
      test_a_single_host_uri_discovers_the_set,
      test_the_read_after_a_duplicate_key_is_local_and_names_the_shard_key,
      test_a_collection_dropped_under_a_running_store_is_set_up_again,
      test_database_is_the_option_else_the_uris_else_resv, test_password_never_shows, NULL};
  TCase *store = test_tcase(s, "store", 60, NULL, NULL, store_tests);
  mongo_store_add_call_tests(store);
  mongo_store_add_conforms_tests(store);
  const TTest *none[] = {NULL};
  mongo_store_add_sharded_tests(test_tcase(s, "sharded", 60, NULL, NULL, none));
  return s;
}
