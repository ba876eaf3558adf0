/* scan.c: the pages of resv_type_scan, which every backend's scan fills.
 *
 * A page owns everything it points to: its entries array (grown by
 * doubling) and an arena of blocks that holds every string and holds
 * array, so an entry costs no malloc of its own and resv_scan_clear frees
 * a page in a few calls. (How a stored document becomes an entry is in
 * csrc/doc/doc_scan.c, beside the decoder it uses.) */
#include "base.h"

#include <stdlib.h>
#include <string.h>

#define BLOCK_SIZE 16384

typedef struct block {
  struct block *next;
  size_t used, cap;
  _Alignas(16) char data[];
} block_t;

typedef struct storage {
  block_t *blocks;
  size_t cap; /* entries allocated */
} storage_t;

static storage_t *storage_of(resv_scan_t *scan) {
  if (!scan->storage_) scan->storage_ = calloc(1, sizeof(storage_t));
  return scan->storage_;
}

/* n bytes of the arena, 8-aligned, or NULL. */
void *resv__scan_alloc(resv_scan_t *scan, size_t n) {
  storage_t *s = storage_of(scan);
  if (!s) return NULL;
  n = (n + 7) & ~(size_t)7;
  block_t *b = s->blocks;
  if (!b || b->cap - b->used < n) {
    size_t cap = n > BLOCK_SIZE ? n : BLOCK_SIZE;
    if (!(b = malloc(sizeof *b + cap))) return NULL;
    b->cap = cap;
    b->used = 0;
    b->next = s->blocks;
    s->blocks = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  return p;
}

char *resv__scan_copy(resv_scan_t *scan, const char *p, size_t n) {
  char *out = resv__scan_alloc(scan, n + 1);
  if (!out) return NULL;
  if (n) memcpy(out, p, n);
  out[n] = '\0';
  return out;
}

bool resv__scan_copy_str(resv_scan_t *scan, resv_str_t *dst, const char *p, size_t n) {
  const char *c = resv__scan_copy(scan, p, n);
  if (!c) return false;
  dst->ptr = c;
  dst->len = n;
  return true;
}

bool resv__scan_fill(resv_scan_t *scan, resv_scan_entry_t *e, const resv__scan_doc_t *d,
                     int64_t now) {
  bool ok = resv__scan_copy_str(scan, &e->tenant, d->key->tenant.ptr, d->key->tenant.len) &&
            resv__scan_copy_str(scan, &e->ns, d->key->ns.ptr, d->key->ns.len) &&
            resv__scan_copy_str(scan, &e->key, d->key->key.ptr, d->key->key.len) &&
            resv__scan_copy_str(scan, &e->owner_tenant, d->owner->tenant.ptr,
                                d->owner->tenant.len) &&
            resv__scan_copy_str(scan, &e->owner_id, d->owner->id.ptr, d->owner->id.len);
  e->state = d->state;
  if (ok && d->state == RESV_STATE_PENDING) {
    e->status = d->expires_at > now ? RESV_PENDING : RESV_EXPIRED;
    e->expires_at = d->expires_at;
    resv_str_t *holds = d->nholds ? resv__scan_alloc(scan, d->nholds * sizeof *holds) : NULL;
    if (d->nholds && !holds) ok = false;
    for (size_t i = 0; ok && i < d->nholds; i++)
      ok = resv__scan_copy_str(scan, &holds[i], d->holds[i].ptr, d->holds[i].len);
    e->holds = holds;
    e->nholds = ok ? d->nholds : 0;
  } else {
    e->status = RESV_CONFIRMED;
    e->version = d->version;
  }
  return ok;
}

resv_scan_entry_t *resv__scan_push(resv_scan_t *scan) {
  storage_t *s = storage_of(scan);
  if (!s) return NULL;
  if (scan->count == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    resv_scan_entry_t *grown = realloc(scan->entries, cap * sizeof *grown);
    if (!grown) return NULL;
    scan->entries = grown;
    s->cap = cap;
  }
  resv_scan_entry_t *e = &scan->entries[scan->count++];
  memset(e, 0, sizeof *e);
  return e;
}

bool resv__scan_set_next(resv_scan_t *scan, const char *p, size_t n) {
  return resv__scan_copy_str(scan, &scan->next, p, n);
}

void resv_scan_clear(resv_scan_t *scan) {
  if (!scan) return;
  storage_t *s = scan->storage_;
  if (s) {
    for (block_t *b = s->blocks, *next; b; b = next) {
      next = b->next;
      free(b);
    }
    free(s);
  }
  free(scan->entries);
  memset(scan, 0, sizeof *scan);
}


/* ---- lists of types ------------------------------------------------ */

/* A list's storage: its names array and a scan page used as the arena. */
typedef struct names_storage {
  resv_scan_t arena;
  size_t cap;
} names_storage_t;

bool resv__type_names_add(resv_type_names_t *names, const char *name, size_t len) {
  static const char prefix[] = RESV__COLLECTION_PREFIX;
  size_t plen = sizeof prefix - 1;
  if (len <= plen || memcmp(name, prefix, plen) != 0) return true;
  const char *rest = name + plen;
  size_t rlen = len - plen;
  const char *sep = NULL;
  for (size_t i = 0; i + 1 < rlen; i++)
    if (rest[i] == '_' && rest[i + 1] == '_') {
      sep = rest + i;
      break;
    }
  if (!sep || sep == rest || sep + 2 == rest + rlen) return true;
  if (!names->storage_ && !(names->storage_ = calloc(1, sizeof(names_storage_t))))
    return false;
  names_storage_t *st = names->storage_;
  if (names->count == st->cap) {
    size_t cap = st->cap ? st->cap * 2 : 8;
    resv_type_name_t *grown = realloc(names->names, cap * sizeof *grown);
    if (!grown) return false;
    names->names = grown;
    st->cap = cap;
  }
  resv_type_name_t *n = &names->names[names->count];
  if (!resv__scan_copy_str(&st->arena, &n->collection, name, len) ||
      !resv__scan_copy_str(&st->arena, &n->context, rest, (size_t)(sep - rest)) ||
      !resv__scan_copy_str(&st->arena, &n->aggregate, sep + 2,
                           rlen - (size_t)(sep - rest) - 2))
    return false;
  names->count++;
  return true;
}

void resv_type_names_clear(resv_type_names_t *names) {
  if (!names) return;
  names_storage_t *st = names->storage_;
  if (st) {
    resv_scan_clear(&st->arena);
    free(st);
  }
  free(names->names);
  memset(names, 0, sizeof *names);
}
