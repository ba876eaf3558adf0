/* mongo_build.c: the documents the MongoDB operations send, filters and
 * update pipelines, and the pieces they are made of: for the single-key
 * operations (mongo_ops.c, mongo_upsert.c) and for mongo_all.c's batches,
 * so that a key's writes are the same bytes from both.
 *
 * reserve and confirm's filter is F(key) and $or [{owner: O},
 * {expires_at: {$lte: now}}]; their update is an aggregation pipeline of
 * one $replaceWith stage, which writes every field in the format's order
 * and decides what the document becomes. The pipeline avoids the
 * expression traps of docs/design.md section 10: "confirmed by this
 * owner" is owner equality and expires_at equal to null (an upserted
 * document has no expires_at, and missing is not null under $eq); "live
 * pending of this owner" is owner equality and $gt [expires_at, now]
 * ($lte would be true for null). Every value the caller gave is wrapped
 * in $literal, so an attempt or id that starts with "$" is data, not a
 * field path. now is the store's clock, written in as a literal: the
 * server's clock is never read. Every write's filter names _id, tenant_id
 * and key, so on a sharded cluster it routes to one shard, and carries
 * the conformance predicate (resv__doc_conforms_new) as $expr, so it
 * matches no document that is not a format-1 reservation
 * (docs/design.md section 12).
 *
 * The documents are written with doc_bson.h straight from the request's
 * (pointer, length) strings: no NUL-terminated copies, no BCON, no
 * libbson appends.
 *
 * This file only writes bytes into a resv__bw_t: it must not talk to the
 * server, read a reply or decide an answer (the files that send the
 * documents do). */
#include "mongo_internal.h"
#include "doc_bson.h"

#include <stdio.h>

static void put_str(resv__bw_t *w, const char *key, size_t key_len,
                    const resv_str_t *s) {
  /* An empty string may come as (NULL, 0). */
  resv__bw_utf8(w, key, key_len, s->ptr ? s->ptr : "", s->len);
}

/* { $literal: <s> } */
static void put_literal_str(resv__bw_t *w, const char *key, size_t key_len,
                            const resv_str_t *s) {
  size_t lit = resv__bw_doc(w, key, key_len);
  put_str(w, K("$literal"), s);
  resv__bw_end(w, lit);
}

/* { t, n, k }: the _id, fields in the format's order. */
static void put_id(resv__bw_t *w, const char *key, size_t key_len,
                   const resv_key_t *k) {
  size_t id = resv__bw_doc(w, key, key_len);
  put_str(w, K("t"), &k->tenant);
  put_str(w, K("n"), &k->ns);
  put_str(w, K("k"), &k->key);
  resv__bw_end(w, id);
}

/* { tenant_id, id }: the owner, fields in the format's order. */
static void put_owner(resv__bw_t *w, const char *key, size_t key_len,
                      const resv_owner_t *o) {
  size_t owner = resv__bw_doc(w, key, key_len);
  put_str(w, K("tenant_id"), &o->tenant);
  put_str(w, K("id"), &o->id);
  resv__bw_end(w, owner);
}

/* { $literal: { tenant_id, id } } */
static void put_literal_owner(resv__bw_t *w, const char *key, size_t key_len,
                              const resv_owner_t *o) {
  size_t lit = resv__bw_doc(w, key, key_len);
  put_owner(w, K("$literal"), o);
  resv__bw_end(w, lit);
}

/* F(key), as a query writes it: _id, tenant_id, key. */
static void put_f_key(resv__bw_t *w, const resv_key_t *k) {
  put_id(w, K("_id"), k);
  put_str(w, K("tenant_id"), &k->tenant);
  put_str(w, K("key"), &k->key);
}

/* The head of a written document, each value a $literal:
 * _id, tenant_id, key, owner. */
