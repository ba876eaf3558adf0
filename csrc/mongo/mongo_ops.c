/* mongo_ops.c: the five operations as MongoDB commands (docs/design.md
 * section 5), dispatched by resv__mongo_run: reserve and confirm are
 * mongo_upsert.c's; abandon, release, get and sweep are here, with the
 * maxTimeMS every command carries.
 *
 * abandon is two writes (pull the hold where F(key) and owner, a
 * findAndModify returning what the pull left, which decides the answer;
 * delete where F(key), owner, expires_at not null and holds empty), get
 * one read from the primary (mongo_read.c), release one delete, sweep one
 * delete of many. The documents come from mongo_build.c: every write's
 * filter names _id, tenant_id and key (one shard on a sharded cluster)
 * and carries the conformance predicate, so an abandon or release that
 * matched nothing reads the key once to tell RESV_ABSENT from
 * RESV_EFORMAT (docs/design.md section 12).
 *
 * It must not build documents of its own beyond a command's options and
 * abandon's $pull, nor read the server's clock: now is the store's. */
#include "mongo_internal.h"
#include "doc_bson.h"

#include <string.h>

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
  resv__doc_t d;
  bson_t raw;
  bool ok, found;

  ok = resv__mongo_read_key(m, coll, k, RESV__READ_NO_MATCH, deadline, &raw, &d,
                            &found, gone, err);
  if (ok && found)
    resv__doc_free(&d);
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
  resv__mongo_put_str(&uw, K("holds"), &r->attempt);
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
  resv__mongo_owner_filter(&w, m, r, false);
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
  resv__doc_t d;
  bson_t raw;
  bool ok, found;

  ok = resv__mongo_read_key(m, coll, &r->key, RESV__READ_GET, deadline, &raw,
                            &d, &found, gone, err);
  if (ok && !found) {
    ok = resv__answer_status(answer, RESV_ABSENT, err);
  } else if (ok) {
    int32_t status = d.state == RESV_STATE_CONFIRMED ? RESV_CONFIRMED
                     : d.expires_at > now            ? RESV_PENDING
                                                     : RESV_EXPIRED;
    ok = resv__doc_answer(&d, status, true, answer, err);
    resv__doc_free(&d);
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
  resv__mongo_put_conforms(&w, m);
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

/* resv__mongo_run with the upsert's options from kept (NULL: none). */
static bool run(resv__mongo_t *m, mongoc_collection_t *coll,
                mongoc_find_and_modify_opts_t **kept, const resv_request_t *req,
                int64_t now, int64_t deadline, resv_answer_t *answer, bool *gone,
                resv_error_t *err) {
  switch (req->op) {
  case RESV_OP_RESERVE:
  case RESV_OP_CONFIRM:
    return resv__mongo_upsert(m, coll, kept, req, now, deadline, answer, err);
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

bool resv__mongo_run(resv__mongo_t *m, mongoc_collection_t *coll,
                     const resv_request_t *req, int64_t now,
                     int64_t deadline, resv_answer_t *answer, bool *gone,
                     resv_error_t *err) {
  return run(m, coll, NULL, req, now, deadline, answer, gone, err);
}

bool resv__mongo_run_on(resv__mongo_t *m, resv__mongo_conn_t *conn,
                        const resv_request_t *req, int64_t now, int64_t deadline,
                        resv_answer_t *answer, bool *gone, resv_error_t *err) {
  return run(m, conn->coll, &conn->upsert, req, now, deadline, answer, gone, err);
}
