/* mongo_ops.c: the five operations as MongoDB commands (docs/design.md section 5).
 *
 * reserve and confirm are ONE findAndModify each: filter F(key) and
 * $or [{owner: O}, {expires_at: {$lte: now}}], an aggregation-pipeline
 * update, upsert, returning the new document. The filter lets through the
 * owner's own reservation and any expired pending one; the pipeline (one
 * $replaceWith stage, which writes every field in the format's order)
 * decides what the document becomes. A key held by someone else does not
 * match, so the upsert tries to insert it and fails on the _id index with
 * a duplicate key: that is the conflict path, which reads the document and
 * answers conflict with its holder, or, when nobody else holds it any more
 * (it is ours, expired, or gone again), runs the upsert again, a bounded
 * number of times.
 *
 * The pipeline avoids the expression traps of docs/design.md section 10: "confirmed
 * by this owner" is owner equality and expires_at equal to null (an
 * upserted document has no expires_at, and missing is not null under
 * $eq); "live pending of this owner" is owner equality and
 * $gt [expires_at, now] ($lte would be true for null). Every value the
 * caller gave is wrapped in $literal, so an attempt or id that starts with
 * "$" is data, not a field path. now is the store's clock, written in as
 * a literal: the server's clock is never read.
 *
 * abandon is two writes (pull the hold where F(key) and owner, a
 * findAndModify returning what the pull left, which decides the answer;
 * delete where F(key), owner, expires_at not null and holds empty), get
 * one read from the primary, release one delete. Every write's filter
 * names _id, tenant_id and key, so on a sharded cluster it routes to one
 * shard.
 *
 * Every write's filter also carries the conformance predicate
 * (resv__mongo_conforms_new) as $expr: a document that is not a format-1
 * reservation matches no write, the owner's included (docs/design.md section 12).
 * reserve and confirm then meet it on the _id index and the duplicate-key
 * read answers RESV_EFORMAT; an abandon or release that matched nothing
 * reads the key once to tell RESV_ABSENT from RESV_EFORMAT. */
#include "mongo_internal.h"
#include "doc_bson.h"

#include <stdio.h>
#include <string.h>

/* How many times reserve/confirm run their upsert when a duplicate key
 * turns out not to be a conflict (the key was freed in between). */
#define UPSERT_TRIES 5

/* The server is told each command's time limit (maxTimeMS): what is left
 * of the call's deadline, so a command the server cannot finish in time
 * ends there with MaxTimeMSExpired (50, a timeout; not retried by the
 * driver, and the connection is kept) instead of running on for nobody.
 * The margin for that answer to travel back is on the far side of the
 * deadline: the caller waits the deadline plus its grace (store.c's 250
 * ms) before it gives up on the worker, so the server gets the whole
 * time the caller was promised and a timeout is never answered early.
 * The socket timeout stays as a larger backstop (mongo_store.c). */
int64_t resv__mongo_max_time_ms(int64_t deadline) {
  int64_t left = deadline - resv__monotonic_ms();
  if (left >= INT32_MAX)
    return 0; /* a deadline past any limit the server takes: none */
  /* One more: the clock counts whole milliseconds, and the server must
   * not stop before the deadline. */
  return left >= 1 ? left + 1 : -1;
}

/* Adds maxTimeMS for deadline to a command's options; false (and err
 * filled with RESV_ETIMEOUT) when no time is left to send it. */
static bool put_max_time(resv__bw_t *w, int64_t deadline, const char *what,
                         resv_error_t *err) {
  int64_t ms = resv__mongo_max_time_ms(deadline);
  if (ms < 0)
    return resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed", what);
  if (ms > 0)
    resv__bw_int64(w, K("maxTimeMS"), ms);
  return true;
}

/* The documents are written with doc_bson.h straight from the request's
 * (pointer, length) strings: no NUL-terminated copies, no BCON (which
 * parsed its varargs token by token and strlen'd every key: half of a
 * reserve's client instructions, bench/README.md section 2), no libbson
 * appends (a generic varargs path per element). The bytes are the ones
 * BCON wrote, field for field. */

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

