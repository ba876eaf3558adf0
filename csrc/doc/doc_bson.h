/* doc_bson.h: a small BSON writer for the format-1 documents and for the
 * commands the MongoDB store sends.
 *
 * A reserve's filter and pipeline are many elements, nested several
 * levels. Built with bson_append_* each append goes through libbson's
 * generic varargs path and may grow the buffer, which costs more than the
 * rest of the driver's findAndModify (bench/README.md has the figures).
 * This writer appends the same bytes with one bounds
 * check and a memcpy per element, into a buffer on the caller's stack
 * that moves to the heap only for long strings, and hands the result to
 * the driver as a static bson_t. The element types are the few the
 * documents use: document, array, UTF-8 string, int32, int64, bool, null,
 * and a prebuilt document copied whole.
 *
 * Keys are literals (K("name") gives pointer and length) and never contain
 * NUL. Strings are the request's validated strings: UTF-8 without NUL,
 * at most max_string bytes, so every length fits an int32. Out of memory
 * aborts, as bson_append_* and bson_malloc do. */
#ifndef RESV_DOC_BSON_H
#define RESV_DOC_BSON_H

#include <bson/bson.h>

#include <stdint.h>
#include <string.h>

/* A key literal as (pointer, length). */
#define K(lit) lit, (sizeof lit - 1)

/* Holds a whole reserve pipeline with short strings (1 131 bytes for a
 * 40-byte key), and a write's filter with its conformance predicate
 * (1 825 bytes of it), without touching the heap: a buffer past glibc's
 * small sizes costs a malloc that first consolidates its free chunks. */
#define RESV__BW_INLINE 4096

/* While a template is recorded (doc_template.h), rec is set and the
 * writer tells it, through its hooks, where each string, int64 and
 * document went: a string s of len bytes, or an int64 v, is about to be
 * written at w->len; the document or array begun at offset at has just
 * ended. The writer knows the hooks only by their pointers. */
struct resv__bw;
struct resv__bw_rec;
typedef struct resv__bw_hooks {
  void (*utf8)(struct resv__bw *w, const char *s, size_t len);
  void (*int64)(struct resv__bw *w, int64_t v);
  void (*end)(struct resv__bw *w, size_t at);
} resv__bw_hooks_t;

typedef struct resv__bw {
  uint8_t *buf; /* inline_ or a bson_malloc'd copy */
  size_t len;
  size_t cap;
  struct resv__bw_rec *rec;      /* NULL but while a template is recorded */
  const resv__bw_hooks_t *hooks; /* rec's */
  uint8_t inline_[RESV__BW_INLINE];
} resv__bw_t;

static inline void resv__bw_reserve(resv__bw_t *w, size_t more) {
  size_t need = w->len + more;
  if (need <= w->cap)
    return;
  size_t cap = w->cap * 2 > need ? w->cap * 2 : need;
  if (w->buf == w->inline_) {
    uint8_t *heap = bson_malloc(cap);
    memcpy(heap, w->buf, w->len);
    w->buf = heap;
  } else {
    w->buf = bson_realloc(w->buf, cap);
  }
  w->cap = cap;
}

static inline void resv__bw_put_u32(uint8_t *at, uint32_t v) {
  v = BSON_UINT32_TO_LE(v);
  memcpy(at, &v, 4);
}

/* Type byte and key, with room for `payload` more bytes reserved. */
static inline void resv__bw_head(resv__bw_t *w, uint8_t type, const char *key,
                                 size_t key_len, size_t payload) {
  resv__bw_reserve(w, 1 + key_len + 1 + payload);
  w->buf[w->len++] = type;
  memcpy(w->buf + w->len, key, key_len);
  w->len += key_len;
  w->buf[w->len++] = 0;
}

/* Starts the top-level document. */
static inline void resv__bw_init(resv__bw_t *w) {
  w->buf = w->inline_;
  w->cap = sizeof w->inline_;
  w->len = 4; /* the length, written by resv__bw_finish */
  w->rec = NULL;
  w->hooks = NULL;
}

/* Starts an embedded document (type 3) or array (type 4) under key; the
 * returned offset goes to resv__bw_end. */
static inline size_t resv__bw_begin(resv__bw_t *w, uint8_t type,
                                    const char *key, size_t key_len) {
  resv__bw_head(w, type, key, key_len, 4);
  size_t at = w->len;
  w->len += 4;
  return at;
}

static inline size_t resv__bw_doc(resv__bw_t *w, const char *key,
                                  size_t key_len) {
  return resv__bw_begin(w, 0x03, key, key_len);
}

static inline size_t resv__bw_array(resv__bw_t *w, const char *key,
                                    size_t key_len) {
  return resv__bw_begin(w, 0x04, key, key_len);
}

/* Ends the document or array started at offset at. */
static inline void resv__bw_end(resv__bw_t *w, size_t at) {
  resv__bw_reserve(w, 1);
  w->buf[w->len++] = 0;
  resv__bw_put_u32(w->buf + at, (uint32_t)(w->len - at));
  if (w->rec)
    w->hooks->end(w, at);
}

static inline void resv__bw_utf8(resv__bw_t *w, const char *key,
                                 size_t key_len, const char *s, size_t len) {
  resv__bw_head(w, 0x02, key, key_len, 4 + len + 1);
  if (w->rec)
    w->hooks->utf8(w, s, len);
  resv__bw_put_u32(w->buf + w->len, (uint32_t)(len + 1));
  w->len += 4;
  if (len)
    memcpy(w->buf + w->len, s, len);
  w->len += len;
  w->buf[w->len++] = 0;
}

static inline void resv__bw_int32(resv__bw_t *w, const char *key,
                                  size_t key_len, int32_t v) {
  uint32_t le = BSON_UINT32_TO_LE((uint32_t)v);
  resv__bw_head(w, 0x10, key, key_len, 4);
  memcpy(w->buf + w->len, &le, 4);
  w->len += 4;
}

static inline void resv__bw_int64(resv__bw_t *w, const char *key,
                                  size_t key_len, int64_t v) {
  uint64_t le = BSON_UINT64_TO_LE((uint64_t)v);
  resv__bw_head(w, 0x12, key, key_len, 8);
  if (w->rec)
    w->hooks->int64(w, v);
  memcpy(w->buf + w->len, &le, 8);
  w->len += 8;
}

static inline void resv__bw_bool(resv__bw_t *w, const char *key,
                                 size_t key_len, bool v) {
  resv__bw_head(w, 0x08, key, key_len, 1);
  w->buf[w->len++] = v ? 1 : 0;
}

static inline void resv__bw_null(resv__bw_t *w, const char *key,
                                 size_t key_len) {
  resv__bw_head(w, 0x0A, key, key_len, 0);
}

/* Appends doc (a whole BSON document, e.g. one built once at open) as an
 * embedded document under key. */
static inline void resv__bw_bson(resv__bw_t *w, const char *key,
                                 size_t key_len, const bson_t *doc) {
  resv__bw_head(w, 0x03, key, key_len, doc->len);
  memcpy(w->buf + w->len, bson_get_data(doc), doc->len);
  w->len += doc->len;
}

/* Ends the top-level document and points *out at it (bson_init_static:
 * out needs no bson_destroy, the writer does, with resv__bw_free). */
static inline void resv__bw_finish(resv__bw_t *w, bson_t *out) {
  resv__bw_end(w, 0);
  bson_init_static(out, w->buf, w->len);
}

static inline void resv__bw_free(resv__bw_t *w) {
  if (w->buf != w->inline_)
    bson_free(w->buf);
}

#endif /* RESV_DOC_BSON_H */
