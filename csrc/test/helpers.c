/* helpers.c: the shared test helpers declared in tests.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include <dirent.h>
#include <stdarg.h>
#include <sys/wait.h>

#include "tests.h"

const char *test_mongo_uri(void) {
  const char *uri = getenv("RESV_TEST_URI");
  ck_assert_msg(uri && uri[0],
                "RESV_TEST_URI is unset: run through scripts/with-mongo");
  return uri;
}

resv_store_t *test_open(const char *uri) {
  /* check: the topology is known at once (resv_store_is_sharded). Under
   * valgrind (RESV_TEST_SLOW) a SCRAM handshake alone can take seconds. */
  resv_options_t o = {.uri = uri, .threads = 4,
                      .timeout_ms = getenv("RESV_TEST_SLOW") ? 30000 : 5000, .check = 1};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open %s: %s: %s", uri ? uri : "memory",
                resv_code_name(err.code), err.message);
  return s;
}

void test_temp_dir(char *out, size_t size) {
  const char *tmp = getenv("TMPDIR");
  snprintf(out, size, "%s/resv-test-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
  ck_assert_msg(mkdtemp(out) != NULL, "mkdtemp %s", out);
}

void test_remove_dir(const char *path) {
  DIR *dir = opendir(path);
  if (!dir) return;
  struct dirent *de;
  char file[4096];
  while ((de = readdir(dir))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(file, sizeof file, "%s/%s", path, de->d_name);
    unlink(file);
  }
  closedir(dir);
  rmdir(path);
}

resv_store_t *test_open_file(const char *path, int32_t sync) {
  resv_options_t o = {.path = path, .sync = sync, .threads = 4, .timeout_ms = 5000,
                      .map_size = 64 << 20};
  resv_error_t err;
  resv_store_t *s = resv_store_open(&o, &err);
  ck_assert_msg(s != NULL, "open %s: %s: %s", path, resv_code_name(err.code), err.message);
  return s;
}

resv_type_t *test_fresh_type(resv_store_t *store, const char *prefix) {
  static atomic_int counter;
  char aggregate[64];
  snprintf(aggregate, sizeof aggregate, "%s%dx%d", prefix, (int)getpid(),
           atomic_fetch_add(&counter, 1));
  resv_error_t err;
  resv_type_t *t = resv_store_type(store, "test", 4, aggregate, strlen(aggregate), &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  return t;
}

resv_key_t test_key(const char *ns, const char *key) {
  resv_key_t k = {resv_cstr(""), resv_cstr(ns), resv_cstr(key)};
  return k;
}

resv_owner_t test_owner(const char *tenant, const char *id) {
  resv_owner_t o = {resv_cstr(tenant), resv_cstr(id)};
  return o;
}

static void call(resv_type_t *t, resv_request_t *r, resv_answer_t *a) {
  resv_error_t err;
  ck_assert_msg(resv_call(t, r, a, &err), "op %d: %s: %s", (int)r->op,
                resv_code_name(err.code), err.message);
}

void test_reserve(resv_type_t *t, const char *key, const char *owner,
                  const char *attempt, int64_t ttl, resv_answer_t *a) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr(attempt),
                      .ttl_ms = ttl};
  call(t, &r, a);
}

void test_confirm(resv_type_t *t, const char *key, const char *owner,
                  int64_t version, resv_answer_t *a) {
  resv_request_t r = {.op = RESV_OP_CONFIRM, .key = test_key("email", key),
                      .owner = test_owner("", owner), .version = version};
  call(t, &r, a);
}

void test_abandon(resv_type_t *t, const char *key, const char *owner,
                  const char *attempt, resv_answer_t *a) {
  resv_request_t r = {.op = RESV_OP_ABANDON, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr(attempt)};
  call(t, &r, a);
}

void test_release(resv_type_t *t, const char *key, const char *owner,
                  resv_answer_t *a) {
  resv_request_t r = {.op = RESV_OP_RELEASE, .key = test_key("email", key),
                      .owner = test_owner("", owner)};
  call(t, &r, a);
}

void test_get(resv_type_t *t, const char *key, resv_answer_t *a) {
  resv_request_t r = {.op = RESV_OP_GET, .key = test_key("email", key)};
  call(t, &r, a);
}

