/* validate.c: the checks every argument passes before anything is written.
 *
 * Validation runs on the caller's thread, before a job is queued, so bad
 * input answers at once with RESV_EINVALID and a message naming the
 * argument. Strings arrive as (pointer, length): an embedded NUL byte is
 * seen here rather than silently shortening the string, and the UTF-8 check
 * follows RFC 3629 (no overlong forms, no surrogates, nothing past
 * U+10FFFF), the same rule MongoDB applies to BSON strings. */
#include "base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The longest ttl accepted: ten years. Anything longer is a unit mistake
 * (seconds for milliseconds, a date for a duration), and it keeps
 * now + ttl far from int64 overflow and within a double's exact range. */
#define RESV__MAX_TTL_MS (10LL * 366 * 24 * 3600 * 1000)

/* True when the eight bytes at p are all from 0x01 to 0x7f. Without a
 * zero byte the subtraction borrows across no byte, so each byte's high
 * bit is set exactly when it is 0x00 (0x00 - 1 = 0xff) or >= 0x80. */
static bool ascii_word(const unsigned char *p) {
  uint64_t w;
  memcpy(&w, p, sizeof w);
  return ((w | (w - 0x0101010101010101ULL)) & 0x8080808080808080ULL) == 0;
}

/* The same for the four bytes at p. */
static bool ascii_half(const unsigned char *p) {
  uint32_t w;
  memcpy(&w, p, sizeof w);
  return ((w | (w - 0x01010101U)) & 0x80808080U) == 0;
}

/* True when all n bytes at p are from 0x01 to 0x7f: a word at a time (the
 * last word may overlap the one before), two overlapping halves from 4 to
 * 7 bytes, a byte at a time under 4. */
static inline bool all_ascii(const unsigned char *p, size_t n) {
  if (n < 4) {
    for (size_t i = 0; i < n; i++)
      if ((unsigned char)(p[i] - 1) >= 0x7f) return false; /* 0, or 0x80 up */
    return true;
  }
  if (n < 8) return ascii_half(p) && ascii_half(p + n - 4);
  for (size_t i = 0; i + 8 < n; i += 8)
    if (!ascii_word(p + i)) return false;
  return ascii_word(p + n - 8);
}

