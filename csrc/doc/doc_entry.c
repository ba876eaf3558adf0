/* doc_entry.c: a scan's entry as a format-1 document, and the test that a
 * decoded document is the reservation an entry describes: what a put
 * writes and how it tells its own copy from another reservation. libbson
 * only. */
#include "doc.h"
#include "doc_bson.h"

#include <string.h>

void resv__scan_entry_encode(const resv_scan_entry_t *e, resv__bw_t *w) {
  resv__bw_init(w);
  size_t id = resv__bw_doc(w, K("_id"));
  resv__bw_utf8(w, K("t"), e->tenant.ptr, e->tenant.len);
  resv__bw_utf8(w, K("n"), e->ns.ptr, e->ns.len);
  resv__bw_utf8(w, K("k"), e->key.ptr, e->key.len);
  resv__bw_end(w, id);
  resv__bw_utf8(w, K("tenant_id"), e->tenant.ptr, e->tenant.len);
  resv__bw_utf8(w, K("key"), e->key.ptr, e->key.len);
  size_t owner = resv__bw_doc(w, K("owner"));
  resv__bw_utf8(w, K("tenant_id"), e->owner_tenant.ptr, e->owner_tenant.len);
  resv__bw_utf8(w, K("id"), e->owner_id.ptr, e->owner_id.len);
  resv__bw_end(w, owner);
  if (e->state == RESV_STATE_CONFIRMED) {
    resv__bw_null(w, K("expires_at"));
    resv__bw_int64(w, K("version"), e->version);
  } else {
    resv__bw_int64(w, K("expires_at"), e->expires_at);
    size_t arr = resv__bw_array(w, K("holds"));
    for (size_t i = 0; i < e->nholds; i++) {
      char buf[16];
      const char *name;
      size_t len = bson_uint32_to_string((uint32_t)i, &name, buf, sizeof buf);
      resv__bw_utf8(w, name, len, e->holds[i].ptr, e->holds[i].len);
    }
    resv__bw_end(w, arr);
  }
  resv__bw_end(w, 0);
}

static bool same(resv_str_t a, resv_str_t b) {
  return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

bool resv__scan_entry_matches(const resv_scan_entry_t *e, const resv__doc_t *d) {
  if (!same(d->key.tenant, e->tenant) || !same(d->key.ns, e->ns) ||
      !same(d->key.key, e->key) || !same(d->owner.tenant, e->owner_tenant) ||
      !same(d->owner.id, e->owner_id) || d->state != e->state)
    return false;
  if (d->state == RESV_STATE_CONFIRMED) return d->version == e->version;
  if (d->expires_at != e->expires_at || d->nholds != e->nholds) return false;
  for (size_t i = 0; i < d->nholds; i++)
    if (!same(d->holds[i], e->holds[i])) return false;
  return true;
}