bool test_str_is(resv_str_t s, const char *want) {
  return s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

bool test_holds_are(const resv_answer_t *a, size_t n, const char *const *attempts) {
  if (a->nholds != n) return false;
  for (size_t i = 0; i < n; i++) {
    bool found = false;
    for (size_t j = 0; j < a->nholds && !found; j++) found = test_str_is(a->holds[j], attempts[i]);
    if (!found) return false;
  }
  return true;
}

void test_forget_reclaimable(resv_type_t *t, const resv_key_t *k, int64_t limit) {
  resv_request_t r = {.op = RESV_OP_GET, .key = *k};
  resv_answer_t a = {0};
  resv_error_t err;
  ck_assert_msg(resv_call(t, &r, &a, &err), "get: %s", err.message);
  if (a.state == RESV_STATE_PENDING && a.expires_at <= limit) {
    resv_request_t rel = {.op = RESV_OP_RELEASE, .key = *k,
                          .owner = {a.owner_tenant, a.owner_id}};
    resv_answer_t b = {0};
    ck_assert_msg(resv_call(t, &rel, &b, &err), "release: %s", err.message);
    /* absent: the get's own reclaiming step took it (memory store). */
    ck_assert(b.status == RESV_RELEASED || b.status == RESV_ABSENT);
    resv_answer_clear(&b);
  }
  resv_answer_clear(&a);
}

static FILE *stderr_file;
static int stderr_saved = -1;

void test_stderr_begin(void) {
  fflush(stderr);
  stderr_file = tmpfile();
  ck_assert_ptr_nonnull(stderr_file);
  stderr_saved = dup(2);
  dup2(fileno(stderr_file), 2);
}

const char *test_stderr_end(void) {
  static char text[1 << 16];
  fflush(stderr);
  dup2(stderr_saved, 2);
  close(stderr_saved);
  rewind(stderr_file);
  size_t n = fread(text, 1, sizeof text - 1, stderr_file);
  text[n] = '\0';
  fclose(stderr_file);
  return text;
}

TCase *test_tcase(Suite *s, const char *name, double timeout, void (*setup)(void),
                  void (*teardown)(void), const TTest *const *tests) {
  TCase *tc = tcase_create(name);
  if (setup || teardown) tcase_add_checked_fixture(tc, setup, teardown);
  if (timeout > 0) tcase_set_timeout(tc, timeout);
  test_tcase_add(tc, tests);
  suite_add_tcase(s, tc);
  return tc;
}

Suite *test_suite(const char *name, const char *tcase, double timeout, void (*setup)(void),
                  void (*teardown)(void), const TTest *const *tests) {
  Suite *s = suite_create(name);
  test_tcase(s, tcase, timeout, setup, teardown, tests);
  return s;
}

Suite *test_suite_loops(const char *name, const char *tcase, double timeout,
                        void (*setup)(void), void (*teardown)(void),
                        const test_entry_t *tests) {
  static const TTest *const none[] = {NULL};
  Suite *s = suite_create(name);
  TCase *tc = test_tcase(s, tcase, timeout, setup, teardown, none);
  for (; tests->test; tests++) {
    if (tests->to)
      tcase_add_loop_test(tc, tests->test, tests->from, tests->to);
    else
      tcase_add_test(tc, tests->test);
  }
  return s;
}

void test_with_lmdb(const char *dir, const char *db, unsigned int flags, size_t mapsize,
                    void (*fn)(MDB_txn *, MDB_dbi, void *), void *arg) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  ck_assert_int_eq(mdb_env_create(&env), 0);
  mdb_env_set_maxdbs(env, 16);
  if (mapsize) mdb_env_set_mapsize(env, mapsize);
  ck_assert_int_eq(mdb_env_open(env, dir, 0, 0660), 0);
  ck_assert_int_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
  ck_assert_int_eq(mdb_dbi_open(txn, db, flags, &dbi), 0);
  fn(txn, dbi, arg);
  ck_assert_int_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

uint64_t test_lmdb_pages(const char *data_mdb) {
  long psize = sysconf(_SC_PAGESIZE);
  uint64_t txnid[2], last;
  int fd = open(data_mdb, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, &txnid[0], 8, 144), 8);
  ck_assert_int_eq(pread(fd, &txnid[1], 8, psize + 144), 8);
  ck_assert_int_eq(pread(fd, &last, 8, (txnid[1] > txnid[0] ? psize : 0) + 136), 8);
  close(fd);
  return last + 1;
}

void test_tcase_add(TCase *tc, const TTest *const *tests) {
  for (; *tests; tests++) tcase_add_test(tc, *tests);
}

/* ---- forked children ---------------------------------------------------- */

static int child_report_fd = -1;

void test_child_exit(int code) {
  char cmd[32];
  snprintf(cmd, sizeof cmd, "exit %d", code);
  execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
  _exit(code);
}

void test_child_end(int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (write(child_report_fd, msg, strlen(msg) + 1) < 0) test_child_exit(2);
  test_child_exit(code);
}

int test_child_run(void (*fn)(void *), void *arg, char *msg, size_t size) {
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ne(pid, -1);
  if (pid == 0) {
    close(fds[0]);
    child_report_fd = fds[1];
    fn(arg);
    test_child_exit(0);
  }
  close(fds[1]);
  ssize_t n;
  size_t got = 0;
  while (got + 1 < size && (n = read(fds[0], msg + got, size - 1 - got)) > 0) got += (size_t)n;
  msg[got] = '\0';
  close(fds[0]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  return status;
}