bool resv__utf8_valid(const char *str, size_t len) {
  const unsigned char *s = (const unsigned char *)str;
  /* Keys, owners and attempts are mostly ASCII: one pass settles them. */
  if (all_ascii(s, len)) return true;
  size_t i = 0;
  while (i < len) {
    /* Keys are mostly ASCII: skip eight such bytes at a time. */
    while (i + 8 <= len && ascii_word(s + i)) i += 8;
    if (i == len) break;
    unsigned c = s[i];
    if (c == 0) return false;
    if (c < 0x80) { i++; continue; }
    size_t n;
    unsigned min, cp;
    if ((c & 0xE0) == 0xC0) { n = 1; min = 0x80; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; min = 0x800; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; min = 0x10000; cp = c & 0x07; }
    else return false;
    if (len - i <= n) return false;
    for (size_t k = 1; k <= n; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

/* Orders strings by bytes, then by length. */
static int str_cmp(const void *a, const void *b) {
  const resv_str_t *x = a, *y = b;
  size_t n = x->len < y->len ? x->len : y->len;
  int c = n ? memcmp(x->ptr, y->ptr, n) : 0;
  if (c) return c;
  return (x->len > y->len) - (x->len < y->len);
}

/* Few strings are compared pair by pair; more in a sorted copy, where
 * equal ones lie side by side (n log n, never quadratic in what a
 * damaged or hostile record holds). */
#define DISTINCT_PAIRWISE 8

bool resv__strs_distinct(const resv_str_t *s, size_t n, bool *distinct, resv_error_t *err) {
  *distinct = true;
  if (n <= DISTINCT_PAIRWISE) {
    for (size_t i = 1; i < n; i++)
      for (size_t j = 0; j < i; j++)
        if (resv__str_eq(s[i], s[j])) return !(*distinct = false);
    return true;
  }
  resv_str_t *sorted = malloc(n * sizeof *sorted);
  if (!sorted) return resv__fail(err, RESV_ENOMEM, "out of memory");
  memcpy(sorted, s, n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, str_cmp);
  for (size_t i = 1; i < n && *distinct; i++) *distinct = !resv__str_eq(sorted[i - 1], sorted[i]);
  free(sorted);
  return true;
}

/* Why the string s fails its check, named in the message as
 * "<where>.<field>" (where NULL: "<field>"), or "<where>[<index>].<field>"
 * when index is not 0 (key index of a *_all op's list); true when it does
 * not fail after all (valid UTF-8 beyond ASCII). Out of line: only the
 * calls that did not pass the ASCII check come here. */
static __attribute__((noinline)) bool string_problem(const char *where, size_t index,
                                                     const char *field, const resv_str_t *s,
                                                     bool required, size_t max,
                                                     resv_error_t *err) {
  const char *problem;
  if (!s->ptr && s->len)
    problem = "NULL pointer";
  else if (required && s->len == 0)
    problem = "must not be empty";
  else if (s->len > max)
    problem = NULL;
  else if (resv__utf8_valid(s->ptr, s->len))
    return true;
  else
    problem = memchr(s->ptr, '\0', s->len) ? "contains a NUL byte" : "not valid UTF-8";
  char name[64];
  if (!where)
    snprintf(name, sizeof name, "%s", field);
  else if (index)
    snprintf(name, sizeof name, "%s[%zu].%s", where, index, field);
  else
    snprintf(name, sizeof name, "%s.%s", where, field);
  if (!problem)
    return resv__fail(err, RESV_EINVALID, "%s: longer than %zu bytes", name, max);
  return resv__fail(err, RESV_EINVALID, "%s: %s", name, problem);
}

/* Checks one string: its pointer, length and UTF-8. Most strings are
 * short and ASCII, and are settled here without a call; the rest go to
 * string_problem, which names what is wrong. */
static inline bool check_string(const char *where, size_t index, const char *field,
                                const resv_str_t *s, bool required, size_t max,
                                resv_error_t *err) {
  if ((s->ptr || !s->len) && (s->len || !required) && s->len <= max &&
      all_ascii((const unsigned char *)s->ptr, s->len))
    return true;
  return string_problem(where, index, field, s, required, max, err);
}

bool resv__op_is_all(int32_t op) {
  return op >= RESV_OP_RESERVE_ALL && op <= RESV_OP_ABANDON_ALL;
}

int32_t resv__op_single(int32_t op) {
  switch (op) {
  case RESV_OP_RESERVE_ALL: return RESV_OP_RESERVE;
  case RESV_OP_CONFIRM_ALL: return RESV_OP_CONFIRM;
  case RESV_OP_ABANDON_ALL: return RESV_OP_ABANDON;
  default: return op;
  }
}

/* Key i of a *_all op's keys (from 1), or the request's key (i 0). */
static bool check_key(size_t i, const resv_key_t *k, size_t max, resv_error_t *err) {
  const char *where = i ? "keys" : "key";
  return check_string(where, i, "tenant", &k->tenant, false, max, err) &&
         check_string(where, i, "namespace", &k->ns, true, max, err) &&
         check_string(where, i, "key", &k->key, true, max, err);
}

/* The keys of a *_all op: 1 to max_keys, each valid, no two the same. */
static bool check_keys(const resv_request_t *req, const resv__limits_t *lim,
                       resv_error_t *err) {
  if (!req->keys || req->nkeys == 0)
    return resv__fail(err, RESV_EINVALID, "keys: must list at least one key");
  if (req->nkeys > lim->max_keys)
    return resv__fail(err, RESV_EINVALID, "keys: at most %zu (max_keys), got %zu",
                      lim->max_keys, req->nkeys);
  for (size_t i = 0; i < req->nkeys; i++) {
    if (!check_key(i + 1, &req->keys[i], lim->max_string, err)) return false;
    for (size_t j = 0; j < i; j++)
      if (resv__key_eq(&req->keys[i], &req->keys[j]))
        return resv__fail(err, RESV_EINVALID, "keys[%zu]: the same key as keys[%zu]",
                          i + 1, j + 1);
  }
  return true;
}

bool resv__validate_request(const resv_request_t *req, const resv__limits_t *lim,
                            resv_error_t *err) {
  size_t max = lim->max_string;
  if (!req) return resv__fail(err, RESV_EINVALID, "request: NULL");
  if (req->op < RESV_OP_RESERVE || req->op > RESV_OP_ABANDON_ALL)
    return resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)req->op);
  if (req->timeout_ms < 0 || req->timeout_ms > RESV__MAX_TIMEOUT_MS)
    return resv__fail(err, RESV_EINVALID,
                      "timeout_ms: must be from 1 to %d (0: the store's), got %lld",
                      RESV__MAX_TIMEOUT_MS, (long long)req->timeout_ms);
  if (req->op == RESV_OP_SWEEP) return true; /* a whole type: no key */
  if (resv__op_is_all(req->op) ? !check_keys(req, lim, err)
                               : !check_key(0, &req->key, max, err))
    return false;
  if (req->op == RESV_OP_GET) return true;

  if (!check_string(NULL, 0, "owner.tenant", &req->owner.tenant, false, max, err) ||
      !check_string(NULL, 0, "owner.id", &req->owner.id, true, max, err))
    return false;
  switch (resv__op_single(req->op)) {
  case RESV_OP_RESERVE:
    if (req->ttl_ms <= 0 || req->ttl_ms > RESV__MAX_TTL_MS)
      return resv__fail(err, RESV_EINVALID,
                        "ttl: must be from 1 to %lld ms, got %lld",
                        (long long)RESV__MAX_TTL_MS, (long long)req->ttl_ms);
    return check_string(NULL, 0, "attempt", &req->attempt, true, max, err);
  case RESV_OP_ABANDON:
    return check_string(NULL, 0, "attempt", &req->attempt, true, max, err);
  case RESV_OP_CONFIRM:
    if (req->version < 0)
      return resv__fail(err, RESV_EINVALID, "version: must not be negative, got %lld",
                        (long long)req->version);
    return true;
  default:
    return true;
  }
}

static bool check_type_name(const char *what, const char *s, size_t len,
                            resv_error_t *err) {
  resv_str_t str = {s, len};
  if (!check_string(NULL, 0, what, &str, true, RESV__MAX_NAMESPACE, err)) return false;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '.' || s[i] == '$')
      return resv__fail(err, RESV_EINVALID, "%s: must not contain '%c'", what, s[i]);
    if (s[i] == '_' && i + 1 < len && s[i + 1] == '_')
      return resv__fail(err, RESV_EINVALID, "%s: must not contain \"__\"", what);
  }
  return true;
}

