/* mongo_ops.c: the five operations as MongoDB commands (SPEC section 5).
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
 * The pipeline avoids the expression traps of SPEC section 10: "confirmed
 * by this owner" is owner equality and expires_at equal to null (an
 * upserted document has no expires_at, and missing is not null under
 * $eq); "live pending of this owner" is owner equality and
 * $gt [expires_at, now] ($lte would be true for null). Every value the
 * caller gave is wrapped in $literal, so an attempt or id that starts with
 * "$" is data, not a field path. now is the store's clock, written in as
 * a literal: the server's clock is never read.
 *
 * abandon is two writes (pull the hold where F(key) and owner; delete
 * where F(key), owner, expires_at not null and holds empty), get one read
 * from the primary, release one delete. Every write's filter names _id,
 * tenant_id and key, so on a sharded cluster it routes to one shard. */
#include "mongo_internal.h"

#include <string.h>

/* How many times reserve/confirm run their upsert when a duplicate key
 * turns out not to be a conflict (the key was freed in between). */
#define UPSERT_TRIES 5

/* The request's strings as NUL-terminated copies, for BCON. Validation
 * has ruled out NUL bytes, so a copy means the same string. */
typedef struct strs {
  char *t, *n, *k, *ot, *oid, *attempt;
} strs_t;

static void strs_init(strs_t *s, const resv_request_t *r) {
  s->t = bson_strndup(r->key.tenant.ptr ? r->key.tenant.ptr : "",
                      r->key.tenant.len);
  s->n = bson_strndup(r->key.ns.ptr ? r->key.ns.ptr : "", r->key.ns.len);
  s->k = bson_strndup(r->key.key.ptr ? r->key.key.ptr : "", r->key.key.len);
  s->ot = bson_strndup(r->owner.tenant.ptr ? r->owner.tenant.ptr : "",
                       r->owner.tenant.len);
  s->oid = bson_strndup(r->owner.id.ptr ? r->owner.id.ptr : "",
                        r->owner.id.len);
  s->attempt =
      bson_strndup(r->attempt.ptr ? r->attempt.ptr : "", r->attempt.len);
}

static void strs_free(strs_t *s) {
  bson_free(s->t);
  bson_free(s->n);
  bson_free(s->k);
  bson_free(s->ot);
  bson_free(s->oid);
  bson_free(s->attempt);
}

/* BCON fragments. F(key) and the owner, as a query writes them: */
#define F_KEY(s)                                                              \
  "_id", "{", "t", BCON_UTF8((s)->t), "n", BCON_UTF8((s)->n), "k",            \
      BCON_UTF8((s)->k), "}", "tenant_id", BCON_UTF8((s)->t), "key",          \
      BCON_UTF8((s)->k)
#define OWNER(s) "{", "tenant_id", BCON_UTF8((s)->ot), "id", BCON_UTF8((s)->oid), "}"
/* ... and as a pipeline writes them, each value a $literal: */
#define LIT(v) "{", "$literal", BCON_UTF8(v), "}"
#define LIT_OWNER(s) "{", "$literal", OWNER(s), "}"
#define HEAD(s)                                                               \
  "_id", "{", "$literal", "{", "t", BCON_UTF8((s)->t), "n",                   \
      BCON_UTF8((s)->n), "k", BCON_UTF8((s)->k), "}", "}", "tenant_id",       \
      LIT((s)->t), "key", LIT((s)->k), "owner", LIT_OWNER(s)
#define IS_OURS(s) "{", "$eq", "[", "$owner", LIT_OWNER(s), "]", "}"
#define CONFIRMED_OURS(s)                                                     \
  "{", "$and", "[", IS_OURS(s), "{", "$eq", "[", "$expires_at", BCON_NULL,    \
      "]", "}", "]", "}"
#define LIVE_OURS(s, now)                                                     \
  "{", "$and", "[", IS_OURS(s), "{", "$gt", "[", "$expires_at",               \
      BCON_INT64(now), "]", "}", "]", "}"

