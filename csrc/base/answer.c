/* answer.c: filling and freeing answers.
 *
 * An answer carries strings (the owner, the holds) that must outlive the
 * reservation they were read from: another thread may change or delete it
 * the moment its lock is dropped. So an answer copies them into one block
 * of storage it owns: the array of holds first (aligned), then the bytes,
 * each NUL-terminated for C callers. The block is kept and reused by the
 * next answer written into the same struct, so a caller that reuses one
 * answer allocates only when an answer is larger than any before. An
 * answer of several keys (the *_all ops) also owns an array of one answer
 * per key, each with its own storage, kept for reuse the same way. */
#include "base.h"

#include <stdlib.h>
#include <string.h>

static bool reserve_storage(resv_answer_t *a, size_t need, resv_error_t *err) {
  if (need <= a->storage_cap_) return true;
  size_t cap = a->storage_cap_ ? a->storage_cap_ : 128;
  while (cap < need) cap *= 2;
  char *mem = realloc(a->storage_, cap);
  if (!mem) return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
  a->storage_ = mem;
  a->storage_cap_ = cap;
  return true;
}

static resv_str_t copy_into(char **cursor, const resv_str_t *s) {
  resv_str_t out = {*cursor, s->len};
  if (s->len) memcpy(*cursor, s->ptr, s->len);
  (*cursor)[s->len] = '\0';
  *cursor += s->len + 1;
  return out;
}

bool resv__answer_set(resv_answer_t *a, int32_t status, int32_t state,
                      int64_t expires_at, int64_t version,
                      const resv_str_t *owner_tenant,
                      const resv_str_t *owner_id, const resv_str_t *holds,
                      size_t nholds, resv_error_t *err) {
  static const resv_str_t empty = {"", 0};
  if (!owner_tenant) owner_tenant = &empty;
  if (!owner_id) owner_id = &empty;

  size_t need = nholds * sizeof(resv_str_t) + owner_tenant->len + 1 +
                owner_id->len + 1;
  for (size_t i = 0; i < nholds; i++) need += holds[i].len + 1;
  if (!reserve_storage(a, need, err)) return false;

  /* realloc keeps malloc's alignment, which suits resv_str_t. */
  resv_str_t *out_holds = (resv_str_t *)(void *)a->storage_;
  char *cursor = a->storage_ + nholds * sizeof(resv_str_t);
  a->owner_tenant = copy_into(&cursor, owner_tenant);
  a->owner_id = copy_into(&cursor, owner_id);
  for (size_t i = 0; i < nholds; i++) out_holds[i] = copy_into(&cursor, &holds[i]);

  a->status = status;
  a->state = state;
  a->expires_at = expires_at;
  a->version = version;
  a->holds = nholds ? out_holds : NULL;
  a->nholds = nholds;
  a->count = 0;
  a->keys = NULL;
  a->nkeys = 0;
  return true;
}

bool resv__answer_status(resv_answer_t *a, int32_t status, resv_error_t *err) {
  return resv__answer_set(a, status, RESV_STATE_NONE, 0, 0, NULL, NULL, NULL,
                          0, err);
}

void resv__answer_move(resv_answer_t *dst, resv_answer_t *src) {
  resv_answer_clear(dst);
  *dst = *src;
  memset(src, 0, sizeof *src);
}

bool resv__answer_keys(resv_answer_t *a, int32_t status, size_t n, resv_error_t *err) {
  if (n > a->keys_cap_) {
    resv_answer_t *mem = realloc(a->keys_, n * sizeof *mem);
    if (!mem) return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
    memset(mem + a->keys_cap_, 0, (n - a->keys_cap_) * sizeof *mem);
    a->keys_ = mem;
    a->keys_cap_ = n;
  }
  if (!resv__answer_status(a, status, err)) return false;
  for (size_t i = 0; i < n; i++) {
    resv_answer_t *k = &a->keys_[i];
    char *storage = k->storage_;
    size_t cap = k->storage_cap_;
    memset(k, 0, sizeof *k);
    k->storage_ = storage;
    k->storage_cap_ = cap;
  }
  a->keys = a->keys_;
  a->nkeys = n;
  return true;
}

resv_answer_t *resv__answer_key(resv_answer_t *a, size_t i) { return &a->keys_[i]; }

void resv_answer_clear(resv_answer_t *a) {
  if (!a) return;
  for (size_t i = 0; i < a->keys_cap_; i++) free(a->keys_[i].storage_);
  free(a->keys_);
  free(a->storage_);
  memset(a, 0, sizeof *a);
}