bool resv__validate_type(const char *context, size_t context_len,
                         const char *aggregate, size_t aggregate_len,
                         const char *database, char *out, size_t out_size,
                         resv_error_t *err) {
  if (!check_type_name("context", context, context_len, err) ||
      !check_type_name("aggregate", aggregate, aggregate_len, err))
    return false;
  /* "a_" + "__" + "b" and "a" + "__" + "_b" would both make "a___b": an
   * underscore next to the separator would make the name ambiguous. */
  if (context[context_len - 1] == '_')
    return resv__fail(err, RESV_EINVALID, "context: must not end with '_'");
  if (aggregate[0] == '_')
    return resv__fail(err, RESV_EINVALID, "aggregate: must not start with '_'");

  size_t coll_len = strlen(RESV__COLLECTION_PREFIX) + context_len + 2 + aggregate_len;
  size_t ns_len = strlen(database) + 1 + coll_len;
  if (ns_len > RESV__MAX_NAMESPACE || coll_len + 1 > out_size)
    return resv__fail(err, RESV_EINVALID,
                      "type: namespace \"%s.%s%.*s__%.*s\" is longer than %d bytes",
                      database, RESV__COLLECTION_PREFIX, (int)context_len, context,
                      (int)aggregate_len, aggregate, RESV__MAX_NAMESPACE);
  char *p = out;
  memcpy(p, RESV__COLLECTION_PREFIX, strlen(RESV__COLLECTION_PREFIX));
  p += strlen(RESV__COLLECTION_PREFIX);
  memcpy(p, context, context_len);
  p += context_len;
  memcpy(p, "__", 2);
  p += 2;
  memcpy(p, aggregate, aggregate_len);
  p[aggregate_len] = '\0';
  return true;
}