/* F(key), $or [ { owner: O }, { expires_at: { $lte: now } } ] and the
 * conformance predicate. A reserve's owner clause is two, so that a new
 * attempt never joins a reservation holding max_holds attempts (one
 * already there still matches): { owner: O, "holds.<max_holds - 1>":
 * { $exists: false } } (fewer holds, or none: confirmed) and
 * { owner: O, holds: A }. The full one then answers at the duplicate key. */
static void upsert_filter(resv__bw_t *w, const resv__mongo_t *m,
                          const resv_request_t *r, int64_t now) {
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
  }
  resv__bw_end(w, mine);
  size_t expired = resv__bw_doc(w, K("1"));
  size_t lte = resv__bw_doc(w, K("expires_at"));
  resv__bw_int64(w, K("$lte"), now);
  resv__bw_end(w, lte);
  resv__bw_end(w, expired);
  if (reserve) {
    size_t held = resv__bw_doc(w, K("2"));
    put_owner(w, K("owner"), &r->owner);
    put_str(w, K("holds"), &r->attempt);
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

bool resv__mongo_find_one(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const bson_t *filter, bool local, int64_t deadline,
                          bson_t *out, bool *found, bson_error_t *error) {
  resv__bw_t w;
  bson_t opts;
  mongoc_cursor_t *cursor;
  const bson_t *doc;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bool ok;

  resv__bw_init(&w);
  resv__bw_int64(&w, K("limit"), 1);
  resv__bw_bool(&w, K("singleBatch"), true);
  /* No time left: the smallest limit, so the server answers 50 at once. */
  resv__bw_int64(&w, K("maxTimeMS"), ms == 0 ? 0 : ms < 0 ? 1 : ms);
  if (local) {
    size_t rc = resv__bw_doc(&w, K("readConcern"));
    resv__bw_utf8(&w, K("level"), K("local"));
    resv__bw_end(&w, rc);
  }
  resv__bw_finish(&w, &opts);
  cursor = mongoc_collection_find_with_opts(coll, filter, &opts, m->primary);

  *found = mongoc_cursor_next(cursor, &doc);
  if (*found)
    bson_copy_to(doc, out);
  else
    bson_init(out);
  ok = !mongoc_cursor_error(cursor, error);
  mongoc_cursor_destroy(cursor);
  resv__bw_free(&w);
  return ok;
}

/* How read_key reads. */
typedef enum read_mode {
  /* get: by _id (docs/design.md section 5), so that whatever occupies the _id is
   * seen, a document whose tenant_id or key disagree with its _id
   * included, and one that is not a reservation answers RESV_EFORMAT
   * instead of absent; on a mongos by F(key), which goes to the key's one
   * shard. The URI's read concern applies. */
  READ_GET,
  /* After an abandon or release that matched nothing: as READ_GET, but
   * with read concern local from the primary whatever the URI says. */
  READ_NO_MATCH,
  /* After a duplicate key (docs/design.md section 12): read concern local from the
   * primary whatever the URI says (majority could miss the in-flight
   * holder, and the retry loop would spin on it), by _id; on a mongos by
   * the whole shard key, so the read goes to the one shard whose _id
   * index refused the write, and by _id alone only when that finds
   * nothing (what refused it may be a document whose tenant_id or key
   * disagree with its _id, which must answer RESV_EFORMAT). */
  READ_DUPLICATE
} read_mode_t;

static bool find_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_key_t *k, bool by_id_only, bool local,
                     int64_t deadline, bson_t *raw, bool *found,
                     resv_error_t *err) {
  resv__bw_t w;
  bson_t filter;
  bson_error_t error;
  bool ok;

  resv__bw_init(&w);
  if (by_id_only)
    put_id(&w, K("_id"), k);
  else
    put_f_key(&w, k);
  resv__bw_finish(&w, &filter);
  ok = resv__mongo_find_one(m, coll, &filter, local, deadline, raw, found,
                            &error);
  resv__bw_free(&w);
  return ok ||
         resv__mongo_fail(m, err, &error, deadline, "read reservation");
}