static void put_head(resv__bw_t *w, const resv_request_t *r) {
  size_t lit = resv__bw_doc(w, K("_id"));
  put_id(w, K("$literal"), &r->key);
  resv__bw_end(w, lit);
  put_literal_str(w, K("tenant_id"), &r->key.tenant);
  put_literal_str(w, K("key"), &r->key.key);
  put_literal_owner(w, K("owner"), &r->owner);
}

/* { $and: [ { $eq: ["$owner", {$literal: O}] }, { <op>: ["$expires_at", v] } ] }
 * with v null and op $eq (confirmed by this owner) or v now and op $gt
 * (live pending of this owner). */
static void put_ours_and(resv__bw_t *w, const char *key, size_t key_len,
                         const resv_owner_t *o, bool live, int64_t now) {
  size_t cond = resv__bw_doc(w, key, key_len);
  size_t and = resv__bw_array(w, K("$and"));
  size_t eq = resv__bw_doc(w, K("0"));
  size_t eq_args = resv__bw_array(w, K("$eq"));
  resv__bw_utf8(w, K("0"), K("$owner"));
  put_literal_owner(w, K("1"), o);
  resv__bw_end(w, eq_args);
  resv__bw_end(w, eq);
  size_t test = resv__bw_doc(w, K("1"));
  size_t test_args = live ? resv__bw_array(w, K("$gt"))
                          : resv__bw_array(w, K("$eq"));
  resv__bw_utf8(w, K("0"), K("$expires_at"));
  if (live)
    resv__bw_int64(w, K("1"), now);
  else
    resv__bw_null(w, K("1"));
  resv__bw_end(w, test_args);
  resv__bw_end(w, test);
  resv__bw_end(w, and);
  resv__bw_end(w, cond);
}

/* { $ifNull: ["$holds", []] } */
static void put_holds_or_empty(resv__bw_t *w, const char *key,
                               size_t key_len) {
  size_t if_null = resv__bw_doc(w, key, key_len);
  size_t args = resv__bw_array(w, K("$ifNull"));
  resv__bw_utf8(w, K("0"), K("$holds"));
  resv__bw_end(w, resv__bw_array(w, K("1")));
  resv__bw_end(w, args);
  resv__bw_end(w, if_null);
}

/* $expr: the conformance predicate (doc_decode.c), so a write never
 * matches a document that is not a format-1 reservation. */
static void put_conforms(resv__bw_t *w, const resv__mongo_t *m) {
  resv__bw_bson(w, K("$expr"), m->conforms);
}

/* { <key>: { <op>: v } } */
static void put_cmp(resv__bw_t *w, const char *key, size_t key_len,
                    const char *op, size_t op_len, const int64_t *v) {
  size_t doc = resv__bw_doc(w, key, key_len);
  if (v)
    resv__bw_int64(w, op, op_len, *v);
  else
    resv__bw_null(w, op, op_len);
  resv__bw_end(w, doc);
}

/* F(key), $or [ { owner: O }, { expires_at: { $lte: now } } ] and the
 * conformance predicate. A reserve's owner clause is two, so that a new
 * attempt never joins a reservation holding max_holds attempts (one
 * already there still matches): { owner: O, "holds.<max_holds - 1>":
 * { $exists: false } } (fewer holds, or none: confirmed) and
 * { owner: O, holds: A }. The full one then answers at the duplicate key.
 * An exact confirm's owner clause is two as well, { owner: O, expires_at:
 * { $ne: null } } (pending) and { owner: O, version: { $lte: V } }, so
 * that every document it matches becomes the owner's confirmed one of
 * version V exactly: mongo_all.c then knows the answer without reading
 * it, and a confirmed one of a later version meets the duplicate key. */
