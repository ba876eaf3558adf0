/* mongo_all_test.h: what the suites of the *_all ops share: one call of
 * several keys of namespace "email" by name. */
#ifndef RESV_MONGO_ALL_TEST_H
#define RESV_MONGO_ALL_TEST_H

#include "tests.h"

#define ALL_T0 1700000000000LL
#define ALL_MAX 32

/* op on keys[0 .. n-1] for owner ("", owner) with attempt (reserve_all,
 * abandon_all) and ttl (reserve_all) or version (confirm_all) in arg. */
static inline bool all_call(resv_type_t *t, int32_t op, const char *const *keys, size_t n,
                            const char *owner, const char *attempt, int64_t arg,
                            resv_answer_t *a, resv_error_t *err) {
  resv_key_t ks[ALL_MAX];
  ck_assert_uint_le(n, ALL_MAX);
  for (size_t i = 0; i < n; i++) ks[i] = test_key("email", keys[i]);
  resv_request_t r = {.op = op, .keys = ks, .nkeys = n, .owner = test_owner("", owner),
                      .attempt = resv_cstr(attempt ? attempt : "")};
  if (op == RESV_OP_RESERVE_ALL) r.ttl_ms = arg;
  if (op == RESV_OP_CONFIRM_ALL) r.version = arg;
  return resv_call(t, &r, a, err);
}

static inline void all_call_ok(resv_type_t *t, int32_t op, const char *const *keys,
                               size_t n, const char *owner, const char *attempt,
                               int64_t arg, resv_answer_t *a) {
  resv_error_t err;
  ck_assert_msg(all_call(t, op, keys, n, owner, attempt, arg, a, &err), "%s: %s",
                resv_code_name(err.code), err.message);
  ck_assert_uint_eq(a->nkeys, n);
}

#endif