/* One find for the key's document and the format record together, by
 * _id {$in: [<key's _id>, "format"]} (the _id index, one round trip, as
 * the key's read alone): the key's document into raw (*found), and
 * whether the format record is there (*format_seen). A collection without
 * it was dropped while the store ran, or emptied, and must be set up
 * again. Only where _id alone is the read's filter (not on a mongos, where
 * the format record lives on a shard the key does not route to). */
static bool find_key_and_format(const resv__mongo_t *m,
                                mongoc_collection_t *coll, const resv_key_t *k,
                                bool local, int64_t deadline, bson_t *raw,
                                bool *found, bool *format_seen,
                                resv_error_t *err) {
  resv__bw_t fw, ow;
  bson_t filter, opts;
  bson_error_t error;
  mongoc_cursor_t *cursor;
  const bson_t *doc;
  bson_iter_t it;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bool ok;

  resv__bw_init(&fw);
  size_t id = resv__bw_doc(&fw, K("_id"));
  size_t in = resv__bw_array(&fw, K("$in"));
  put_id(&fw, K("0"), k);
  resv__bw_utf8(&fw, K("1"), K("format"));
  resv__bw_end(&fw, in);
  resv__bw_end(&fw, id);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&ow);
  resv__bw_int64(&ow, K("limit"), 2);
  resv__bw_bool(&ow, K("singleBatch"), true);
  resv__bw_int64(&ow, K("maxTimeMS"), ms == 0 ? 0 : ms < 0 ? 1 : ms);
  if (local) {
    size_t rc = resv__bw_doc(&ow, K("readConcern"));
    resv__bw_utf8(&ow, K("level"), K("local"));
    resv__bw_end(&ow, rc);
  }
  resv__bw_finish(&ow, &opts);
  cursor = mongoc_collection_find_with_opts(coll, &filter, &opts, m->primary);
  *found = *format_seen = false;
  bson_init(raw);
  while (mongoc_cursor_next(cursor, &doc)) {
    if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
      *format_seen = true;
    } else if (!*found) {
      bson_destroy(raw);
      bson_copy_to(doc, raw);
      *found = true;
    }
  }
  ok = !mongoc_cursor_error(cursor, &error);
  mongoc_cursor_destroy(cursor);
  resv__bw_free(&ow);
  resv__bw_free(&fw);
  return ok ||
         resv__mongo_fail(m, err, &error, deadline, "read reservation");
}

/* Reads the reservation of the request's key into *doc (see read_mode_t);
 * *found false when there is none. A document that is not a reservation
 * of this layout fails with RESV_EFORMAT. raw is initialised either way. */
static bool read_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_key_t *k, read_mode_t mode, int64_t deadline,
                     bson_t *raw, resv__mongo_doc_t *doc, bool *found,
                     bool *gone, resv_error_t *err) {
  bool local = mode != READ_GET;

  if (gone && !m->is_mongos) {
    bool format_seen;
    if (!find_key_and_format(m, coll, k, local, deadline, raw, found,
                             &format_seen, err))
      return false;
    *gone = !format_seen;
  } else if (!find_key(m, coll, k, !m->is_mongos, local, deadline, raw,
                       found, err)) {
    return false;
  }
  if (!*found && m->is_mongos && mode == READ_DUPLICATE) {
    bson_destroy(raw);
    if (!find_key(m, coll, k, true, local, deadline, raw, found, err))
      return false;
  }
  return !*found || resv__mongo_decode(raw, doc, err);
}

/* The answer of a reserve or confirm whose upsert returned doc: it must
 * now be this owner's. */
static bool answer_upserted(const bson_t *doc, const resv_request_t *r,
                            resv_answer_t *answer, resv_error_t *err) {
  resv__mongo_doc_t d;
  bool ok;

  if (!resv__mongo_decode(doc, &d, err))
    return false;
  if (!resv__mongo_doc_owned_by(&d, &r->owner) ||
      (r->op == RESV_OP_CONFIRM && d.state != RESV_STATE_CONFIRMED))
    ok = resv__fail(err, RESV_EFORMAT,
                    "the upsert returned a document that is not the "
                    "owner's reservation");
  else if (d.state == RESV_STATE_CONFIRMED)
    ok = resv__mongo_doc_answer(&d, RESV_CONFIRMED, false, answer, err);
  else
    ok = resv__mongo_doc_answer(&d, RESV_RESERVED, true, answer, err);
  resv__mongo_doc_free(&d);
  return ok;
}

