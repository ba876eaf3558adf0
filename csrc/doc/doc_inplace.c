/* doc_inplace.c: the format-1 document read straight from its bytes, for
 * the one shape the store's own writes return.
 *
 * A reservation that the store just wrote is laid out exactly as
 * docs/design.md section 3 says, in the order the pipeline writes it. This
 * reader walks those bytes expecting each element's type and name in turn
 * instead of iterating with libbson, and puts the holds into the caller's
 * room instead of a malloc'd array. It accepts only documents that
 * resv__doc_decode accepts, with the same result: every check of
 * doc_decode.c is here (names, order, types, UTF-8, the _id's repeats, no
 * empty namespace, key, owner id or hold, no duplicate hold, nothing
 * after), and the bounds libbson checks too. Whatever it does not take
 * (a damaged or foreign document, more holds than the room) it leaves to
 * resv__doc_decode, which says what is wrong. */
#include "doc.h"

#include <string.h>

/* Where the elements being read are: p the next, end where they stop (a
 * document's final NUL; for the whole document, the end of its bytes). */
typedef struct cursor {
  const uint8_t *p, *end;
} cursor_t;

static uint32_t le32(const uint8_t *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return BSON_UINT32_FROM_LE(v);
}

/* The next element is of type and named name (len bytes and its NUL). */
static bool element(cursor_t *c, uint8_t type, const char *name, size_t len) {
  if ((size_t)(c->end - c->p) < 2 + len || c->p[0] != type ||
      memcmp(c->p + 1, name, len + 1) != 0)
    return false;
  c->p += 2 + len;
  return true;
}
#define ELEMENT(c, type, lit) element(c, type, lit, sizeof lit - 1)

/* A string value: its length, its bytes (UTF-8 without NUL), its NUL. */
static bool string(cursor_t *c, resv_str_t *out) {
  if (c->end - c->p < 4)
    return false;
  uint32_t l = le32(c->p);
  if (l == 0 || l > (size_t)(c->end - c->p) - 4 || c->p[4 + l - 1] != 0)
    return false;
  out->ptr = (const char *)c->p + 4;
  out->len = l - 1;
  c->p += 4 + l;
  return resv__utf8_valid(out->ptr, out->len);
}

/* A document's bounds, starting at c->p (with its length): *inner walks
 * its elements, c moves past it. */
static bool open_doc(cursor_t *c, cursor_t *inner) {
  if (c->end - c->p < 5)
    return false;
  uint32_t l = le32(c->p);
  if (l < 5 || l > (size_t)(c->end - c->p) || c->p[l - 1] != 0)
    return false;
  inner->p = c->p + 4;
  inner->end = c->p + l - 1;
  c->p += l;
  return true;
}

/* The next element, named name, is an int64 or an int32 (*out). */
static bool number(cursor_t *c, const char *name, size_t len, int64_t *out) {
  uint8_t type = c->p < c->end ? c->p[0] : 0;
  size_t size = type == 0x12 ? 8 : type == 0x10 ? 4 : 0;
  if (!size || !element(c, type, name, len) || (size_t)(c->end - c->p) < size)
    return false;
  if (size == 8) {
    uint64_t v;
    memcpy(&v, c->p, 8);
    *out = (int64_t)BSON_UINT64_FROM_LE(v);
  } else {
    *out = (int32_t)le32(c->p);
  }
  c->p += size;
  return true;
}
#define NUMBER(c, lit, out) number(c, lit, sizeof lit - 1, out)

/* The next element is the document name of n strings named names. */
static bool strings(cursor_t *c, const char *name, size_t len, const char *const *names,
                    resv_str_t *outs, size_t n) {
  cursor_t sub;
  if (!element(c, 0x03, name, len) || !open_doc(c, &sub))
    return false;
  for (size_t i = 0; i < n; i++)
    if (!element(&sub, 0x02, names[i], strlen(names[i])) || !string(&sub, &outs[i]))
      return false;
  return sub.p == sub.end;
}

/* The holds: an array of non-empty strings, all different, at most nroom
 * (whatever their indexes, as libbson reads an array). */
static bool holds(cursor_t *c, resv_str_t *room, size_t nroom, size_t *n) {
  cursor_t arr;
  *n = 0;
  if (!ELEMENT(c, 0x04, "holds") || !open_doc(c, &arr))
    return false;
  while (arr.p < arr.end) {
    if (arr.p[0] != 0x02 || *n == nroom)
      return false;
    const uint8_t *nul = memchr(arr.p + 1, 0, (size_t)(arr.end - arr.p) - 1);
    resv_str_t s;
    if (!nul)
      return false;
    arr.p = nul + 1;
    if (!string(&arr, &s) || s.len == 0)
      return false;
    for (size_t i = 0; i < *n; i++)
      if (resv__str_eq(room[i], s))
        return false;
    room[(*n)++] = s;
  }
  return true;
}

/* expires_at and what follows it: version (confirmed) or holds. */
static bool state(cursor_t *c, resv__doc_t *out, resv_str_t *room, size_t nroom) {
  if (c->p < c->end && c->p[0] == 0x0A) {
    out->state = RESV_STATE_CONFIRMED;
    return ELEMENT(c, 0x0A, "expires_at") && NUMBER(c, "version", &out->version) &&
           out->version >= 0;
  }
  out->state = RESV_STATE_PENDING;
  if (!NUMBER(c, "expires_at", &out->expires_at) || !holds(c, room, nroom, &out->nholds))
    return false;
  out->holds = out->nholds ? room : NULL;
  return true;
}

bool resv__doc_decode_inplace(const uint8_t *data, size_t len, resv__doc_t *out,
                                resv_str_t *room, size_t nroom) {
  static const char *const id_names[] = {"t", "n", "k"};
  static const char *const owner_names[] = {"tenant_id", "id"};
  cursor_t top = {data, data + len}, c;
  resv_str_t id[3], owner[2], tenant, key;

  memset(out, 0, sizeof *out);
  if (!open_doc(&top, &c) || top.p != top.end ||
      !strings(&c, "_id", 3, id_names, id, 3) ||
      !ELEMENT(&c, 0x02, "tenant_id") || !string(&c, &tenant) ||
      !resv__str_eq(tenant, id[0]) || !ELEMENT(&c, 0x02, "key") || !string(&c, &key) ||
      !resv__str_eq(key, id[2]) || id[1].len == 0 || id[2].len == 0 ||
      !strings(&c, "owner", 5, owner_names, owner, 2) || owner[1].len == 0)
    return false;
  out->key.tenant = id[0];
  out->key.ns = id[1];
  out->key.key = id[2];
  out->owner.tenant = owner[0];
  out->owner.id = owner[1];
  if (state(&c, out, room, nroom) && c.p == c.end)
    return true;
  memset(out, 0, sizeof *out);
  return false;
}
