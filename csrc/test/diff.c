/* diff.c: the differential test's driver, shared by test_mongo_diff.c and
 * test_file_diff.c.
 *
 * The memory store is the reference model (docs/design.md section 6). Each seed
 * drives a random sequence of calls (a few keys in two tenants, owners
 * that share an id across tenants, attempts, versions, ttls at the edges,
 * sweeps, and clock jumps onto and around expiry instants, now and then
 * back) through a memory store and another store side by side, with the
 * same clock: every answer must be the same (status, state, owner,
 * expires_at, version, and holds as a set). A divergence names the seed
 * and the step; RESV_TEST_SEED=<seed> RESV_TEST_STEPS=<n> replays one
 * sequence. Both stores reclaim what expired TEST_DIFF_GRACE ago, each at
 * its own pace (MongoDB on a sweep): past the grace, expired and absent
 * mean the same (docs/design.md section 5), so such a reservation is released from
 * both before a call on its key (test_forget_reclaimable). One call in ten
 * is a reserve_all, confirm_all or abandon_all of two or three distinct
 * keys, compared key by key. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests.h"

const uint64_t test_diff_seeds[TEST_DIFF_SEEDS] = {1, 2, 3, 20240611};

#define STEPS 2500
#define SLOW_STEPS 300

int test_diff_steps(void) {
  const char *steps_env = getenv("RESV_TEST_STEPS");
  if (steps_env) return atoi(steps_env);
  return getenv("RESV_TEST_SLOW") ? SLOW_STEPS : STEPS;
}

static uint64_t next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static size_t pick(uint64_t *s, size_t n) { return (size_t)(next(s) % n); }

static const char *const key_tenants[] = {"", "t1"};
static const char *key_names[] = {"ann", "$cat"};
static const char *const namespaces[] = {"email", "slug"};
static const char *const owner_tenants[] = {"", "t1", ""};
static const char *const owner_ids[] = {"u0", "u0", "u1"};
static const char *const attempts[] = {"a0", "a1", "a2", "$a3"};
static const int64_t ttls[] = {1, 2, 10, 100, 1000};
static const int64_t jumps[] = {0, 1, 2, 9, 10, 11, 99, 100, 101, 999, 1000, 1001};

static const char *op_name(int32_t op) {
  switch (op) {
  case RESV_OP_RESERVE: return "reserve";
  case RESV_OP_CONFIRM: return "confirm";
  case RESV_OP_ABANDON: return "abandon";
  case RESV_OP_RELEASE: return "release";
  case RESV_OP_GET: return "get";
  case RESV_OP_SWEEP: return "sweep";
  case RESV_OP_RESERVE_ALL: return "reserve_all";
  case RESV_OP_CONFIRM_ALL: return "confirm_all";
  case RESV_OP_ABANDON_ALL: return "abandon_all";
  default: return "?";
  }
}

static void random_request(uint64_t *s, resv_request_t *r, const char *long_key) {
  /* Reserve and abandon often, confirm rarely: a confirmed key only
   * leaves by release, and a run stuck in confirmed keys tests little. */
  static const int32_t ops[] = {
      RESV_OP_RESERVE, RESV_OP_RESERVE, RESV_OP_RESERVE, RESV_OP_RESERVE,
      RESV_OP_RESERVE, RESV_OP_RESERVE, RESV_OP_RESERVE, RESV_OP_RESERVE,
      RESV_OP_CONFIRM, RESV_OP_ABANDON, RESV_OP_ABANDON, RESV_OP_ABANDON,
      RESV_OP_ABANDON, RESV_OP_ABANDON, RESV_OP_RELEASE, RESV_OP_RELEASE,
      RESV_OP_RELEASE, RESV_OP_GET, RESV_OP_GET, RESV_OP_SWEEP};
  size_t owner = pick(s, 3);
  memset(r, 0, sizeof *r);
  r->op = ops[pick(s, sizeof ops / sizeof ops[0])];
  r->key.tenant = resv_cstr(key_tenants[pick(s, 2)]);
  r->key.ns = resv_cstr(namespaces[pick(s, 8) == 0 ? 1 : 0]);
  r->key.key = resv_cstr(key_names[pick(s, 2)]);
  /* The same draws with or without a long key: one key turns long. */
  if (long_key && r->key.tenant.len && r->key.key.ptr == key_names[1])
    r->key.key = resv_cstr(long_key);
  r->owner.tenant = resv_cstr(owner_tenants[owner]);
  r->owner.id = resv_cstr(owner_ids[owner]);
  r->attempt = resv_cstr(attempts[pick(s, 4)]);
  r->ttl_ms = ttls[pick(s, sizeof ttls / sizeof ttls[0])];
  r->version = (int64_t)pick(s, 6);
}