/* True when the owner's live pending reservation doc has max_holds holds
 * and attempt is not one of them: the reserve's filter skipped it. */
static bool full_for(const resv__mongo_doc_t *doc, const resv_request_t *r,
                     int64_t now, int32_t max_holds) {
  if (r->op != RESV_OP_RESERVE || doc->state != RESV_STATE_PENDING ||
      doc->expires_at <= now || doc->nholds < (size_t)max_holds ||
      !resv__mongo_doc_owned_by(doc, &r->owner))
    return false;
  for (size_t i = 0; i < doc->nholds; i++)
    if (doc->holds[i].len == r->attempt.len &&
        memcmp(doc->holds[i].ptr, r->attempt.ptr, r->attempt.len) == 0)
      return false;
  return true;
}

/* The answer of a findAndModify with upsert that succeeded: the document
 * it returned, which must be the owner's. */
static bool answer_reply(const bson_t *reply, const resv_request_t *r,
                         const char *what, resv_answer_t *answer,
                         resv_error_t *err) {
  bson_iter_t it;

  if (bson_iter_init_find(&it, reply, "value") &&
      BSON_ITER_HOLDS_DOCUMENT(&it)) {
    uint32_t len;
    const uint8_t *data;
    bson_t value;
    bson_iter_document(&it, &len, &data);
    return bson_init_static(&value, data, len) &&
           answer_upserted(&value, r, answer, err);
  }
  return resv__fail(err, RESV_ESERVER,
                    "%s: findAndModify with upsert returned no document",
                    what);
}

/* After a duplicate key: reads the document that stood in the way and
 * answers conflict with its holder, or fails when it is the owner's
 * reservation with no room for the attempt. *again when nobody else
 * holds the key any more (it is ours, expired, or gone again): the
 * upsert is to run again. */
static bool after_duplicate(const resv__mongo_t *m, mongoc_collection_t *coll,
                            const resv_request_t *r, int64_t now,
                            int64_t deadline, resv_answer_t *answer,
                            bool *again, resv_error_t *err) {
  resv__mongo_doc_t held;
  bson_t raw;
  bool ok, found;

  ok = read_key(m, coll, &r->key, READ_DUPLICATE, deadline, &raw, &held,
                &found, NULL, err);
  if (ok && found) {
    if (!resv__mongo_doc_owned_by(&held, &r->owner) &&
        (held.state == RESV_STATE_CONFIRMED || held.expires_at > now))
      ok = resv__mongo_doc_answer(&held, RESV_CONFLICT, false, answer, err);
    else if (full_for(&held, r, now, m->max_holds))
      ok = resv__fail_holds_full(err, m->max_holds);
    else
      *again = true;
    resv__mongo_doc_free(&held);
  } else if (ok) {
    *again = true;
  }
  bson_destroy(&raw);
  return ok;
}

/* One findAndModify with upsert, with the time left before deadline. It
 * answers, or fails, or meets a duplicate key, which after_duplicate
 * reads: *again when the upsert is to run again. */
static bool try_upsert(const resv__mongo_t *m, mongoc_collection_t *coll,
                       const bson_t *filter,
                       mongoc_find_and_modify_opts_t *opts,
                       const resv_request_t *r, int64_t now, int64_t deadline,
                       const char *what, resv_answer_t *answer, bool *again,
                       resv_error_t *err) {
  int64_t ms = resv__mongo_max_time_ms(deadline);
  bson_t reply;
  bson_error_t error;
  bool ok, duplicate = false;

  *again = false;
  if (ms < 0)
    return resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed", what);
  mongoc_find_and_modify_opts_set_max_time_ms(opts, (uint32_t)ms);
  if (mongoc_collection_find_and_modify_with_opts(coll, filter, opts, &reply,
                                                  &error))
    ok = answer_reply(&reply, r, what, answer, err);
  else if (!resv__mongo_is_duplicate(&error))
    ok = resv__mongo_fail_reply(m, err, &error, &reply, deadline, what);
  else
    ok = duplicate = true;
  bson_destroy(&reply);
  if (!duplicate)
    return ok;
  resv__stats_count(m->stats, RESV__STAT_DUPLICATE_RETRY);
  return after_duplicate(m, coll, r, now, deadline, answer, again, err);
}

