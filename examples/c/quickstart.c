/* quickstart.c: the C API in one page. Reserves an e-mail for one user,
 * shows a second user meeting it as a conflict, confirms it, and lets the
 * second user take another address and a user name in one call
 * (docs/c.md, "Several keys in one call").
 *
 *   make build/examples/quickstart && build/examples/quickstart   (memory)
 *   build/examples/quickstart mongodb://127.0.0.1/app            (MongoDB) */
#include <resv.h>
#include <stdio.h>

static int fail(const char *what, const resv_error_t *err) {
  fprintf(stderr, "%s: %s: %s\n", what, resv_code_name(err->code), err->message);
  return 1;
}

int main(int argc, char **argv) {
  resv_error_t err;
  resv_options_t opts = {.uri = argc > 1 ? argv[1] : NULL}; /* NULL: memory */
  resv_store_t *store = resv_store_open(&opts, &err);
  if (!store) return fail("open", &err);

  resv_type_t *users = resv_store_type(store, "shop", 4, "user", 4, &err);
  if (!users) return fail("type", &err);
  resv_key_t email = {resv_cstr(""), resv_cstr("email"), resv_cstr("ann@example.com")};
  resv_owner_t ann = {resv_cstr(""), resv_cstr("user-42")};
  resv_owner_t bob = {resv_cstr(""), resv_cstr("user-43")};
  resv_answer_t a = {0};
  int rc = 0;

  /* Ann's sign-up reserves her address for 30 s while it runs. */
  if (!resv_reserve(users, &email, &ann, resv_cstr("signup-1"), 30000, &a, &err))
    return fail("reserve", &err);
  printf("ann: %s until %lld\n", resv_status_name(a.status), (long long)a.expires_at);

  /* Bob's sign-up for the same address meets Ann's reservation. */
  if (!resv_reserve(users, &email, &bob, resv_cstr("signup-2"), 30000, &a, &err))
    return fail("reserve", &err);
  printf("bob: %s, held by %.*s (%s)\n", resv_status_name(a.status),
         (int)a.owner_id.len, a.owner_id.ptr, resv_state_name(a.state));
  if (a.status != RESV_CONFLICT) rc = 1;

  /* Ann's account is stored as version 1 of her aggregate: confirm. */
  if (!resv_confirm(users, &email, &ann, 1, &a, &err)) return fail("confirm", &err);
  printf("ann: %s at version %lld\n", resv_status_name(a.status), (long long)a.version);

  /* Bob's command failed: he abandons his attempt, which held nothing. */
  if (!resv_abandon(users, &email, &bob, resv_cstr("signup-2"), &a, &err))
    return fail("abandon", &err);
  printf("bob: %s\n", resv_status_name(a.status));

  /* Bob signs up with his own address and a user name: both or neither. */
  resv_key_t keys[2] = {{resv_cstr(""), resv_cstr("email"), resv_cstr("bob@example.com")},
                        {resv_cstr(""), resv_cstr("username"), resv_cstr("bob")}};
  resv_request_t all = {.op = RESV_OP_RESERVE_ALL, .keys = keys, .nkeys = 2, .owner = bob,
                        .attempt = resv_cstr("signup-3"), .ttl_ms = 30000};
  if (!resv_call(users, &all, &a, &err)) return fail("reserve_all", &err);
  printf("bob@example.com and bob: %s\n", resv_status_name(a.status));
  if (a.status != RESV_RESERVED) rc = 1;

  /* His account is stored as version 1: both keys are confirmed. */
  all.op = RESV_OP_CONFIRM_ALL;
  all.version = 1;
  if (!resv_call(users, &all, &a, &err)) return fail("confirm_all", &err);
  printf("bob@example.com and bob: %s\n", resv_status_name(a.status));
  if (a.status != RESV_CONFIRMED) rc = 1;

  if (!resv_get(users, &email, &a, &err)) return fail("get", &err);
  printf("ann@example.com: %s by %.*s\n", resv_status_name(a.status),
         (int)a.owner_id.len, a.owner_id.ptr);
  if (a.status != RESV_CONFIRMED) rc = 1;

  resv_answer_clear(&a);
  resv_store_close(store);
  return rc;
}
