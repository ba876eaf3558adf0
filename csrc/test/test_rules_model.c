/* test_rules_model.c: the embedded stores against the rules module alone.
 *
 * A model keeps a few keys' reservations in plain arrays and runs each
 * call through the rules (rules.c) itself: the view of its record, the
 * decision, the answer, the write applied to the array. The same random
 * sequence of calls (every single-key op but sweep, and reserve_all,
 * confirm_all and abandon_all over 1 to 3 of the keys, at a clock that
 * moves onto and past expiries) runs on the store: every answer must be
 * the model's, status, state, owner, expiry, version and holds, key by
 * key. So a store's own storage (the memory store's packed entries and
 * stripes, the file store's records) is checked against the decision it
 * applies. Nothing is reclaimed (the grace is longer than the run), so
 * expired and absent are told apart. RESV_TEST_SEED=<seed> replays one
 * sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rules.h"
#include "tests.h"

#define M_KEYS 5
#define M_OWNERS 3
#define M_ATTEMPTS 4
#define M_STEPS 3000

static const char *const key_names[M_KEYS] = {"ann@x", "ann", "bob@x", "bob", "cy"};
static const char *const owner_names[M_OWNERS] = {"A", "B", "C"};
static const char *const attempt_names[M_ATTEMPTS] = {"a1", "a2", "a3", "a4"};

/* A key's reservation in the model: indexes into the names above. */
typedef struct mrec {
  int32_t state; /* RESV_STATE_NONE: no record */
  int owner;
  int64_t expires_at, version;
  int holds[M_ATTEMPTS];
  size_t nholds;
} mrec_t;

typedef struct model {
  mrec_t rec[M_KEYS];
  resv_str_t hold_strs[M_KEYS][M_ATTEMPTS]; /* the views' holds */
  int32_t max_holds;
} model_t;

