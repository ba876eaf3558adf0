/* file_record.c: the file store's records, encoded and decoded
 * (file_record.h gives the layout).
 *
 * Why not BSON: a reservation's BSON document repeats its key three times
 * and names every field; in LMDB the key is already the record's key, so
 * a record is the owner, the state and a checksum, about a sixth of the
 * document. The MongoDB layout stays the contract: copying a type turns
 * each record into the document and back (resv copy) without loss.
 *
 * The checksum is CRC32C: the SSE4.2 instruction where the CPU has it
 * (a few nanoseconds a record), a table otherwise. A record whose
 * checksum fails is never decoded: it answers RESV_EFORMAT. */
#include "file_record.h"
#include "file_internal.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- CRC32C --------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static bool crc_hw;
static long os_page; /* the system's page size, set with the table */

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    crc_table[i] = c;
  }
  os_page = sysconf(_SC_PAGESIZE);
#if defined(__x86_64__)
  __builtin_cpu_init();
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_sse42(uint32_t c, const unsigned char *p,
                                                          size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t v;
    memcpy(&v, p, 8);
    c64 = __builtin_ia32_crc32di(c64, v);
  }
  c = (uint32_t)c64;
  for (; n; n--) c = __builtin_ia32_crc32qi(c, *p++);
  return c;
}
#endif

uint32_t resv__crc32c(uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  pthread_once(&crc_once, crc_init);
  uint32_t c = ~crc;
#if defined(__x86_64__)
  if (crc_hw) return ~crc_sse42(c, p, n);
#endif
  for (; n; n--) c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

static uint32_t record_crc(const MDB_val *key, const unsigned char *v, size_t n) {
  return resv__crc32c(resv__crc32c(0, key->mv_data, key->mv_size), v, n);
}

bool resv__file_rec_sound(const MDB_val *key, const MDB_val *val) {
  if (val->mv_size < 5) return false;
  const unsigned char *v = val->mv_data;
  size_t n = val->mv_size - 4;
  uint32_t want = (uint32_t)v[n] | (uint32_t)v[n + 1] << 8 | (uint32_t)v[n + 2] << 16 |
                  (uint32_t)v[n + 3] << 24;
  return record_crc(key, v, n) == want;
}

/* ---- writing ---------------------------------------------------------------- */

static void buf_init(resv__file_buf_t *b) {
  b->p = b->inline_bytes;
  b->len = 0;
  b->cap = sizeof b->inline_bytes;
  b->failed = false;
}

void resv__file_buf_free(resv__file_buf_t *b) {
  if (b->p != b->inline_bytes) free(b->p);
  b->p = b->inline_bytes;
  b->len = 0;
}

static unsigned char *room(resv__file_buf_t *b, size_t n) {
  if (b->failed) return NULL;
  if (b->len + n > b->cap) {
    size_t cap = b->cap * 2 > b->len + n ? b->cap * 2 : b->len + n;
    unsigned char *p = malloc(cap);
    if (!p) {
      b->failed = true;
      return NULL;
    }
    memcpy(p, b->p, b->len);
    if (b->p != b->inline_bytes) free(b->p);
    b->p = p;
    b->cap = cap;
  }
  unsigned char *at = b->p + b->len;
  b->len += n;
  return at;
}

static void put_fixed(resv__file_buf_t *b, uint64_t v, int bytes) {
  unsigned char *at = room(b, (size_t)bytes);
  for (int i = 0; at && i < bytes; i++) at[i] = (unsigned char)(v >> (8 * i));
}

static bool finish(resv__file_buf_t *b, const MDB_val *key) {
  if (b->failed) return false;
  put_fixed(b, record_crc(key, b->p, b->len), 4);
  return !b->failed;
}

/* Bytes of v as a varint, of s as a string. */
static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v > 0x7f) {
    v >>= 7;
    n++;
  }
  return n;
}

static size_t str_len(resv_str_t s) { return varint_len(s.len) + s.len; }

/* The writes of a record sized beforehand (resv__file_rec_encode): each
 * moves *p past what it wrote, as put_varint, put_fixed and put_str. */
static void set_varint(unsigned char **p, uint64_t v) {
  do {
    *(*p)++ = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    v >>= 7;
  } while (v);
}

static void set_fixed(unsigned char **p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) *(*p)++ = (unsigned char)(v >> (8 * i));
}

static void set_str(unsigned char **p, resv_str_t s) {
  set_varint(p, s.len);
  if (s.len) memcpy(*p, s.ptr, s.len);
  *p += s.len;
}

