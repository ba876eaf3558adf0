/* fuzz_decode.c: libFuzzer target for reading a stored document.
 *
 * The input is a BSON document as the server might send it (its length
 * prefix and final NUL are set to fit, so the fuzzer spends its time on
 * the contents). resv__doc_decode must never crash or leak, and when it
 * accepts a document, what it hands out must be a format-1 reservation:
 * valid UTF-8 strings inside the document, non-empty namespace, key and
 * owner id, a pending one's holds non-empty strings without duplicates, a
 * confirmed one's version not negative. The answer made from it must copy
 * exactly those fields. Refusals must be RESV_EFORMAT. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doc.h"

static void check(bool cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_decode: %s\n", what);
    abort();
  }
}

static bool inside(resv_str_t s, const uint8_t *buf, size_t size) {
  return s.len == 0 || ((const uint8_t *)s.ptr >= buf &&
                        (const uint8_t *)s.ptr + s.len <= buf + size);
}

static bool same(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void check_str(resv_str_t s, bool required, const uint8_t *buf, size_t size) {
  check(inside(s, buf, size), "a string outside the document");
  check(!required || s.len > 0, "an empty required string");
  check(resv__utf8_valid(s.ptr, s.len), "a string that is not UTF-8");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5 || size > (1 << 20)) return 0;
  uint8_t *buf = malloc(size);
  memcpy(buf, data, size);
  uint32_t len = (uint32_t)size;
  memcpy(buf, &len, 4); /* little-endian hosts only, as libbson's tests */
  buf[size - 1] = 0;
  bson_t doc;
  if (!bson_init_static(&doc, buf, size)) {
    free(buf);
    return 0;
  }
  resv__doc_t d;
  resv_error_t err;
  memset(&err, 0, sizeof err);
  if (!resv__doc_decode(&doc, &d, &err)) {
    check(err.code == RESV_EFORMAT || err.code == RESV_ENOMEM, "a refusal without format");
    check(d.holds == NULL && d.nholds == 0, "holds left after a refusal");
    free(buf);
    return 0;
  }
  check_str(d.key.tenant, false, buf, size);
  check_str(d.key.ns, true, buf, size);
  check_str(d.key.key, true, buf, size);
  check_str(d.owner.tenant, false, buf, size);
  check_str(d.owner.id, true, buf, size);
  if (d.state == RESV_STATE_PENDING) {
    for (size_t i = 0; i < d.nholds; i++) {
      check_str(d.holds[i], true, buf, size);
      for (size_t j = 0; j < i; j++) check(!same(d.holds[i], d.holds[j]), "duplicate holds");
    }
  } else {
    check(d.state == RESV_STATE_CONFIRMED, "an unknown state");
    check(d.version >= 0 && d.nholds == 0, "a confirmed one with holds or a negative version");
  }
  resv_answer_t a;
  memset(&a, 0, sizeof a);
  check(resv__doc_answer(&d, RESV_PENDING, true, &a, &err), "the answer");
  check(same(a.owner_id, d.owner.id) && same(a.owner_tenant, d.owner.tenant), "the answer's owner");
  check(a.state == d.state, "the answer's state");
  if (d.state == RESV_STATE_PENDING) {
    check(a.nholds == d.nholds && a.expires_at == d.expires_at, "the answer's holds");
    for (size_t i = 0; i < a.nholds; i++) check(same(a.holds[i], d.holds[i]), "a hold");
  } else {
    check(a.version == d.version && a.nholds == 0, "the answer's version");
  }
  resv_answer_clear(&a);
  resv__doc_free(&d);
  free(buf);
  return 0;
}