static uint64_t next_rand(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static resv__view_t view_of(model_t *m, int k) {
  const mrec_t *r = &m->rec[k];
  if (r->state == RESV_STATE_NONE) return (resv__view_t){.state = RESV_STATE_NONE};
  for (size_t i = 0; i < r->nholds; i++) m->hold_strs[k][i] = resv_cstr(attempt_names[r->holds[i]]);
  return (resv__view_t){.state = r->state, .owner = test_owner("", owner_names[r->owner]),
                        .expires_at = r->expires_at, .version = r->version,
                        .holds = m->hold_strs[k], .nholds = r->nholds};
}

static int attempt_index(resv_str_t s) {
  for (int i = 0; i < M_ATTEMPTS; i++)
    if (test_str_is(s, attempt_names[i])) return i;
  ck_abort_msg("a hold the model never made");
  return -1;
}

/* Key k's record after decision d of a call by owner with attempt. */
static void model_write(model_t *m, int k, const resv__view_t *v, const resv__decision_t *d,
                        int owner, const resv_str_t *attempt) {
  mrec_t *r = &m->rec[k];
  resv_str_t holds[M_ATTEMPTS + 1];
  if (d->write == RESV__WRITE_DELETE) r->state = RESV_STATE_NONE;
  if (d->write != RESV__WRITE_RECORD) return;
  size_t n = resv__rules_holds(v, d, attempt, holds);
  ck_assert_uint_le(n, M_ATTEMPTS);
  for (size_t i = 0; i < n; i++) r->holds[i] = attempt_index(holds[i]);
  r->nholds = n;
  r->owner = owner;
  r->state = d->state;
  r->expires_at = d->state == RESV_STATE_PENDING ? d->expires_at : 0;
  r->version = d->state == RESV_STATE_CONFIRMED ? d->version : 0;
}

/* The model's answer to r (keys at idx[0 .. r->nkeys) for the *_all ops,
 * else idx[0]); false with err as a store would fail. */
static bool model_call(model_t *m, const resv_request_t *r, const int *idx, int owner,
                       int64_t now, resv_answer_t *a, resv_error_t *err) {
  resv__view_t v[3];
  resv__decision_t d[3];
  int32_t status;
  if (!resv__op_is_all(r->op)) {
    v[0] = view_of(m, idx[0]);
    if (!resv__rules_decide(&v[0], r, now, m->max_holds, &d[0], err) ||
        !resv__rules_answer(&v[0], &d[0], r, a, err))
      return false;
    model_write(m, idx[0], &v[0], &d[0], owner, &r->attempt);
    return true;
  }
  for (size_t i = 0; i < r->nkeys; i++) v[i] = view_of(m, idx[i]);
  if (!resv__rules_decide_all(v, r, now, m->max_holds, d, &status, err) ||
      !resv__rules_answer_all(v, d, status, r, a, err))
    return false;
  for (size_t i = 0; i < r->nkeys; i++) model_write(m, idx[i], &v[i], &d[i], owner, &r->attempt);
  return true;
}

static bool same_strs(resv_str_t x, resv_str_t y) {
  return x.len == y.len && (x.len == 0 || memcmp(x.ptr, y.ptr, x.len) == 0);
}

/* The fields of one answer (not its keys); holds in any order. */
static bool same_answer(const resv_answer_t *x, const resv_answer_t *y) {
  if (x->status != y->status || x->state != y->state || x->expires_at != y->expires_at ||
      x->version != y->version || x->nholds != y->nholds ||
      !same_strs(x->owner_tenant, y->owner_tenant) || !same_strs(x->owner_id, y->owner_id))
    return false;
  for (size_t i = 0; i < x->nholds; i++) {
    bool found = false;
    for (size_t j = 0; j < y->nholds && !found; j++) found = same_strs(x->holds[i], y->holds[j]);
    if (!found) return false;
  }
  return true;
}

static void expect_same(const resv_answer_t *store, const resv_answer_t *model,
                        const char *where) {
  ck_assert_msg(same_answer(store, model), "%s: store %s (state %d, %lld, v%lld, %.*s, %zu holds), "
                "model %s (state %d, %lld, v%lld, %.*s, %zu holds)", where,
                resv_status_name(store->status), store->state, (long long)store->expires_at,
                (long long)store->version, (int)store->owner_id.len, store->owner_id.ptr,
                store->nholds, resv_status_name(model->status), model->state,
                (long long)model->expires_at, (long long)model->version,
                (int)model->owner_id.len, model->owner_id.ptr, model->nholds);
  ck_assert_msg(store->nkeys == model->nkeys, "%s: %zu keys answered, model %zu", where,
                store->nkeys, model->nkeys);
  for (size_t i = 0; i < model->nkeys; i++) {
    char at[160];
    snprintf(at, sizeof at, "%s, key %zu", where, i + 1);
    expect_same(&store->keys[i], &model->keys[i], at);
  }
}

/* A random call: its op, owner, attempt, ttl, version and keys. */
static resv_request_t random_call(uint64_t *rs, resv_key_t *keys, int *idx, int *owner) {
  /* Confirms are rare and releases common, so keys come free again and
   * most calls meet pending reservations; owner A makes half the calls,
   * so reservations gather several attempts. */
  static const int32_t ops[] = {
      RESV_OP_RESERVE,     RESV_OP_RESERVE,     RESV_OP_RESERVE,     RESV_OP_RESERVE,
      RESV_OP_ABANDON,     RESV_OP_ABANDON,     RESV_OP_RELEASE,     RESV_OP_RELEASE,
      RESV_OP_RELEASE,     RESV_OP_GET,         RESV_OP_GET,         RESV_OP_CONFIRM,
      RESV_OP_RESERVE_ALL, RESV_OP_RESERVE_ALL, RESV_OP_RESERVE_ALL, RESV_OP_RESERVE_ALL,
      RESV_OP_ABANDON_ALL, RESV_OP_ABANDON_ALL, RESV_OP_ABANDON_ALL, RESV_OP_CONFIRM_ALL};
  static const int64_t ttls[] = {100, 300, 1000};
  resv_request_t r = {.op = ops[next_rand(rs) % (sizeof ops / sizeof ops[0])]};
  *owner = next_rand(rs) % 2 ? 0 : (int)(next_rand(rs) % M_OWNERS);
  r.owner = test_owner("", owner_names[*owner]);
  r.attempt = resv_cstr(attempt_names[next_rand(rs) % M_ATTEMPTS]);
  r.ttl_ms = ttls[next_rand(rs) % 3];
  r.version = (int64_t)(next_rand(rs) % 4);
  size_t n = resv__op_is_all(r.op) ? 1 + next_rand(rs) % 3 : 1;
  int first = (int)(next_rand(rs) % M_KEYS), step = 1 + (int)(next_rand(rs) % (M_KEYS - 1));
  for (size_t i = 0; i < n; i++) { /* distinct: M_KEYS is prime */
    idx[i] = (first + (int)i * step) % M_KEYS;
    keys[i] = test_key("email", key_names[idx[i]]);
  }
  if (resv__op_is_all(r.op)) {
    r.keys = keys;
    r.nkeys = n;
  } else {
    r.key = keys[0];
  }
  return r;
}

static void run_sequence(resv_store_t *store, int32_t max_holds, uint64_t seed, int steps) {
  resv_type_t *t = test_fresh_type(store, "model");
  model_t m = {.max_holds = max_holds ? max_holds : RESV__DEFAULT_MAX_HOLDS};
  static const int64_t moves[] = {0, 0, 1, 50, 99, 100, 300, 1000};
  int64_t now = 1000000;
  uint64_t rs = seed;
  resv_answer_t sa = {0}, ma = {0};
  for (int step = 0; step < steps; step++) {
    now += moves[next_rand(&rs) % (sizeof moves / sizeof moves[0])];
    resv_store_set_time(store, now);
    resv_key_t keys[3];
    int idx[3], owner;
    resv_request_t r = random_call(&rs, keys, idx, &owner);
    resv_error_t serr = {0}, merr = {0};
    bool sok = resv_call(t, &r, &sa, &serr);
    bool mok = model_call(&m, &r, idx, owner, now, &ma, &merr);
    char where[96];
    snprintf(where, sizeof where, "seed %llu step %d op %d", (unsigned long long)seed, step,
             (int)r.op);
    ck_assert_msg(sok == mok, "%s: store %s (%s), model %s (%s)", where, sok ? "ok" : "failed",
                  serr.message, mok ? "ok" : "failed", merr.message);
    if (!sok) {
      ck_assert_msg(serr.code == merr.code, "%s: %s against %s", where, serr.message,
                    merr.message);
      continue;
    }
    expect_same(&sa, &ma, where);
  }
  resv_answer_clear(&sa);
  resv_answer_clear(&ma);
}

static uint64_t seed_of(int i) {
  const char *env = getenv("RESV_TEST_SEED");
  return env ? strtoull(env, NULL, 10) : UINT64_C(0x9e3779b97f4a7c15) * (uint64_t)(i + 1);
}

/* The odd runs with max_holds = 2, below the four attempts, so refused new
 * attempts are compared too. */
START_TEST(memory_store_answers_as_the_rules) {
  int32_t max_holds = _i % 2 ? 2 : 0;
  resv_options_t o = {.max_holds = max_holds, .sweep_grace_ms = INT64_C(1) << 40};
  resv_store_t *store = resv_store_open(&o, NULL);
  ck_assert_ptr_nonnull(store);
  run_sequence(store, max_holds, seed_of(_i), M_STEPS);
  resv_store_close(store);
}
END_TEST

START_TEST(file_store_answers_as_the_rules) {
  int32_t max_holds = _i % 2 ? 2 : 0;
  char dir[256];
  test_temp_dir(dir, sizeof dir);
  resv_options_t o = {.path = dir, .sync = RESV_SYNC_PROCESS, .max_holds = max_holds,
                      .sweep_grace_ms = INT64_C(1) << 40};
  resv_error_t err;
  resv_store_t *store = resv_store_open(&o, &err);
  ck_assert_msg(store != NULL, "open: %s", err.message);
  run_sequence(store, max_holds, seed_of(_i), M_STEPS / 3);
  resv_store_close(store);
  test_remove_dir(dir);
}
END_TEST

Suite *rules_model_suite(void) {
  const test_entry_t tests[] = {
      {memory_store_answers_as_the_rules, 0, 4},
      {file_store_answers_as_the_rules, 0, 2},
      {NULL, 0, 0}};
  return test_suite_loops("rules_model", "model", 300, NULL, NULL, tests);
}
