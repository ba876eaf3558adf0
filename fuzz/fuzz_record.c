/* fuzz_record.c: libFuzzer target for reading a file store's record.
 *
 * A record is read from a mapped page that a damaged disk or a crash of
 * the OS may have changed; its checksum catches damage, and what passes
 * the checksum is read by the layout's own rules. The input is one byte
 * of flags, one of key length, the LMDB key, then the record. With flag
 * bit 0 the record's checksum is made to match (the input's record gets
 * its CRC32C appended), so the fuzzer reaches the layout behind it.
 *
 * resv__file_rec_decode must never crash nor leak, refuse only with
 * RESV_EFORMAT (or RESV_ENOMEM), and when it accepts a record:
 *   - its strings lie in the key or the record, and hold what the layout
 *     allows (the same values a MongoDB document may hold: UTF-8 without
 *     NUL, a namespace, a key and an owner id not empty, holds not empty
 *     and without duplicates, a version not negative), so that a record
 *     copies to MongoDB (resv copy) as a document its decoder takes;
 *   - encoding what it decoded gives the record byte for byte (one record
 *     has one encoding);
 *   - resv__file_rec_glance and resv__file_rec_link read the same state,
 *     expiry and link, and resv__file_rec_relink gives a record that
 *     decodes to the same fields with the new link.
 * A refused record is never relinked (a new checksum would make it pass).
 * A format record that resv__file_format_decode accepts encodes back to
 * itself with the link that resv__file_rec_link reads. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file_internal.h"
#include "file_record.h"

static void check(bool cond, const char *what) {
  if (!cond) {
    fprintf(stderr, "fuzz_record: %s\n", what);
    abort();
  }
}

static bool inside(resv_str_t s, const MDB_val *a, const MDB_val *b) {
  const unsigned char *p = (const unsigned char *)s.ptr;
  const unsigned char *a0 = a->mv_data, *b0 = b->mv_data;
  return s.len == 0 || (p >= a0 && p + s.len <= a0 + a->mv_size) ||
         (p >= b0 && p + s.len <= b0 + b->mv_size);
}

static bool same(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

static void check_str(resv_str_t s, bool required, const MDB_val *key, const MDB_val *val) {
  check(inside(s, key, val), "a string outside the key and the record");
  check(!required || s.len > 0, "an empty required string");
  check(resv__utf8_valid(s.ptr, s.len), "a string that is not UTF-8");
}

static void check_same_rec(const resv__file_rec_t *a, const resv__file_rec_t *b) {
  check(same(a->key.tenant, b->key.tenant) && same(a->key.ns, b->key.ns) &&
            same(a->key.key, b->key.key),
        "the key changed");
  check(same(a->owner.tenant, b->owner.tenant) && same(a->owner.id, b->owner.id),
        "the owner changed");
  check(a->state == b->state && a->nholds == b->nholds, "the state changed");
  if (a->state == RESV_STATE_CONFIRMED)
    check(a->version == b->version, "the version changed");
  else
    check(a->expires_at == b->expires_at, "the expiry changed");
  for (size_t i = 0; i < a->nholds; i++) check(same(a->holds[i], b->holds[i]), "a hold changed");
}

/* What an accepted record must be, and what the other readers say of it. */
static void check_accepted(const MDB_val *key, const MDB_val *val, const resv__file_rec_t *rec,
                           uint32_t new_link) {
  check(rec->state == RESV_STATE_PENDING || rec->state == RESV_STATE_CONFIRMED,
        "neither pending nor confirmed");
  check_str(rec->key.tenant, false, key, val);
  check_str(rec->key.ns, true, key, val);
  check_str(rec->key.key, true, key, val);
  check_str(rec->owner.tenant, false, key, val);
  check_str(rec->owner.id, true, key, val);
  bool confirmed = rec->state == RESV_STATE_CONFIRMED;
  if (confirmed) {
    check(rec->version >= 0, "a negative version");
    check(rec->nholds == 0, "a confirmed record with holds");
  }
  for (size_t i = 0; i < rec->nholds; i++) {
    check_str(rec->holds[i], true, key, val);
    for (size_t j = 0; j < i; j++) check(!same(rec->holds[i], rec->holds[j]), "a duplicate hold");
  }

  resv__file_buf_t b;
  check(resv__file_rec_encode(&b, key, &rec->key, &rec->owner, confirmed, rec->expires_at,
                              rec->version, rec->holds, rec->nholds, rec->prev),
        "encoding failed");
  check(b.len == val->mv_size && memcmp(b.p, val->mv_data, b.len) == 0,
        "encoding what was decoded gives other bytes");
  resv__file_buf_free(&b);

  bool glanced_confirmed;
  int64_t glanced_expiry;
  check(resv__file_rec_glance(val, &glanced_confirmed, &glanced_expiry), "glance refused it");
  check(glanced_confirmed == confirmed, "glance read another state");
  check(confirmed || glanced_expiry == rec->expires_at, "glance read another expiry");

  uint32_t link;
  check(resv__file_rec_link(key, val, &link) && link == rec->prev, "another link");

  check(resv__file_rec_relink(&b, key, val, new_link), "relink refused it");
  MDB_val nv = {b.len, b.p};
  resv__file_rec_t again;
  resv_error_t err;
  check(resv__file_rec_decode(key, &nv, &again, &err), "the relinked record is refused");
  check(again.prev == new_link, "relink did not set the link");
  check_same_rec(rec, &again);
  resv__file_rec_free(&again);
  resv__file_buf_free(&b);
}