/* reserve and confirm: the upsert, then the duplicate-key path, at most
 * UPSERT_TRIES times and while time is left. */
static bool upsert(const resv__mongo_t *m, mongoc_collection_t *coll,
                   const resv_request_t *r, int64_t now, int64_t deadline,
                   resv_answer_t *answer, resv_error_t *err) {
  const char *what = r->op == RESV_OP_RESERVE ? "reserve" : "confirm";
  int64_t expires = 0;
  if (r->op == RESV_OP_RESERVE && !resv__expiry(now, r->ttl_ms, &expires, err))
    return false;
  mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
  resv__bw_t fw, pw;
  bson_t filter, pipeline;
  bool ok = true, again = true;

  resv__bw_init(&fw);
  upsert_filter(&fw, m, r, now);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&pw);
  if (r->op == RESV_OP_RESERVE)
    reserve_pipeline(&pw, r, now, expires);
  else
    confirm_pipeline(&pw, r, r->version);
  resv__bw_finish(&pw, &pipeline);
  mongoc_find_and_modify_opts_set_update(opts, &pipeline);
  mongoc_find_and_modify_opts_set_flags(
      opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);

  for (int tries = 1; ok && again; tries++) {
    ok = try_upsert(m, coll, &filter, opts, r, now, deadline, what, answer,
                    &again, err);
    if (ok && again && tries >= UPSERT_TRIES)
      ok = resv__fail_server(err, RESV_ESERVER, 11000,
                             "%s: the key kept changing hands (duplicate key "
                             "%d times)",
                             what, UPSERT_TRIES);
    else if (ok && again && resv__monotonic_ms() >= deadline)
      ok = resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed", what);
  }
  mongoc_find_and_modify_opts_destroy(opts);
  resv__bw_free(&pw);
  resv__bw_free(&fw);
  return ok;
}

static int64_t reply_count(const bson_t *reply, const char *field) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, field) && BSON_ITER_HOLDS_NUMBER(&it))
    return bson_iter_as_int64(&it);
  return 0;
}

/* After a write of the owner's that matched nothing: RESV_ABSENT, unless
 * what sits at the key is not a reservation of this layout (the write's
 * $expr kept off it), which is RESV_EFORMAT. The one extra read is paid
 * only on this path; the owner's abandon or release of its reservation
 * costs the writes alone. */
static bool absent_or_format(const resv__mongo_t *m, mongoc_collection_t *coll,
                             const resv_key_t *k, int64_t deadline,
                             resv_answer_t *answer, bool *gone,
                             resv_error_t *err) {
  resv__mongo_doc_t d;
  bson_t raw;
  bool ok, found;

  ok = read_key(m, coll, k, READ_NO_MATCH, deadline, &raw, &d, &found, gone,
                err);
  if (ok && found)
    resv__mongo_doc_free(&d);
  bson_destroy(&raw);
  return ok && resv__answer_status(answer, RESV_ABSENT, err);
}

/* What abandon's pull found: the document as the $pull left it (the
 * findAndModify's post-image, projected to expires_at and holds). */
typedef enum pulled {
  PULLED_NOTHING, /* no document of this owner (or none of this layout) */
  PULLED_KEPT,    /* confirmed, or other holds left: the reservation stays */
  PULLED_LAST     /* pending, and no hold left: the delete's to take */
} pulled_t;

