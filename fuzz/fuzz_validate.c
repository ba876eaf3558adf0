/* fuzz_validate.c: libFuzzer target for argument validation.
 *
 * The input is cut into a request: one byte of op, one of max_string (in
 * steps of 4 bytes), eight of ttl and eight of version, then six strings
 * (tenant, namespace, key, owner tenant, owner id, attempt), each a length
 * byte and that many bytes (what is left when the input runs short). The
 * core's answers are compared with a reference written here from the
 * rules alone (docs/design.md section 8, RFC 3629's table of well-formed UTF-8):
 *   - resv__utf8_valid on every string and on the whole input;
 *   - resv__validate_request: true exactly when the reference says so, and
 *     false always with RESV_EINVALID and a message;
 *   - resv__validate_type on the first two strings: true exactly when the
 *     collection-name rules hold, and then the name is the prefix, the
 *     context, "__" and the aggregate. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* RFC 3629 section 4's ABNF, byte ranges per lead byte; NUL refused too. */
static bool ref_utf8(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c == 0x00) return false;
    if (c <= 0x7F) { i++; continue; }
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else return false;
    if (n - i - 1 < need) return false;
    if (s[i + 1] < lo || s[i + 1] > hi) return false;
    for (size_t k = 2; k <= need; k++)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return false;
    i += need + 1;
  }
  return true;
}

static bool ref_string(const resv_str_t *s, bool required, size_t max) {
  if (required && s->len == 0) return false;
  if (s->len > max) return false;
  return ref_utf8((const unsigned char *)s->ptr, s->len);
}

#define MAX_TTL (10LL * 366 * 24 * 3600 * 1000)

static bool ref_request(const resv_request_t *r, size_t max) {
  if (r->op < RESV_OP_RESERVE || r->op > RESV_OP_SWEEP) return false;
  if (r->op == RESV_OP_SWEEP) return true; /* a whole type: no key */
  if (!ref_string(&r->key.tenant, false, max) || !ref_string(&r->key.ns, true, max) ||
      !ref_string(&r->key.key, true, max))
    return false;
  if (r->op == RESV_OP_GET) return true;
  if (!ref_string(&r->owner.tenant, false, max) || !ref_string(&r->owner.id, true, max))
    return false;
  switch (r->op) {
  case RESV_OP_RESERVE:
    return r->ttl_ms >= 1 && r->ttl_ms <= MAX_TTL && ref_string(&r->attempt, true, max);
  case RESV_OP_ABANDON:
    return ref_string(&r->attempt, true, max);
  case RESV_OP_CONFIRM:
    return r->version >= 0;
  default:
    return true;
  }
}

static bool ref_type_name(const char *s, size_t n) {
  resv_str_t str = {s, n};
  if (!ref_string(&str, true, 255)) return false;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '.' || s[i] == '$' || (s[i] == '_' && i + 1 < n && s[i + 1] == '_')) return false;
  return true;
}

static bool ref_type(const char *c, size_t cn, const char *a, size_t an, const char *db) {
  if (!ref_type_name(c, cn) || !ref_type_name(a, an)) return false;
  if (c[cn - 1] == '_' || a[0] == '_') return false;
  return strlen(db) + 1 + strlen("wow_reservation__") + cn + 2 + an <= 255;
}

static void check(bool cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_validate: %s\n", what);
    abort();
  }
}

typedef struct cursor {
  const uint8_t *p;
  size_t left;
} cursor_t;

static uint64_t take_u64(cursor_t *c) {
  uint64_t v = 0;
  for (int i = 0; i < 8 && c->left; i++, c->p++, c->left--) v = (v << 8) | *c->p;
  return v;
}

static resv_str_t take_str(cursor_t *c) {
  resv_str_t s = {"", 0};
  if (!c->left) return s;
  size_t n = *c->p++;
  c->left--;
  if (n > c->left) n = c->left;
  s.ptr = (const char *)c->p;
  s.len = n;
  c->p += n;
  c->left -= n;
  return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  check(resv__utf8_valid((const char *)data, size) == ref_utf8(data, size), "utf8 on the input");
  if (size < 2) return 0;
  cursor_t c = {data + 2, size - 2};
  resv_request_t r = {0};
  r.op = data[0] % 8; /* 0 is unknown; 7 (reserve_all) has no keys here */
  size_t max = 1 + (size_t)data[1] * 4;
  r.ttl_ms = (int64_t)take_u64(&c);
  r.version = (int64_t)take_u64(&c);
  if (data[0] & 0x80) r.ttl_ms %= 1000; /* reach the small ttls often */
  if (data[0] & 0x40) r.version %= 1000;
  r.key.tenant = take_str(&c);
  r.key.ns = take_str(&c);
  r.key.key = take_str(&c);
  r.owner.tenant = take_str(&c);
  r.owner.id = take_str(&c);
  r.attempt = take_str(&c);

  const resv_str_t *all[] = {&r.key.tenant, &r.key.ns, &r.key.key,
                             &r.owner.tenant, &r.owner.id, &r.attempt};
  for (size_t i = 0; i < 6; i++)
    check(resv__utf8_valid(all[i]->ptr, all[i]->len) ==
              ref_utf8((const unsigned char *)all[i]->ptr, all[i]->len),
          "utf8 on a field");

  resv_error_t err;
  memset(&err, 0, sizeof err);
  resv__limits_t limits = {max, 16};
  bool ok = resv__validate_request(&r, &limits, &err);
  check(ok == ref_request(&r, max), "validate_request disagrees with the reference");
  if (!ok) check(err.code == RESV_EINVALID && err.message[0], "a refusal without invalid");

  /* Type names: the namespace and key fields as context and aggregate. */
  char out[RESV__MAX_NAMESPACE + 1];
  const char *db = (data[1] & 1) ? "resv" : "a_database_with_a_rather_long_name_0123456789";
  if (r.key.ns.len && r.key.key.len) {
    ok = resv__validate_type(r.key.ns.ptr, r.key.ns.len, r.key.key.ptr, r.key.key.len, db, out,
                             sizeof out, &err);
    check(ok == ref_type(r.key.ns.ptr, r.key.ns.len, r.key.key.ptr, r.key.key.len, db),
          "validate_type disagrees with the reference");
    if (ok) {
      char want[600];
      int n = snprintf(want, sizeof want, "wow_reservation__%.*s__%.*s", (int)r.key.ns.len,
                       r.key.ns.ptr, (int)r.key.key.len, r.key.key.ptr);
      check(n > 0 && strcmp(out, want) == 0, "the collection name");
    } else {
      check(err.code == RESV_EINVALID, "a type refusal without invalid");
    }
  }
  return 0;
}