/* Turns r into a call of several keys, one time in ten: r's key and one
 * or two others, all distinct, into keys[]. */
static void maybe_several(uint64_t *s, resv_request_t *r, resv_key_t *keys) {
  static const int32_t ops[] = {RESV_OP_RESERVE_ALL, RESV_OP_RESERVE_ALL,
                                RESV_OP_CONFIRM_ALL, RESV_OP_ABANDON_ALL};
  if (r->op == RESV_OP_GET || r->op == RESV_OP_SWEEP || pick(s, 10) != 0) return;
  r->op = ops[pick(s, sizeof ops / sizeof ops[0])];
  size_t n = 2 + pick(s, 2);
  keys[0] = r->key;
  for (size_t i = 1; i < n; i++) {
    resv_key_t k;
    bool fresh;
    do {
      k.tenant = resv_cstr(key_tenants[pick(s, 2)]);
      k.ns = resv_cstr(namespaces[pick(s, 2)]);
      k.key = resv_cstr(key_names[pick(s, 2)]);
      fresh = true;
      for (size_t j = 0; j < i; j++)
        fresh = fresh && !resv__key_eq(&keys[j], &k);
    } while (!fresh);
    keys[i] = k;
  }
  r->keys = keys;
  r->nkeys = n;
}

static bool same_str(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static bool holds_subset(const resv_answer_t *a, const resv_answer_t *b) {
  for (size_t i = 0; i < a->nholds; i++) {
    bool found = false;
    for (size_t j = 0; j < b->nholds && !found; j++)
      found = same_str(a->holds[i], b->holds[j]);
    if (!found)
      return false;
  }
  return true;
}

static bool same_answer(const resv_answer_t *a, const resv_answer_t *b) {
  if (a->nkeys != b->nkeys) return false;
  for (size_t i = 0; i < a->nkeys; i++)
    if (!same_answer(&a->keys[i], &b->keys[i])) return false;
  return a->status == b->status && a->state == b->state &&
         a->expires_at == b->expires_at && a->version == b->version &&
         same_str(a->owner_tenant, b->owner_tenant) &&
         same_str(a->owner_id, b->owner_id) && a->nholds == b->nholds &&
         holds_subset(a, b) && holds_subset(b, a);
}

static void describe(char *buf, size_t size, bool ok, const resv_answer_t *a,
                     const resv_error_t *err) {
  int n;
  if (!ok) {
    snprintf(buf, size, "error %s: %s", resv_code_name(err->code), err->message);
    return;
  }
  n = snprintf(buf, size, "%s state=%s owner=%.*s/%.*s expires_at=%" PRId64
               " version=%" PRId64 " holds=[",
               resv_status_name(a->status), resv_state_name(a->state),
               (int)a->owner_tenant.len, a->owner_tenant.ptr ? a->owner_tenant.ptr : "",
               (int)a->owner_id.len, a->owner_id.ptr ? a->owner_id.ptr : "",
               a->expires_at, a->version);
  for (size_t i = 0; i < a->nholds && n > 0 && (size_t)n < size; i++)
    n += snprintf(buf + n, size - (size_t)n, "%s%.*s", i ? "," : "",
                  (int)a->holds[i].len, a->holds[i].ptr);
  if (n > 0 && (size_t)n < size)
    n += snprintf(buf + n, size - (size_t)n, "]");
  for (size_t i = 0; i < a->nkeys && n > 0 && (size_t)n < size; i++) {
    n += snprintf(buf + n, size - (size_t)n, "\n    key %zu: ", i + 1);
    if (n > 0 && (size_t)n < size) describe(buf + n, size - (size_t)n, true, &a->keys[i], NULL);
    n = (int)strlen(buf);
  }
}

void test_diff_run(resv_store_t *memory, resv_store_t *other, const char *other_name,
                   uint64_t seed, int steps, int32_t max_holds, const char *long_key) {
  int full = 0; /* new attempts refused by max_holds */
  resv_type_t *tm = test_fresh_type(memory, "diff");
  resv_type_t *tf = test_fresh_type(other, "diff");
  resv_answer_t am = {0}, af = {0};
  uint64_t s = seed, s2 = seed ^ 0x5eed5eed5eed5eedULL; /* s2: the several-key calls */
  int64_t now = 1700000000000LL;
  int64_t last_expiry = 0, max_now = now;
  int counts[6] = {0}, several = 0;

  for (int step = 0; step < steps; step++) {
    resv_request_t r;
    resv_key_t keys[3];
    resv_error_t em = {0}, ef = {0};
    size_t roll = pick(&s, 100);

    if (roll < 25)
      now += jumps[pick(&s, sizeof jumps / sizeof jumps[0])];
    else if (roll < 27)
      now -= jumps[pick(&s, sizeof jumps / sizeof jumps[0])];
    else if (roll < 40 && last_expiry)
      now = last_expiry + (int64_t)pick(&s, 3) - 1; /* onto an expiry edge */
    resv_store_set_time(memory, now);
    resv_store_set_time(other, now);
    random_request(&s, &r, long_key);
    maybe_several(&s2, &r, keys);
    if (now > max_now) max_now = now;
    for (size_t i = 0; r.op != RESV_OP_SWEEP && i < (r.nkeys ? r.nkeys : 1); i++) {
      const resv_key_t *k = r.nkeys ? &r.keys[i] : &r.key;
      test_forget_reclaimable(tm, k, max_now - TEST_DIFF_GRACE);
      test_forget_reclaimable(tf, k, max_now - TEST_DIFF_GRACE);
    }

    bool okm = resv_call(tm, &r, &am, &em);
    bool okf = resv_call(tf, &r, &af, &ef);
    bool same = okm == okf && (okm ? same_answer(&am, &af) : em.code == ef.code);
    if (!same) {
      char dm[2800], df[2800];
      describe(dm, sizeof dm, okm, &am, &em);
      describe(df, sizeof df, okf, &af, &ef);
      ck_abort_msg("divergence at seed %" PRIu64 " step %d (now %" PRId64
                   "): %s key %s/%s/%.20s owner %s/%s attempt %s ttl %" PRId64
                   " version %" PRId64 ":\n  memory: %s\n  %s: %s\n"
                   "replay: RESV_TEST_SEED=%" PRIu64 " RESV_TEST_STEPS=%d",
                   seed, step, now, op_name(r.op), r.key.tenant.ptr, r.key.ns.ptr,
                   r.key.key.ptr, r.owner.tenant.ptr, r.owner.id.ptr,
                   r.attempt.ptr, r.ttl_ms, r.version, dm, other_name, df, seed, step + 1);
    }
    if (!okm && strstr(em.message, "(max_holds)"))
      full++;
    if (okm && am.status >= 0 && am.status < 6)
      counts[am.status]++;
    if (okm && am.nkeys) several++;
    if (okm && am.state == RESV_STATE_PENDING)
      last_expiry = am.expires_at;
  }
  ck_assert_msg(steps < 1000 || (counts[RESV_RESERVED] > 0 &&
                                counts[RESV_CONFIRMED] > 0 &&
                                counts[RESV_CONFLICT] > 0 && counts[RESV_KEPT] > 0 &&
                                counts[RESV_ABANDONED] > 0),
                "seed %" PRIu64 ": a dull sequence (reserved %d confirmed %d "
                "conflict %d kept %d abandoned %d)",
                seed, counts[RESV_RESERVED], counts[RESV_CONFIRMED],
                counts[RESV_CONFLICT], counts[RESV_KEPT], counts[RESV_ABANDONED]);
  ck_assert_msg(steps < 1000 || several > steps / 40,
                "seed %" PRIu64 ": %d calls of several keys answered", seed, several);
  ck_assert_msg(steps < 1000 || !max_holds || full > 0,
                "seed %" PRIu64 ": max_holds %d was never reached", seed, (int)max_holds);
  resv_answer_clear(&am);
  resv_answer_clear(&af);
}