static void upsert_filter(resv__bw_t *w, const resv__mongo_t *m,
                          const resv_request_t *r, int64_t now, bool exact) {
  bool reserve = r->op == RESV_OP_RESERVE;
  char last[32];
  int last_len = snprintf(last, sizeof last, "holds.%d", (int)m->max_holds - 1);
  put_f_key(w, &r->key);
  size_t or = resv__bw_array(w, K("$or"));
  size_t mine = resv__bw_doc(w, K("0"));
  put_owner(w, K("owner"), &r->owner);
  if (reserve) {
    size_t exists = resv__bw_doc(w, last, (size_t)last_len);
    resv__bw_bool(w, K("$exists"), false);
    resv__bw_end(w, exists);
  } else if (exact) {
    put_cmp(w, K("expires_at"), K("$ne"), NULL);
  }
  resv__bw_end(w, mine);
  size_t expired = resv__bw_doc(w, K("1"));
  put_cmp(w, K("expires_at"), K("$lte"), &now);
  resv__bw_end(w, expired);
  if (reserve || exact) {
    size_t held = resv__bw_doc(w, K("2"));
    put_owner(w, K("owner"), &r->owner);
    if (reserve)
      put_str(w, K("holds"), &r->attempt);
    else
      put_cmp(w, K("version"), K("$lte"), &r->version);
    resv__bw_end(w, held);
  }
  resv__bw_end(w, or);
  put_conforms(w, m);
}

/* reserve: keep our confirmed one; join our live pending one (add the
 * attempt unless there, expiry the later one); otherwise start afresh.
 *
 *   [ { $replaceWith: { $cond: {
 *       if: CONFIRMED_OURS, then: "$$ROOT",
 *       else: { $cond: {
 *         if: LIVE_OURS,
 *         then: { HEAD, expires_at: { $max: ["$expires_at", expires] },
 *                 holds: { $cond: {
 *                   if: { $in: [ {$literal: A}, {$ifNull: ["$holds", []]} ] },
 *                   then: "$holds",
 *                   else: { $concatArrays: [ {$ifNull: ["$holds", []]},
 *                                            [ {$literal: A} ] ] } } } },
 *         else: { HEAD, expires_at: expires, holds: { $literal: [A] } }
 *   } } } } } ]
 *
 * The pipeline is a document whose keys are "0", "1", ... */
static void reserve_pipeline(resv__bw_t *w, const resv_request_t *r,
                             int64_t now, int64_t expires) {
  size_t stage = resv__bw_doc(w, K("0"));
  size_t replace = resv__bw_doc(w, K("$replaceWith"));
  size_t cond = resv__bw_doc(w, K("$cond"));
  put_ours_and(w, K("if"), &r->owner, false, 0);
  resv__bw_utf8(w, K("then"), K("$$ROOT"));
  size_t inner = resv__bw_doc(w, K("else"));
  size_t inner_cond = resv__bw_doc(w, K("$cond"));
  put_ours_and(w, K("if"), &r->owner, true, now);

  /* then: join our live pending reservation. */
  size_t joined = resv__bw_doc(w, K("then"));
  put_head(w, r);
  size_t max = resv__bw_doc(w, K("expires_at"));
  size_t max_args = resv__bw_array(w, K("$max"));
  resv__bw_utf8(w, K("0"), K("$expires_at"));
  resv__bw_int64(w, K("1"), expires);
  resv__bw_end(w, max_args);
  resv__bw_end(w, max);
  size_t holds = resv__bw_doc(w, K("holds"));
  size_t holds_cond = resv__bw_doc(w, K("$cond"));
  size_t in = resv__bw_doc(w, K("if"));
  size_t in_args = resv__bw_array(w, K("$in"));
  put_literal_str(w, K("0"), &r->attempt);
  put_holds_or_empty(w, K("1"));
  resv__bw_end(w, in_args);
  resv__bw_end(w, in);
  resv__bw_utf8(w, K("then"), K("$holds"));
  size_t concat = resv__bw_doc(w, K("else"));
  size_t concat_args = resv__bw_array(w, K("$concatArrays"));
  put_holds_or_empty(w, K("0"));
  size_t one = resv__bw_array(w, K("1"));
  put_literal_str(w, K("0"), &r->attempt);
  resv__bw_end(w, one);
  resv__bw_end(w, concat_args);
  resv__bw_end(w, concat);
  resv__bw_end(w, holds_cond);
  resv__bw_end(w, holds);
  resv__bw_end(w, joined);

  /* else: start afresh. */
  size_t fresh = resv__bw_doc(w, K("else"));
  put_head(w, r);
  resv__bw_int64(w, K("expires_at"), expires);
  size_t lit = resv__bw_doc(w, K("holds"));
  size_t lit_holds = resv__bw_array(w, K("$literal"));
  put_str(w, K("0"), &r->attempt);
  resv__bw_end(w, lit_holds);
  resv__bw_end(w, lit);
  resv__bw_end(w, fresh);

  resv__bw_end(w, inner_cond);
  resv__bw_end(w, inner);
  resv__bw_end(w, cond);
  resv__bw_end(w, replace);
  resv__bw_end(w, stage);
}