static bson_t *upsert_filter(const strs_t *s, int64_t now) {
  return BCON_NEW(F_KEY(s), "$or", "[", "{", "owner", OWNER(s), "}", "{",
                  "expires_at", "{", "$lte", BCON_INT64(now), "}", "}", "]");
}

/* reserve: keep our confirmed one; join our live pending one (add the
 * attempt unless there, expiry the later one); otherwise start afresh. */
static bson_t *reserve_pipeline(const strs_t *s, int64_t now,
                                int64_t expires) {
  return BCON_NEW(
      "0", "{", "$replaceWith", "{", "$cond", "{",
        "if", CONFIRMED_OURS(s),
        "then", BCON_UTF8("$$ROOT"),
        "else", "{", "$cond", "{",
          "if", LIVE_OURS(s, now),
          "then", "{", HEAD(s),
            "expires_at", "{", "$max", "[", "$expires_at", BCON_INT64(expires),
              "]", "}",
            "holds", "{", "$cond", "{",
              "if", "{", "$in", "[", LIT(s->attempt),
                "{", "$ifNull", "[", "$holds", "[", "]", "]", "}", "]", "}",
              "then", "$holds",
              "else", "{", "$concatArrays", "[",
                "{", "$ifNull", "[", "$holds", "[", "]", "]", "}",
                "[", LIT(s->attempt), "]", "]", "}",
            "}", "}",
          "}",
          "else", "{", HEAD(s), "expires_at", BCON_INT64(expires),
            "holds", "{", "$literal", "[", BCON_UTF8(s->attempt), "]", "}",
          "}",
        "}", "}",
      "}", "}", "}");
}

/* confirm: ours, confirmed, version the larger of the stored one (when it
 * was already our confirmed one) and the given one; no holds. */
static bson_t *confirm_pipeline(const strs_t *s, int64_t now,
                                int64_t version) {
  (void)now;
  return BCON_NEW(
      "0", "{", "$replaceWith", "{", HEAD(s), "expires_at", BCON_NULL,
        "version", "{", "$cond", "{",
          "if", CONFIRMED_OURS(s),
          "then", "{", "$max", "[", "$version", BCON_INT64(version), "]", "}",
          "else", BCON_INT64(version),
        "}", "}",
      "}", "}");
}

bool resv__mongo_find_one(const resv__mongo_t *m, mongoc_collection_t *coll,
                          const bson_t *filter, bson_t *out, bool *found,
                          bson_error_t *error) {
  bson_t *opts = BCON_NEW("limit", BCON_INT64(1), "singleBatch", BCON_BOOL(true));
  mongoc_cursor_t *cursor =
      mongoc_collection_find_with_opts(coll, filter, opts, m->primary);
  const bson_t *doc;
  bool ok;

  *found = mongoc_cursor_next(cursor, &doc);
  if (*found)
    bson_copy_to(doc, out);
  else
    bson_init(out);
  ok = !mongoc_cursor_error(cursor, error);
  mongoc_cursor_destroy(cursor);
  bson_destroy(opts);
  return ok;
}

/* Reads the reservation of the request's key into *doc; *found false when
 * there is none. get reads by F(key), which a mongos sends to the key's one
 * shard; the duplicate-key path reads by _id alone, so that whatever
 * occupies the _id is seen, and a document that is not a reservation of
 * this layout answers RESV_EFORMAT instead of being retried against. */