/* A reservation's record is sized first and written in one piece. */
bool resv__file_rec_encode(resv__file_buf_t *b, const MDB_val *key,
                           const resv_key_t *k, const resv_owner_t *o,
                           bool confirmed, int64_t expires_at, int64_t version,
                           const resv_str_t *holds, size_t nholds, uint32_t prev) {
  buf_init(b);
  bool hashed = key->mv_size && ((const unsigned char *)key->mv_data)[0] == RESV__FILE_TAG_HASHED;
  char kind = confirmed ? RESV__REC_CONFIRMED : RESV__REC_PENDING;
  size_t n = 1 + 4 + str_len(o->tenant) + str_len(o->id) + 8 + 4;
  if (hashed) n += str_len(k->tenant) + str_len(k->ns) + str_len(k->key);
  if (!confirmed) {
    n += varint_len(nholds);
    for (size_t i = 0; i < nholds; i++) n += str_len(holds[i]);
  }
  unsigned char *p = room(b, n);
  if (!p) return false;
  *p++ = (unsigned char)(hashed ? kind + ('a' - 'A') : kind);
  set_fixed(&p, prev, 4);
  if (hashed) {
    set_str(&p, k->tenant);
    set_str(&p, k->ns);
    set_str(&p, k->key);
  }
  set_str(&p, o->tenant);
  set_str(&p, o->id);
  if (confirmed) {
    set_fixed(&p, (uint64_t)version, 8);
  } else {
    set_fixed(&p, (uint64_t)expires_at, 8);
    set_varint(&p, nholds);
    for (size_t i = 0; i < nholds; i++) set_str(&p, holds[i]);
  }
  set_fixed(&p, record_crc(key, b->p, n - 4), 4);
  return true;
}

bool resv__file_format_encode(resv__file_buf_t *b, const MDB_val *key, int32_t format,
                              uint32_t tail) {
  buf_init(b);
  put_fixed(b, RESV__REC_FORMAT, 1);
  put_fixed(b, (uint32_t)format, 4);
  put_fixed(b, tail, 4);
  return finish(b, key);
}

uint32_t resv__file_key_link(const MDB_val *key) {
  return resv__crc32c(0, key->mv_data, key->mv_size);
}

/* Where the link of a record of this kind lies, or 0 for none. */
static size_t link_at(int kind) {
  switch (kind) {
  case 'P': case 'C': case 'p': case 'c': return 1;
  case 'F': return 5;
  default: return 0;
  }
}

bool resv__file_rec_link(const MDB_val *key, const MDB_val *val, uint32_t *link) {
  const unsigned char *v = val->mv_data;
  if (!resv__file_rec_sound(key, val)) return false;
  size_t at = link_at(v[0]);
  if (!at || at + 4 + 4 > val->mv_size) return false;
  *link = (uint32_t)v[at] | (uint32_t)v[at + 1] << 8 | (uint32_t)v[at + 2] << 16 |
          (uint32_t)v[at + 3] << 24;
  return true;
}

bool resv__file_rec_relink(resv__file_buf_t *b, const MDB_val *key, const MDB_val *val,
                           uint32_t link) {
  const unsigned char *v = val->mv_data;
  buf_init(b);
  /* Never a damaged record: a new checksum would make it pass. */
  size_t at = val->mv_size >= 9 && resv__file_rec_sound(key, val) ? link_at(v[0]) : 0;
  if (!at || at + 8 > val->mv_size) return false;
  unsigned char *p = room(b, val->mv_size - 4);
  if (!p) return false;
  memcpy(p, v, val->mv_size - 4);
  for (int i = 0; i < 4; i++) p[at + (size_t)i] = (unsigned char)(link >> (8 * i));
  return finish(b, key);
}

/* ---- reading ---------------------------------------------------------------- */

typedef struct reader {
  const unsigned char *p, *end;
  bool bad;
} reader_t;

/* A varint as the encoder writes it, in its fewest bytes (a last byte of
 * 0 would add nothing) and within 64 bits: one value has one encoding, so
 * a record has one, which its writer and every reader agree on. */
static uint64_t get_varint(reader_t *r) {
  if (r->p < r->end && !(*r->p & 0x80)) return *r->p++; /* most are one byte */
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (r->p >= r->end) break;
    unsigned char c = *r->p++;
    v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      if (c == 0 || (shift == 63 && c > 1)) break;
      return v;
    }
  }
  r->bad = true;
  return 0;
}

/* A little-endian integer of 1 to 8 bytes. */
static uint64_t get_fixed(reader_t *r, int bytes) {
  if ((size_t)(r->end - r->p) < (size_t)bytes) {
    r->bad = true;
    return 0;
  }
  uint64_t v = 0;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  memcpy(&v, r->p, (size_t)bytes);
#else
  for (int i = 0; i < bytes; i++) v |= (uint64_t)r->p[i] << (8 * i);
#endif
  r->p += bytes;
  return v;
}