/* The post-image value of the pull (a document, or null). */
static pulled_t pulled_state(const bson_t *value) {
  bson_iter_t it;
  bool confirmed = false, held = false;

  bson_iter_init(&it, value);
  while (bson_iter_next(&it)) {
    const char *name = bson_iter_key(&it);
    if (strcmp(name, "expires_at") == 0) {
      confirmed = BSON_ITER_HOLDS_NULL(&it);
    } else if (strcmp(name, "holds") == 0 && BSON_ITER_HOLDS_ARRAY(&it)) {
      bson_iter_t child;
      held = bson_iter_recurse(&it, &child) && bson_iter_next(&child);
    }
  }
  return confirmed || held ? PULLED_KEPT : PULLED_LAST;
}

/* abandon's first write, the pull: { $pull: { holds: A } } where F(key),
 * owner and conforming, a findAndModify returning the document as the
 * pull left it (projected to expires_at and holds); *pulled says what
 * that is. */
static bool pull_hold(const resv__mongo_t *m, mongoc_collection_t *coll,
                      const resv_request_t *r, int64_t deadline,
                      pulled_t *pulled, resv_error_t *err) {
  mongoc_find_and_modify_opts_t *fam = mongoc_find_and_modify_opts_new();
  resv__bw_t fw, uw, pw;
  bson_t filter, update, fields, reply;
  bson_iter_t it;
  bson_error_t error;
  int64_t ms = resv__mongo_max_time_ms(deadline);
  size_t doc;
  bool ok;

  *pulled = PULLED_NOTHING;
  resv__bw_init(&fw);
  resv__mongo_owner_filter(&fw, m, r, false);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&uw);
  doc = resv__bw_doc(&uw, K("$pull"));
  put_str(&uw, K("holds"), &r->attempt);
  resv__bw_end(&uw, doc);
  resv__bw_finish(&uw, &update);
  /* { _id: 0, expires_at: 1, holds: 1 }: all the answer needs */
  resv__bw_init(&pw);
  resv__bw_int32(&pw, K("_id"), 0);
  resv__bw_int32(&pw, K("expires_at"), 1);
  resv__bw_int32(&pw, K("holds"), 1);
  resv__bw_finish(&pw, &fields);

  if (ms < 0) {
    ok = resv__fail(err, RESV_ETIMEOUT, "abandon: deadline passed");
    goto done;
  }
  mongoc_find_and_modify_opts_set_update(fam, &update);
  mongoc_find_and_modify_opts_set_fields(fam, &fields);
  mongoc_find_and_modify_opts_set_flags(fam, MONGOC_FIND_AND_MODIFY_RETURN_NEW);
  mongoc_find_and_modify_opts_set_max_time_ms(fam, (uint32_t)ms);
  ok = mongoc_collection_find_and_modify_with_opts(coll, &filter, fam, &reply,
                                                   &error);
  if (!ok) {
    resv__mongo_fail_reply(m, err, &error, &reply, deadline, "abandon");
  } else if (bson_iter_init_find(&it, &reply, "value") &&
             BSON_ITER_HOLDS_DOCUMENT(&it)) {
    uint32_t len;
    const uint8_t *data;
    bson_t value;
    bson_iter_document(&it, &len, &data);
    if (bson_init_static(&value, data, len))
      *pulled = pulled_state(&value);
    else
      ok = resv__fail(err, RESV_ESERVER,
                      "abandon: findAndModify returned a malformed document");
  }
  bson_destroy(&reply);
done:
  mongoc_find_and_modify_opts_destroy(fam);
  resv__bw_free(&pw);
  resv__bw_free(&uw);
  resv__bw_free(&fw);
  return ok;
}

/* abandon's second write: delete where F(key), owner, expires_at not
 * null, holds empty and conforming, with the time left. */
