/* file_integrity_test.h: what test_file_integrity.c and test_file_walk.c
 * share: each test's fresh directory, a closed store of KEYS reservations
 * to damage, and the forked child that opens it and answers every key,
 * whose exit status and error text the parent asserts on (LMDB maps
 * data.mdb: a crash in the child fails the test instead of ending the
 * runner); and what resv recover must make of a damaged store. */
#ifndef RESV_FILE_INTEGRITY_TEST_H
#define RESV_FILE_INTEGRITY_TEST_H

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests.h"

#define HOUR (3600 * 1000)
#define KEYS 2000

static char dir[256];

static inline resv_type_t *type_of(resv_store_t *s) {
  resv_error_t err;
  resv_type_t *t = resv_store_type(s, "test", 4, "seat", 4, &err);
  ck_assert_msg(t != NULL, "type: %s", err.message);
  return t;
}

static inline bool call(resv_type_t *t, int32_t op, const char *key, const char *owner,
                        resv_answer_t *a, resv_error_t *err) {
  resv_request_t r = {.op = op, .key = test_key("email", key),
                      .owner = test_owner("", owner), .attempt = resv_cstr("a"),
                      .ttl_ms = HOUR, .version = 1};
  return resv_call(t, &r, a, err);
}

/* A closed store of KEYS reservations, k0@x to k1999@x, held by o1. */
static inline void make_store(void) {
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_type_t *t = type_of(s);
  char key[32];
  for (int i = 0; i < KEYS; i++) {
    snprintf(key, sizeof key, "k%d@x", i);
    resv_answer_t a = {0};
    test_reserve(t, key, "o1", "a", HOUR, &a);
    resv_answer_clear(&a);
  }
  resv_store_close(s);
}

/* What a child ran into: its exit status and the last error it wrote. */
typedef struct outcome {
  int status;
  char message[sizeof ((resv_error_t *)0)->message];
} outcome_t;

/* In a child: reports err's text and exits with 100 + its code. */
static inline void child_exit_with(const resv_error_t *err) {
  test_child_end(100 + err->code, "%s", err->message);
}

static inline outcome_t in_child(void (*fn)(void *), void *arg) {
  outcome_t o;
  o.status = test_child_run(fn, arg, o.message, sizeof o.message);
  return o;
}

/* The child ended by exiting with 100 + code, its error saying words. */
static inline void expect_error(outcome_t o, int32_t code, const char *words) {
  ck_assert_msg(!WIFSIGNALED(o.status), "the child was killed by signal %d (%s)",
                WTERMSIG(o.status), strsignal(WTERMSIG(o.status)));
  ck_assert_msg(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 100 + code,
                "the child exited %d (wanted %d, %s): %s", WEXITSTATUS(o.status),
                100 + code, resv_code_name(code), o.message);
  ck_assert_msg(strstr(o.message, words), "'%s' does not say '%s'", o.message, words);
}

/* The child answered every key and reserved a new one (open_and_get_all). */
static inline void expect_answered(outcome_t o) {
  ck_assert_msg(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 1,
                "the child ended with status %#x: %s", o.status, o.message);
}

/* In the child: opens the store, gets every key, then reserves a new one
 * (a write takes pages from the list of free pages); the first error ends
 * it with 100 + its code, else it exits 1 when the new key was reserved. */
static inline void open_and_get_all(void *arg) {
  resv_error_t err;
  resv_options_t o = {.path = dir, .map_size = 64 << 20};
  resv_store_t *s = resv_store_open(&o, &err);
  if (!s) child_exit_with(&err);
  resv_type_t *t = resv_store_type(s, "test", 4, "seat", 4, &err);
  if (!t) child_exit_with(&err);
  char key[32];
  resv_answer_t a = {0};
  for (int i = 0; i < KEYS; i++) {
    snprintf(key, sizeof key, "k%d@x", i);
    if (!call(t, RESV_OP_GET, key, "o1", &a, &err)) child_exit_with(&err);
    resv_answer_clear(&a);
  }
  if (!call(t, RESV_OP_RESERVE, "new@x", "o2", &a, &err)) child_exit_with(&err);
  test_child_exit(a.status == RESV_RESERVED ? 1 : 2);
}

/* resv recover moves the damaged store in dir aside, keeping its
 * data.mdb; the next open starts empty. Leaves dir empty, as setup made
 * it. */
static inline void recovered_then_empty(void) {
  char kept[600], path[700];
  resv_error_t err;
  ck_assert_msg(resv_store_recover(dir, kept, sizeof kept, &err) == 1, "%s", err.message);
  snprintf(path, sizeof path, "%s/data.mdb", kept);
  ck_assert_int_eq(access(path, F_OK), 0);
  resv_store_t *s = test_open_file(dir, RESV_SYNC_PROCESS);
  resv_answer_t a = {0};
  test_get(type_of(s), "k1@x", &a);
  ck_assert_int_eq(a.status, RESV_ABSENT);
  resv_answer_clear(&a);
  resv_store_close(s);
  test_remove_dir(kept);
  test_remove_dir(dir);
  ck_assert_int_eq(mkdir(dir, 0700), 0);
}

#endif