static resv_str_t get_str(reader_t *r) {
  resv_str_t s = {"", 0};
  uint64_t n = get_varint(r);
  if (r->bad || n > (uint64_t)(r->end - r->p)) {
    r->bad = true;
    return s;
  }
  s.ptr = (const char *)r->p;
  s.len = (size_t)n;
  r->p += n;
  return s;
}

bool resv__file_key_parts(const MDB_val *key, resv_key_t *k) {
  const char *p = key->mv_data, *end = p + key->mv_size;
  if (key->mv_size < 3 || p[0] != RESV__FILE_TAG_KEY) return false;
  const char *a = memchr(p + 1, 0, (size_t)(end - p - 1));
  const char *b = a ? memchr(a + 1, 0, (size_t)(end - a - 1)) : NULL;
  if (!b) return false;
  k->tenant = (resv_str_t){p + 1, (size_t)(a - p - 1)};
  k->ns = (resv_str_t){a + 1, (size_t)(b - a - 1)};
  k->key = (resv_str_t){b + 1, (size_t)(end - b - 1)};
  return true;
}

static bool bad(resv_error_t *err, const char *why) {
  return resv__fail(err, RESV_EFORMAT, "%s", why);
}

/* The holds of a pending record into out (inline or malloc'd). */
static bool get_holds(reader_t *r, resv__file_rec_t *out, resv_error_t *err) {
  uint64_t n = get_varint(r);
  if (r->bad || n > (uint64_t)(r->end - r->p)) return bad(err, "the count of holds is damaged");
  out->holds = out->inline_holds;
  if (n > RESV__REC_HOLDS_INLINE && !(out->holds = malloc((size_t)n * sizeof *out->holds)))
    return resv__fail(err, RESV_ENOMEM, "out of memory for the holds");
  for (uint64_t i = 0; i < n; i++) out->holds[i] = get_str(r);
  out->nholds = (size_t)n;
  return true;
}

/* The values a reservation may hold, as a MongoDB document's decoder
 * takes them (doc_decode.c), so that a record copies to MongoDB and back:
 * strings of UTF-8 without NUL, a namespace, a key and an owner id not
 * empty, holds not empty (and distinct: the caller's check, which may
 * allocate), a version not negative. A record that passes its checksum
 * was written so; this is the layout's own rule, for whatever wrote it.
 * NULL, or what is not allowed. */
static const char *values_problem(const resv__file_rec_t *rec) {
  const resv_str_t s[] = {rec->key.tenant, rec->key.ns, rec->key.key, rec->owner.tenant,
                          rec->owner.id};
  for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
    if (!resv__utf8_valid(s[i].ptr, s[i].len)) return "a string of it is not UTF-8";
  if (!rec->key.ns.len || !rec->key.key.len || !rec->owner.id.len)
    return "an empty namespace, key or owner id";
  if (rec->state == RESV_STATE_CONFIRMED && rec->version < 0) return "a negative version";
  for (size_t i = 0; i < rec->nholds; i++)
    if (!rec->holds[i].len || !resv__utf8_valid(rec->holds[i].ptr, rec->holds[i].len))
      return "a hold is empty or not UTF-8";
  return NULL;
}

bool resv__file_rec_decode(const MDB_val *key, const MDB_val *val,
                           resv__file_rec_t *out, resv_error_t *err) {
  if (!resv__file_rec_sound(key, val))
    return bad(err, "its checksum does not match: the record or its key is damaged");
  reader_t r = {val->mv_data, (const unsigned char *)val->mv_data + val->mv_size - 4, false};
  const unsigned char *k = key->mv_data;
  int kind = (int)get_fixed(&r, 1);
  bool hashed = kind == 'p' || kind == 'c';
  if (hashed) kind -= 'a' - 'A';
  if (kind != RESV__REC_PENDING && kind != RESV__REC_CONFIRMED)
    return bad(err, "not a reservation's record");
  if (hashed != (k[0] == RESV__FILE_TAG_HASHED))
    return bad(err, "a record of the wrong kind for its key");
  memset(out, 0, offsetof(resv__file_rec_t, inline_holds));
  out->prev = (uint32_t)get_fixed(&r, 4);
  if (hashed) {
    out->key.tenant = get_str(&r);
    out->key.ns = get_str(&r);
    out->key.key = get_str(&r);
  } else if (!resv__file_key_parts(key, &out->key)) {
    return bad(err, "a key of the wrong shape");
  }
  out->owner.tenant = get_str(&r);
  out->owner.id = get_str(&r);
  if (kind == RESV__REC_CONFIRMED) {
    out->state = RESV_STATE_CONFIRMED;
    out->version = (int64_t)get_fixed(&r, 8);
  } else {
    out->state = RESV_STATE_PENDING;
    out->expires_at = (int64_t)get_fixed(&r, 8);
    if (!r.bad && !get_holds(&r, out, err)) return false;
  }
  const char *why = r.bad || r.p != r.end ? "its fields do not fit the record"
                                           : values_problem(out);
  bool distinct = true;
  if (!why && !resv__strs_distinct(out->holds, out->nholds, &distinct, err)) {
    resv__file_rec_free(out);
    return false;
  }
  if (!distinct) why = "two holds are the same";
  if (!why) return true;
  resv__file_rec_free(out);
  return bad(err, why);
}