static bool delete_emptied(const resv__mongo_t *m, mongoc_collection_t *coll,
                           const resv_request_t *r, int64_t deadline,
                           resv_error_t *err) {
  resv__bw_t fw, ow;
  bson_t emptied, reply, opts;
  bson_error_t error;
  bool ok;

  resv__bw_init(&fw);
  resv__bw_init(&ow);
  ok = put_max_time(&ow, deadline, "abandon", err);
  if (ok) {
    resv__bw_finish(&ow, &opts);
    resv__mongo_owner_filter(&fw, m, r, true);
    resv__bw_finish(&fw, &emptied);
    ok = mongoc_collection_delete_one(coll, &emptied, &opts, &reply, &error);
    if (!ok)
      resv__mongo_fail_reply(m, err, &error, &reply, deadline, "abandon");
    bson_destroy(&reply);
  }
  resv__bw_free(&ow);
  resv__bw_free(&fw);
  return ok;
}

/* abandon: the two writes of docs/design.md section 5, in its order. The
 * answer is decided at the first, the pull, which returns the document as
 * the pull left it, so it says what the reservation was at the instant
 * the hold went (abandon's linearization point):
 *
 *   - no document of this owner: absent (or format, absent_or_format);
 *   - confirmed, or other holds left: kept, true at that instant;
 *   - pending without holds: abandoned, whatever the delete then finds.
 *     The delete removes it, unless someone changed it in between (the
 *     owner's other attempt joined it, or confirmed and released it,
 *     another owner took it over once expired, a sweep deleted it).
 *     Abandoned is still the answer: the memory store, which abandons in
 *     one step, deletes it at the pull's instant, and what came after
 *     reads as if it came after that delete (a join then reads as a fresh
 *     reservation, with the later of the two expiries). An answer taken
 *     from the delete would say kept for a reservation already gone
 *     (model/README.md, "What SPIN found").
 *
 * The delete is sent after every pull that matched, kept ones included,
 * as docs/design.md section 5 writes it: it cannot change the answer (a
 * pending reservation without holds that it finds there was emptied by
 * another abandon's pull, which answers abandoned itself). Its failure is
 * the call's error either way. A pull that matched nothing sends no
 * delete: nothing of the owner's was there for it, and the read of
 * absent_or_format follows instead, which sets *gone when it finds the
 * collection without its format record. */
static bool abandon(const resv__mongo_t *m, mongoc_collection_t *coll,
                    const resv_request_t *r, int64_t deadline,
                    resv_answer_t *answer, bool *gone, resv_error_t *err) {
  pulled_t pulled;

  if (!pull_hold(m, coll, r, deadline, &pulled, err))
    return false;
  if (pulled == PULLED_NOTHING)
    return absent_or_format(m, coll, &r->key, deadline, answer, gone, err);
  if (!delete_emptied(m, coll, r, deadline, err))
    return false;
  return resv__answer_status(
      answer, pulled == PULLED_LAST ? RESV_ABANDONED : RESV_KEPT, err);
}

/* release: delete our reservation, whatever its state. */
static bool release(const resv__mongo_t *m, mongoc_collection_t *coll,
                    const resv_request_t *r, int64_t deadline,
                    resv_answer_t *answer, bool *gone, resv_error_t *err) {
  resv__bw_t w, ow;
  bson_t filter, reply, opts;
  bson_error_t error;
  bool ok;

  resv__bw_init(&ow);
  if (!put_max_time(&ow, deadline, "release", err)) {
    resv__bw_free(&ow);
    return false;
  }
  resv__bw_finish(&ow, &opts);
  resv__bw_init(&w);
  put_f_key(&w, &r->key);
  put_owner(&w, K("owner"), &r->owner);
  put_conforms(&w, m);
  resv__bw_finish(&w, &filter);
  ok = mongoc_collection_delete_one(coll, &filter, &opts, &reply, &error);
  if (!ok)
    resv__mongo_fail_reply(m, err, &error, &reply, deadline, "release");
  else if (!reply_count(&reply, "deletedCount"))
    ok = absent_or_format(m, coll, &r->key, deadline, answer, gone, err);
  else
    ok = resv__answer_status(answer, RESV_RELEASED, err);
  bson_destroy(&reply);
  resv__bw_free(&w);
  resv__bw_free(&ow);
  return ok;
}