static bool read_key(const resv__mongo_t *m, mongoc_collection_t *coll,
                     const strs_t *s, bool by_id_only, int64_t deadline,
                     bson_t *raw, resv__mongo_doc_t *doc, bool *found,
                     resv_error_t *err) {
  bson_t *filter =
      by_id_only ? BCON_NEW("_id", "{", "t", BCON_UTF8(s->t), "n",
                            BCON_UTF8(s->n), "k", BCON_UTF8(s->k), "}")
                 : BCON_NEW(F_KEY(s));
  bson_error_t error;
  bool ok = resv__mongo_find_one(m, coll, filter, raw, found, &error);

  bson_destroy(filter);
  if (!ok)
    return resv__mongo_fail(m, err, &error, deadline, "read reservation");
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

/* reserve and confirm: the upsert, then the duplicate-key path. */
static bool upsert(const resv__mongo_t *m, mongoc_collection_t *coll,
                   const resv_request_t *r, int64_t now, int64_t deadline,
                   resv_answer_t *answer, resv_error_t *err) {
  const char *what = r->op == RESV_OP_RESERVE ? "reserve" : "confirm";
  mongoc_find_and_modify_opts_t *opts = mongoc_find_and_modify_opts_new();
  bson_t *filter, *pipeline;
  bson_error_t error;
  bool ok = false;
  strs_t s;

  strs_init(&s, r);
  filter = upsert_filter(&s, now);
  pipeline = r->op == RESV_OP_RESERVE
                 ? reserve_pipeline(&s, now, now + r->ttl_ms)
                 : confirm_pipeline(&s, now, r->version);
  mongoc_find_and_modify_opts_set_update(opts, pipeline);
  mongoc_find_and_modify_opts_set_flags(
      opts, MONGOC_FIND_AND_MODIFY_UPSERT | MONGOC_FIND_AND_MODIFY_RETURN_NEW);

  for (int tries = 0;; tries++) {
    bson_t reply, raw;
    bson_iter_t it;
    resv__mongo_doc_t held;
    bool found;

    if (mongoc_collection_find_and_modify_with_opts(coll, filter, opts,
                                                    &reply, &error)) {
      if (bson_iter_init_find(&it, &reply, "value") &&
          BSON_ITER_HOLDS_DOCUMENT(&it)) {
        uint32_t len;
        const uint8_t *data;
        bson_t value;
        bson_iter_document(&it, &len, &data);
        ok = bson_init_static(&value, data, len) &&
             answer_upserted(&value, r, answer, err);
      } else {
        ok = resv__fail(err, RESV_ESERVER,
                        "%s: findAndModify with upsert returned no document",
                        what);
      }
      bson_destroy(&reply);
      break;
    }
    bson_destroy(&reply);
    if (!resv__mongo_is_duplicate(&error)) {
      ok = resv__mongo_fail(m, err, &error, deadline, what);
      break;
    }
    /* Someone else's document stood in the way. Whose? */
    if (!read_key(m, coll, &s, true, deadline, &raw, &held, &found, err)) {
      bson_destroy(&raw);
      break;
    }
    if (found && !resv__mongo_doc_owned_by(&held, &r->owner) &&
        (held.state == RESV_STATE_CONFIRMED || held.expires_at > now)) {
      ok = resv__mongo_doc_answer(&held, RESV_CONFLICT, false, answer, err);
      resv__mongo_doc_free(&held);
      bson_destroy(&raw);
      break;
    }
    if (found)
      resv__mongo_doc_free(&held);
    bson_destroy(&raw);
    if (tries + 1 >= UPSERT_TRIES) {
      ok = resv__fail_server(err, RESV_ESERVER, 11000,
                             "%s: the key kept changing hands (duplicate key "
                             "%d times)",
                             what, UPSERT_TRIES);
      break;
    }
    if (resv__monotonic_ms() >= deadline) {
      ok = resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed", what);
      break;
    }
  }
  mongoc_find_and_modify_opts_destroy(opts);
  bson_destroy(pipeline);
  bson_destroy(filter);
  strs_free(&s);
  return ok;
}

static int64_t reply_count(const bson_t *reply, const char *field) {
  bson_iter_t it;
  if (bson_iter_init_find(&it, reply, field) && BSON_ITER_HOLDS_NUMBER(&it))
    return bson_iter_as_int64(&it);
  return 0;
}

/* abandon: pull our hold, then delete our pending reservation if that
 * left it without holds. */
static bool abandon(const resv__mongo_t *m, mongoc_collection_t *coll,
                    const resv_request_t *r, int64_t deadline,
                    resv_answer_t *answer, resv_error_t *err) {
  bson_t *filter, *update, *gone, reply;
  bson_error_t error;
  int64_t matched = 0, deleted = 0;
  bool ok;
  strs_t s;

  strs_init(&s, r);
  filter = BCON_NEW(F_KEY(&s), "owner", OWNER(&s));
  update = BCON_NEW("$pull", "{", "holds", BCON_UTF8(s.attempt), "}");
  gone = BCON_NEW(F_KEY(&s), "owner", OWNER(&s), "expires_at", "{", "$ne",
                  BCON_NULL, "}", "holds", "{", "$size", BCON_INT32(0), "}");
  ok = mongoc_collection_update_one(coll, filter, update, NULL, &reply, &error);
  if (ok)
    matched = reply_count(&reply, "matchedCount");
  bson_destroy(&reply);
  if (ok) {
    ok = mongoc_collection_delete_one(coll, gone, NULL, &reply, &error);
    if (ok)
      deleted = reply_count(&reply, "deletedCount");
    bson_destroy(&reply);
  }
  if (!ok)
    ok = resv__mongo_fail(m, err, &error, deadline, "abandon");
  else
    ok = resv__answer_status(answer,
                             deleted   ? RESV_ABANDONED
                             : matched ? RESV_KEPT
                                       : RESV_ABSENT,
                             err);
  bson_destroy(gone);
  bson_destroy(update);
  bson_destroy(filter);
  strs_free(&s);
  return ok;
}

/* release: delete our reservation, whatever its state. */
static bool release(const resv__mongo_t *m, mongoc_collection_t *coll,
                    const resv_request_t *r, int64_t deadline,
                    resv_answer_t *answer, resv_error_t *err) {
  bson_t *filter, reply;
  bson_error_t error;
  bool ok;
  strs_t s;

  strs_init(&s, r);
  filter = BCON_NEW(F_KEY(&s), "owner", OWNER(&s));
  ok = mongoc_collection_delete_one(coll, filter, NULL, &reply, &error);
  if (!ok)
    ok = resv__mongo_fail(m, err, &error, deadline, "release");
  else
    ok = resv__answer_status(answer,
                             reply_count(&reply, "deletedCount")
                                 ? RESV_RELEASED
                                 : RESV_ABSENT,
                             err);
  bson_destroy(&reply);
  bson_destroy(filter);
  strs_free(&s);
  return ok;
}

static bool get(const resv__mongo_t *m, mongoc_collection_t *coll,
                const resv_request_t *r, int64_t now, int64_t deadline,
                resv_answer_t *answer, resv_error_t *err) {
  resv__mongo_doc_t d;
  bson_t raw;
  bool ok, found;
  strs_t s;

  strs_init(&s, r);
  ok = read_key(m, coll, &s, false, deadline, &raw, &d, &found, err);
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
  strs_free(&s);
  return ok;
}

bool resv__mongo_run(resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_request_t *req, int64_t now,
                     int64_t deadline, resv_answer_t *answer,
                     resv_error_t *err) {
  switch (req->op) {
  case RESV_OP_RESERVE:
  case RESV_OP_CONFIRM:
    return upsert(m, coll, req, now, deadline, answer, err);
  case RESV_OP_ABANDON:
    return abandon(m, coll, req, deadline, answer, err);
  case RESV_OP_RELEASE:
    return release(m, coll, req, deadline, answer, err);
  case RESV_OP_GET:
    return get(m, coll, req, now, deadline, answer, err);
  default:
    return resv__fail(err, RESV_EINVALID, "op: unknown operation %d",
                      (int)req->op);
  }
}