static void check_format(const MDB_val *key, const MDB_val *val) {
  int32_t format;
  const char *why;
  uint32_t tail;
  if (!resv__file_format_decode(key, val, &format, &why)) return;
  check(resv__file_rec_link(key, val, &tail), "a format record without its link");
  resv__file_buf_t b;
  check(resv__file_format_encode(&b, key, format, tail), "encoding the format failed");
  check(b.len == val->mv_size && memcmp(b.p, val->mv_data, b.len) == 0,
        "the format record encodes to other bytes");
  resv__file_buf_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2 || size > (1 << 16)) return 0;
  bool fix = data[0] & 1;
  size_t klen = data[1];
  if (klen > RESV__FILE_KEY_MAX || klen > size - 2) return 0;
  size_t vlen = size - 2 - klen;
  /* Buffers of their exact sizes, so that a read past either is seen. */
  unsigned char *k = malloc(klen ? klen : 1), *v = malloc(vlen + 4);
  memcpy(k, data + 2, klen);
  memcpy(v, data + 2 + klen, vlen);
  MDB_val key = {klen, k}, val = {vlen, v};
  if (fix) {
    uint32_t crc = resv__crc32c(resv__crc32c(0, k, klen), v, vlen);
    for (int i = 0; i < 4; i++) v[vlen + (size_t)i] = (unsigned char)(crc >> (8 * i));
    val.mv_size = vlen + 4;
  }
  uint32_t new_link = resv__crc32c(0, data, size);

  resv__file_rec_t rec;
  resv_error_t err;
  memset(&err, 0, sizeof err);
  if (resv__file_rec_decode(&key, &val, &rec, &err)) {
    check_accepted(&key, &val, &rec, new_link);
    resv__file_rec_free(&rec);
  } else {
    check(err.code == RESV_EFORMAT || err.code == RESV_ENOMEM, "a refusal without format");
    check(err.message[0] != '\0', "a refusal without a message");
    resv__file_buf_t b;
    if (!resv__file_rec_sound(&key, &val)) {
      check(!resv__file_rec_relink(&b, &key, &val, new_link), "a damaged record relinked");
      resv__file_buf_free(&b);
    }
  }
  bool confirmed;
  int64_t expiry;
  (void)resv__file_rec_glance(&val, &confirmed, &expiry); /* only never crashes */
  check_format(&key, &val);
  free(k);
  free(v);
  return 0;
}