bool resv__file_rec_glance(const MDB_val *val, bool *confirmed, int64_t *expires_at) {
  if (val->mv_size < 5) return false;
  reader_t r = {val->mv_data, (const unsigned char *)val->mv_data + val->mv_size - 4, false};
  int kind = (int)get_fixed(&r, 1);
  bool hashed = kind == 'p' || kind == 'c';
  if (hashed) kind -= 'a' - 'A';
  if (kind != RESV__REC_PENDING && kind != RESV__REC_CONFIRMED) return false;
  *confirmed = kind == RESV__REC_CONFIRMED;
  *expires_at = 0;
  if (*confirmed) return true;
  get_fixed(&r, 4);
  for (int i = hashed ? 0 : 3; i < 5; i++) get_str(&r); /* the key's parts, the owner's */
  *expires_at = (int64_t)get_fixed(&r, 8);
  return !r.bad;
}

void resv__file_rec_free(resv__file_rec_t *rec) {
  if (rec->holds && rec->holds != rec->inline_holds) free(rec->holds);
  rec->holds = NULL;
}

bool resv__file_format_decode(const MDB_val *key, const MDB_val *val, int32_t *format,
                              const char **why) {
  if (!resv__file_rec_sound(key, val)) {
    *why = "the format record's checksum does not match: it is damaged";
    return false;
  }
  reader_t r = {val->mv_data, (const unsigned char *)val->mv_data + val->mv_size - 4, false};
  int kind = (int)get_fixed(&r, 1);
  *format = (int32_t)get_fixed(&r, 4);
  get_fixed(&r, 4); /* the tail */
  if (kind != RESV__REC_FORMAT || r.bad || r.p != r.end) {
    *why = "the format record is not a format record";
    return false;
  }
  return true;
}

/* ---- bounds --------------------------------------------------------------- */

void resv__file_bounds_of(MDB_txn *txn, bool read_only, resv__file_bounds_t *b) {
  MDB_stat st;
  pthread_once(&crc_once, crc_init);
  b->psize = mdb_env_stat(mdb_txn_env(txn), &st) == 0 ? st.ms_psize : 0;
  /* A page's place in memory tells its offset only when LMDB's pages are
   * the system's (the map starts on a system page). */
  b->in_pages = read_only && b->psize && (long)b->psize == os_page;
}

/* LMDB's page header: the page's number, 2 bytes of padding, 2 of flags,
 * and for the first of a run of overflow pages their count. */
#define PAGE_HEADER 16
#define PAGE_FLAGS_AT 10
#define PAGE_PAGES_AT 12
#define P_OVERFLOW 0x04

static bool in_page(size_t psize, const void *p, size_t n) {
  size_t at = (uintptr_t)p % psize;
  return at >= PAGE_HEADER && n <= psize - at;
}

bool resv__file_in_map(const resv__file_bounds_t *b, const MDB_val *key, const MDB_val *val) {
  size_t psize = b->psize ? b->psize : 4096;
  if (!b->in_pages)
    return key->mv_size <= RESV__FILE_KEY_MAX &&
           val->mv_size <= (size_t)RESV__FILE_MAX_PAGES * psize;
  if (!in_page(psize, key->mv_data, key->mv_size)) return false;
  if (in_page(psize, val->mv_data, val->mv_size)) return true;
  /* A big record: the first bytes after an overflow page's header. */
  const unsigned char *v = val->mv_data;
  if ((uintptr_t)v % psize != PAGE_HEADER) return false;
  uint16_t flags;
  uint32_t pages;
  memcpy(&flags, v - PAGE_HEADER + PAGE_FLAGS_AT, sizeof flags);
  memcpy(&pages, v - PAGE_HEADER + PAGE_PAGES_AT, sizeof pages);
  return (flags & P_OVERFLOW) && pages <= RESV__FILE_MAX_PAGES &&
         val->mv_size <= (size_t)pages * psize - PAGE_HEADER;
}