static bool get(const resv__mongo_t *m, mongoc_collection_t *coll,
                const resv_request_t *r, int64_t now, int64_t deadline,
                resv_answer_t *answer, bool *gone, resv_error_t *err) {
  resv__mongo_doc_t d;
  bson_t raw;
  bool ok, found;

  ok = read_key(m, coll, &r->key, READ_GET, deadline, &raw, &d, &found, gone,
                err);
  if (ok && !found) {
    ok = resv__answer_status(answer, RESV_ABSENT, err);
  } else if (ok) {
    int32_t status = d.state == RESV_STATE_CONFIRMED ? RESV_CONFIRMED
                     : d.expires_at > now            ? RESV_PENDING
                                                     : RESV_EXPIRED;
    ok = resv__mongo_doc_answer(&d, status, true, answer, err);
    resv__mongo_doc_free(&d);
  }
  bson_destroy(&raw);
  return ok;
}

/* sweep: one delete of every conforming pending reservation expired at
 * or before now - grace. { expires_at: { $lte: L } } never matches null
 * or a missing field (a confirmed one), the conformance predicate keeps
 * every document that is not a format-1 reservation (the format record
 * included) out, and the server checks the filter again on each document
 * as it deletes it, so one taken over in between stays. */
static bool sweep(const resv__mongo_t *m, mongoc_collection_t *coll,
                  int64_t now, int64_t deadline, resv_answer_t *answer,
                  resv_error_t *err) {
  resv__bw_t w, ow;
  bson_t filter, reply, opts;
  bson_error_t error;
  bool ok;

  resv__bw_init(&ow);
  if (!put_max_time(&ow, deadline, "sweep", err)) {
    resv__bw_free(&ow);
    return false;
  }
  resv__bw_finish(&ow, &opts);
  resv__bw_init(&w);
  size_t lte = resv__bw_doc(&w, K("expires_at"));
  resv__bw_int64(&w, K("$lte"), resv__add_ms_sat(now, -m->grace_ms));
  resv__bw_end(&w, lte);
  put_conforms(&w, m);
  resv__bw_finish(&w, &filter);
  ok = mongoc_collection_delete_many(coll, &filter, &opts, &reply, &error);
  if (!ok) {
    resv__mongo_fail_reply(m, err, &error, &reply, deadline, "sweep");
  } else if ((ok = resv__answer_status(answer, RESV_SWEPT, err))) {
    answer->count = reply_count(&reply, "deletedCount");
  }
  bson_destroy(&reply);
  resv__bw_free(&w);
  resv__bw_free(&ow);
  return ok;
}

bool resv__mongo_run(resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_request_t *req, int64_t now,
                     int64_t deadline, resv_answer_t *answer, bool *gone,
                     resv_error_t *err) {
  switch (req->op) {
  case RESV_OP_RESERVE:
  case RESV_OP_CONFIRM:
    return upsert(m, coll, req, now, deadline, answer, err);
  case RESV_OP_ABANDON:
    return abandon(m, coll, req, deadline, answer, gone, err);
  case RESV_OP_RELEASE:
    return release(m, coll, req, deadline, answer, gone, err);
  case RESV_OP_GET:
    return get(m, coll, req, now, deadline, answer, gone, err);
  case RESV_OP_SWEEP:
    return sweep(m, coll, now, deadline, answer, err);
  case RESV_OP_RESERVE_ALL:
  case RESV_OP_CONFIRM_ALL:
  case RESV_OP_ABANDON_ALL:
    return resv__mongo_run_all(m, coll, req, now, deadline, answer, gone, err);
  default:
    return resv__fail(err, RESV_EINVALID, "op: unknown operation %d",
                      (int)req->op);
  }
}

/* The pieces mongo_all.c sends in its batches, as the single-key calls
 * above write them (mongo_internal.h). */
void resv__mongo_put_id(resv__bw_t *w, const char *key, size_t key_len,
                        const resv_key_t *k) {
  put_id(w, key, key_len, k);
}

void resv__mongo_upsert_filter(resv__bw_t *w, const resv__mongo_t *m,
                               const resv_request_t *r, int64_t now) {
  upsert_filter(w, m, r, now);
}

void resv__mongo_upsert_pipeline(resv__bw_t *w, const resv_request_t *r,
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
