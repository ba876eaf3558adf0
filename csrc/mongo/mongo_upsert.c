/* mongo_upsert.c: reserve and confirm, ONE findAndModify each
 * (docs/design.md section 5): the filter and pipeline of mongo_build.c,
 * upsert, returning the new document. The filter lets through the
 * owner's own reservation and any expired pending one; the pipeline
 * decides what the document becomes. A key held by someone else does not
 * match, so the upsert tries to insert it and fails on the _id index with
 * a duplicate key: that is the conflict path, which reads the document
 * and answers conflict with its holder, or, when nobody else holds it any
 * more (it is ours, expired, or gone again), runs the upsert again, a
 * bounded number of times. A document that is not a format-1 reservation
 * matches no filter either, the owner's included: the upsert meets it on
 * the _id index and the duplicate-key read answers RESV_EFORMAT.
 *
 * It must not write anything but the upsert, nor run it again past
 * UPSERT_TRIES or the deadline. */
#include "mongo_internal.h"
#include "doc_bson.h"

#include <string.h>

/* How many times reserve/confirm run their upsert when a duplicate key
 * turns out not to be a conflict (the key was freed in between). */
#define UPSERT_TRIES 5

/* How many holds the in-place read of a returned document takes: more
 * (or anything it does not take) go to resv__doc_decode. */
#define INPLACE_HOLDS 8

/* The answer of a reserve or confirm whose upsert returned the document
 * data[0..len): it must now be this owner's. */
static bool answer_upserted(const uint8_t *data, uint32_t len, const resv_request_t *r,
                            resv_answer_t *answer, resv_error_t *err) {
  resv__doc_t d;
  resv_str_t room[INPLACE_HOLDS];
  bson_t doc;
  bool ok, inplace = resv__doc_decode_inplace(data, len, &d, room, INPLACE_HOLDS);

  if (!inplace && (!bson_init_static(&doc, data, len) || !resv__doc_decode(&doc, &d, err)))
    return false;
  if (!resv__doc_owned_by(&d, &r->owner) ||
      (r->op == RESV_OP_CONFIRM && d.state != RESV_STATE_CONFIRMED))
    ok = resv__fail(err, RESV_EFORMAT,
                    "the upsert returned a document that is not the "
                    "owner's reservation");
  else if (d.state == RESV_STATE_CONFIRMED)
    ok = resv__doc_answer(&d, RESV_CONFIRMED, false, answer, err);
  else
    ok = resv__doc_answer(&d, RESV_RESERVED, true, answer, err);
  if (!inplace)
    resv__doc_free(&d);
  return ok;
}

/* True when the owner's live pending reservation doc has max_holds holds
 * and attempt is not one of them: the reserve's filter skipped it. */
static bool full_for(const resv__doc_t *doc, const resv_request_t *r,
                     int64_t now, int32_t max_holds) {
  if (r->op != RESV_OP_RESERVE || doc->state != RESV_STATE_PENDING ||
      doc->expires_at <= now || doc->nholds < (size_t)max_holds ||
      !resv__doc_owned_by(doc, &r->owner))
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
    bson_iter_document(&it, &len, &data);
    return answer_upserted(data, len, r, answer, err);
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
  resv__doc_t held;
  bson_t raw;
  bool ok, found;

  ok = resv__mongo_read_key(m, coll, &r->key, RESV__READ_DUPLICATE, deadline,
                            &raw, &held, &found, NULL, err);
  if (ok && found) {
    if (!resv__doc_owned_by(&held, &r->owner) &&
        (held.state == RESV_STATE_CONFIRMED || held.expires_at > now))
      ok = resv__doc_answer(&held, RESV_CONFLICT, false, answer, err);
    else if (full_for(&held, r, now, m->max_holds))
      ok = resv__fail_holds_full(err, m->max_holds);
    else
      *again = true;
    resv__doc_free(&held);
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

bool resv__mongo_upsert(const resv__mongo_t *m, mongoc_collection_t *coll,
                        mongoc_find_and_modify_opts_t **kept, const resv_request_t *r,
                        int64_t now, int64_t deadline, resv_answer_t *answer,
                        resv_error_t *err) {
  const char *what = r->op == RESV_OP_RESERVE ? "reserve" : "confirm";
  int64_t expires = 0;
  if (r->op == RESV_OP_RESERVE && !resv__expiry(now, r->ttl_ms, &expires, err))
    return false;
  mongoc_find_and_modify_opts_t *opts =
      kept && *kept ? *kept : mongoc_find_and_modify_opts_new();
  resv__bw_t fw, pw;
  bson_t filter, pipeline;
  bool ok = true, again = true;

  resv__bw_init(&fw);
  resv__mongo_upsert_filter(&fw, m, r, now, false);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&pw);
  resv__mongo_upsert_pipeline(&pw, m, r, now, expires);
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
  if (kept)
    *kept = opts;
  else
    mongoc_find_and_modify_opts_destroy(opts);
  resv__bw_free(&pw);
  resv__bw_free(&fw);
  return ok;
}

