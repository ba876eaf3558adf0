/* test_mongo_inplace.c: the in-place read of a returned document
 * (doc_inplace.c) against the strict decoder (doc_decode.c).
 *
 * Whatever the in-place read accepts, resv__doc_decode must accept with
 * the same result, strings pointing at the same bytes: over format-1
 * documents of every kind (pending with 0 to 10 holds, confirmed, int32
 * numbers, non-ASCII and empty strings) and over the same with bytes
 * flipped, lengths changed, the end cut or elements added. And it must
 * take the documents the store writes (up to its room of holds), or the
 * fast path would never run. No server needed. */
#include <stdint.h>
#include <string.h>

#include "doc_bson.h"
#include "mongo_internal.h"
#include "tests.h"

#define ROOM 8

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static const char *const words[] = {"", "t1", "email", "ann@example.com", "u-42",
                                    "\xc3\xa9t\xc3\xa9", "a1", "a2", "$x", "req-1"};
#define NWORDS (sizeof words / sizeof words[0])

static resv_str_t word(bool nonempty) {
  size_t i = next_random() % NWORDS;
  if (nonempty && i == 0)
    i = 1;
  return (resv_str_t){words[i], strlen(words[i])};
}

/* A format-1 document of a random reservation into w (pending with
 * nholds holds, all different, or confirmed); its state. */
static int32_t random_document(resv__bw_t *w, size_t nholds) {
  static char names[16][4];
  static resv_str_t holds[16];
  for (size_t i = 0; i < nholds; i++) {
    names[i][0] = 'h';
    names[i][1] = (char)('a' + i);
    holds[i] = (resv_str_t){names[i], 2};
  }
  resv_scan_entry_t e = {.tenant = word(false), .ns = word(true), .key = word(true),
                         .owner_tenant = word(false), .owner_id = word(true),
                         .holds = holds, .nholds = nholds};
  if (next_random() % 3 == 0) {
    e.state = RESV_STATE_CONFIRMED;
    e.version = (int64_t)(next_random() % 100);
  } else {
    e.state = RESV_STATE_PENDING;
    e.expires_at = (int64_t)(next_random() % 4000000000000);
  }
  resv__scan_entry_encode(&e, w);
  return e.state;
}

static bool same_str(resv_str_t a, resv_str_t b) { return a.ptr == b.ptr && a.len == b.len; }

static void assert_same(const resv__doc_t *a, const resv__doc_t *b) {
  ck_assert(same_str(a->key.tenant, b->key.tenant) && same_str(a->key.ns, b->key.ns) &&
            same_str(a->key.key, b->key.key));
  ck_assert(same_str(a->owner.tenant, b->owner.tenant) && same_str(a->owner.id, b->owner.id));
  ck_assert_int_eq(a->state, b->state);
  ck_assert_int_eq(a->expires_at, b->expires_at);
  ck_assert_int_eq(a->version, b->version);
  ck_assert_uint_eq(a->nholds, b->nholds);
  for (size_t i = 0; i < a->nholds; i++)
    ck_assert(same_str(a->holds[i], b->holds[i]));
}

/* Reads data both ways; returns whether the in-place read took it. */
static bool check_bytes(const uint8_t *data, size_t len) {
  resv__doc_t fast, slow;
  resv_str_t room[ROOM];
  resv_error_t err;
  bson_t doc;
  if (!resv__doc_decode_inplace(data, len, &fast, room, ROOM))
    return false;
  ck_assert_msg(bson_init_static(&doc, data, len) && resv__doc_decode(&doc, &slow, &err),
                "the in-place read took a document the decoder refuses");
  assert_same(&fast, &slow);
  resv__doc_free(&slow);
  return true;
}

START_TEST(test_store_documents_are_read_in_place_as_decoded) {
  for (int i = 0; i < 2000; i++) {
    resv__bw_t w;
    size_t nholds = next_random() % 11;
    bool confirmed = random_document(&w, nholds) == RESV_STATE_CONFIRMED;
    bool taken = check_bytes(w.buf, w.len);
    /* Confirmed ones carry no holds; pending ones up to the room are taken. */
    ck_assert_msg(taken == (confirmed || nholds <= ROOM),
                  "a store document (%zu holds) was %sread in place", nholds,
                  taken ? "" : "not ");
    resv__bw_free(&w);
  }
}
END_TEST

/* One damaged copy of data: bytes flipped, a length changed, the end cut. */
static size_t damage(const uint8_t *data, size_t len, uint8_t *out) {
  memcpy(out, data, len);
  uint64_t r = next_random();
  switch (r % 4) {
  case 0:
    for (int k = 0; k < 1 + (int)(r >> 8) % 3; k++)
      out[next_random() % len] ^= (uint8_t)(1u << (next_random() % 8));
    return len;
  case 1:
    out[next_random() % len] = (uint8_t)next_random();
    return len;
  case 2:
    return len - 1 - (size_t)(next_random() % (len - 1));
  default: { /* another element before the end, the length fixed */
    memcpy(out + len - 1, "\x0a" "x\0\0", 4);
    uint32_t l = (uint32_t)(len + 3);
    memcpy(out, &l, 4);
    return len + 3;
  }
  }
}

START_TEST(test_damaged_documents_are_read_in_place_only_as_decoded) {
  int taken = 0;
  for (int i = 0; i < 20000; i++) {
    resv__bw_t w;
    uint8_t copy[2048];
    random_document(&w, next_random() % 4);
    size_t len = damage(w.buf, w.len, copy);
    taken += check_bytes(copy, len);
    resv__bw_free(&w);
  }
  /* Flips inside strings keep a document valid: both read them. */
  ck_assert_int_gt(taken, 0);
}
END_TEST

Suite *mongo_inplace_suite(void) {
  const TTest *const tests[] = {test_store_documents_are_read_in_place_as_decoded,
                                test_damaged_documents_are_read_in_place_only_as_decoded,
                                NULL};
  return test_suite("mongo_inplace", "inplace", 60, NULL, NULL, tests);
}
