/* mongo_template.c: reserve's and confirm's filters and pipelines written
 * from templates (doc_template.h) recorded once per store.
 *
 * Most of those documents is constant for a store: the operators, the
 * field names, "holds.<max_holds - 1>", the conformance predicate. Only
 * the request's strings (the key's three, the owner's two, the attempt)
 * and the clock's values (now, the expiry, the version) change. So the
 * builders of mongo_build.c run once at open on placeholders, and each
 * call copies the recording with its own values in their places: the
 * same bytes, which test_mongo_build.c checks against the builders.
 *
 * It must not write a document of its own: every byte comes from a
 * recording of mongo_build.c's builders. */
#include "mongo_internal.h"
#include "doc_template.h"

/* The values, by number: the template's slots name them so. */
enum { S_KEY_TENANT, S_KEY_NS, S_KEY_KEY, S_OWNER_TENANT, S_OWNER_ID, S_ATTEMPT, NSTRS };
enum { I_NOW, I_EXPIRES, I_VERSION, NINTS };

/* The filters: reserve's, confirm's, confirm's exact one. */
enum { F_RESERVE, F_CONFIRM, F_EXACT, NFILTERS };

struct resv__mongo_templates {
  resv__tpl_t filter[NFILTERS];
  resv__tpl_t pipeline[2]; /* reserve's, confirm's */
};

/* The placeholders: strings known by their address, int64s by a value
 * no builder writes as a constant. */
static const char placeholder[NSTRS][2] = {"a", "b", "c", "d", "e", "f"};
#define SENTINEL(i) (INT64_C(0x5e11a7e0d0c0b0a0) + (i))

static resv_request_t placeholder_request(int32_t op) {
  resv_str_t s[NSTRS];
  for (int i = 0; i < NSTRS; i++)
    s[i] = (resv_str_t){placeholder[i], 1};
  resv_request_t r = {.op = op,
                      .key = {s[S_KEY_TENANT], s[S_KEY_NS], s[S_KEY_KEY]},
                      .owner = {s[S_OWNER_TENANT], s[S_OWNER_ID]},
                      .attempt = s[S_ATTEMPT],
                      .version = SENTINEL(I_VERSION)};
  return r;
}

/* Records into t the filter (pipeline false) or pipeline of op. */
static void record(resv__tpl_t *t, const resv__mongo_t *m, int32_t op, bool exact,
                   bool pipeline) {
  resv_request_t r = placeholder_request(op);
  resv__bw_rec_t rec = {.nstrs = NSTRS, .nints = NINTS};
  resv__bw_t w;
  for (int i = 0; i < NSTRS; i++)
    rec.strs[i] = placeholder[i];
  for (int i = 0; i < NINTS; i++)
    rec.ints[i] = SENTINEL(i);
  resv__bw_init(&w);
  resv__tpl_record_begin(&rec, t, &w);
  if (pipeline)
    resv__mongo_build_upsert_pipeline(&w, &r, SENTINEL(I_NOW), SENTINEL(I_EXPIRES));
  else
    resv__mongo_build_upsert_filter(&w, m, &r, SENTINEL(I_NOW), exact);
  resv__tpl_record_end(&rec, &w);
  resv__bw_free(&w);
}

resv__mongo_templates_t *resv__mongo_templates_new(const resv__mongo_t *m) {
  resv__mongo_templates_t *t = bson_malloc0(sizeof *t);
  record(&t->filter[F_RESERVE], m, RESV_OP_RESERVE, false, false);
  record(&t->filter[F_CONFIRM], m, RESV_OP_CONFIRM, false, false);
  record(&t->filter[F_EXACT], m, RESV_OP_CONFIRM, true, false);
  record(&t->pipeline[0], m, RESV_OP_RESERVE, false, true);
  record(&t->pipeline[1], m, RESV_OP_CONFIRM, false, true);
  return t;
}

void resv__mongo_templates_free(resv__mongo_templates_t *t) {
  if (!t)
    return;
  for (int i = 0; i < NFILTERS; i++)
    resv__tpl_free(&t->filter[i]);
  resv__tpl_free(&t->pipeline[0]);
  resv__tpl_free(&t->pipeline[1]);
  bson_free(t);
}

/* Writes t into w with r's strings and the given int64s. */
static void write_values(const resv__tpl_t *t, resv__bw_t *w, const resv_request_t *r,
                         int64_t now, int64_t expires) {
  const resv_str_t strs[NSTRS] = {r->key.tenant, r->key.ns,  r->key.key,
                                  r->owner.tenant, r->owner.id, r->attempt};
  const int64_t ints[NINTS] = {now, expires, r->version};
  resv__tpl_write(t, strs, ints, w);
}

void resv__mongo_upsert_filter(resv__bw_t *w, const resv__mongo_t *m,
                               const resv_request_t *r, int64_t now, bool exact) {
  if (!m->templates) {
    resv__mongo_build_upsert_filter(w, m, r, now, exact);
    return;
  }
  int f = r->op == RESV_OP_RESERVE ? F_RESERVE : exact ? F_EXACT : F_CONFIRM;
  write_values(&m->templates->filter[f], w, r, now, 0);
}

void resv__mongo_upsert_pipeline(resv__bw_t *w, const resv__mongo_t *m,
                                 const resv_request_t *r, int64_t now, int64_t expires) {
  if (!m->templates) {
    resv__mongo_build_upsert_pipeline(w, r, now, expires);
    return;
  }
  write_values(&m->templates->pipeline[r->op == RESV_OP_RESERVE ? 0 : 1], w, r, now,
               expires);
}