/* confirm: ours, confirmed, version the larger of the stored one (when it
 * was already our confirmed one) and the given one; no holds.
 *
 *   [ { $replaceWith: { HEAD, expires_at: null,
 *       version: { $cond: { if: CONFIRMED_OURS,
 *                           then: { $max: ["$version", version] },
 *                           else: version } } } } ] */
static void confirm_pipeline(resv__bw_t *w, const resv_request_t *r,
                             int64_t version) {
  size_t stage = resv__bw_doc(w, K("0"));
  size_t doc = resv__bw_doc(w, K("$replaceWith"));
  put_head(w, r);
  resv__bw_null(w, K("expires_at"));
  size_t v = resv__bw_doc(w, K("version"));
  size_t cond = resv__bw_doc(w, K("$cond"));
  put_ours_and(w, K("if"), &r->owner, false, 0);
  size_t max = resv__bw_doc(w, K("then"));
  size_t max_args = resv__bw_array(w, K("$max"));
  resv__bw_utf8(w, K("0"), K("$version"));
  resv__bw_int64(w, K("1"), version);
  resv__bw_end(w, max_args);
  resv__bw_end(w, max);
  resv__bw_int64(w, K("else"), version);
  resv__bw_end(w, cond);
  resv__bw_end(w, v);
  resv__bw_end(w, doc);
  resv__bw_end(w, stage);
}

/* The pieces the operations send (mongo_internal.h). */
void resv__mongo_put_str(resv__bw_t *w, const char *key, size_t key_len,
                         const resv_str_t *s) {
  put_str(w, key, key_len, s);
}

void resv__mongo_put_id(resv__bw_t *w, const char *key, size_t key_len,
                        const resv_key_t *k) {
  put_id(w, key, key_len, k);
}

void resv__mongo_put_f_key(resv__bw_t *w, const resv_key_t *k) {
  put_f_key(w, k);
}

void resv__mongo_put_conforms(resv__bw_t *w, const resv__mongo_t *m) {
  put_conforms(w, m);
}

void resv__mongo_build_upsert_filter(resv__bw_t *w, const resv__mongo_t *m,
                                     const resv_request_t *r, int64_t now,
                                     bool exact) {
  upsert_filter(w, m, r, now, exact);
}

void resv__mongo_build_upsert_pipeline(resv__bw_t *w, const resv_request_t *r,
                                       int64_t now, int64_t expires) {
  if (r->op == RESV_OP_RESERVE)
    reserve_pipeline(w, r, now, expires);
  else
    confirm_pipeline(w, r, r->version);
}

void resv__mongo_owner_filter(resv__bw_t *w, const resv__mongo_t *m,
                              const resv_request_t *r, bool emptied) {
  put_f_key(w, &r->key);
  put_owner(w, K("owner"), &r->owner);
  if (emptied) {
    size_t doc = resv__bw_doc(w, K("expires_at"));
    resv__bw_null(w, K("$ne"));
    resv__bw_end(w, doc);
    doc = resv__bw_doc(w, K("holds"));
    resv__bw_int32(w, K("$size"), 0);
    resv__bw_end(w, doc);
  }
  put_conforms(w, m);
}
