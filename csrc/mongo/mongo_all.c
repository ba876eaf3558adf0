/* mongo_all.c: reserve_all, confirm_all and abandon_all on MongoDB
 * (design.md section 5, "Several keys at once").
 *
 * No transaction: every key is written by the single-document writes of
 * its single-key call, with mongo_build.c's filters and pipelines, and the
 * writes of all the keys travel together in one `update` (or `delete`)
 * command: the driver's bulk API, ordered: false, every statement on one
 * document (multi: false), so the batch is a retryable write and, on a
 * mongos, each statement routes by its shard key to the key's own shard.
 * The reply tells, statement by statement, which inserted and which met
 * a duplicate key. A key the reply alone decides is not read (know):
 * a reserve that inserted (no document stood there, so it is now exactly
 * the owner's with the one hold and the call's expiry), and a confirm
 * that met no duplicate key (its exact filter lets through only what the
 * pipeline makes the owner's confirmed reservation of the call's
 * version). For the others, one `find` by `_id: {$in: [...]}` (read
 * concern local, from the primary, as the single-key read after a
 * duplicate key) tells each key's state, and the answer is decided from
 * it. So the round trips do not grow with the number of keys:
 *
 *   reserve_all  update (every key new)            1
 *                update, find                      2
 *                ... conflict: + update (pull), delete   4
 *   confirm_all  update (no key another's)         1
 *                update, find                      2
 *   abandon_all  update (pull), find, delete       3 (2 when none emptied)
 *
 * A key whose upsert met a duplicate key and whose holder had gone by the
 * read (the key changed hands between the two messages) is sent again
 * with the others of its kind, a bounded number of rounds, as the
 * single-key upsert is run again.
 *
 * When some key is held by another owner, reserve_all abandons each key
 * by this attempt before it answers (design.md section 5): one batch of
 * abandon's pulls of the attempt, then one batch of abandon's deletes of
 * the reservations the pulls left without holds, for the keys the read
 * found this owner's and pending (every key when the read did not happen:
 * the filters name the owner, so a pull or delete of another owner's key
 * matches nothing). A hold the same attempt had before the call is
 * given up as well (an attempt is one run of one command, which has
 * failed); a reservation the owner confirmed stays confirmed.
 * When that taking back fails (the server went away), the call answers
 * the error, never reserved, and the holds left expire at their ttl.
 *
 * Each key's writes are the single-key call's, and each answer is read
 * after them, so each key's outcome is one that some interleaving of
 * single-key calls gives: another caller may see a key held that the
 * call then gives back, never the reverse. The bulk API takes no
 * maxTimeMS: the deadline is checked before each message, and the socket
 * timeout bounds a batch the server does not answer. */
#include "mongo_internal.h"
#include "doc_bson.h"

#include <stdlib.h>
#include <string.h>

/* Rounds of a batch whose keys changed hands between write and read. */
#define ALL_TRIES 5

/* What the read says about one key. */
typedef enum verdict {
  V_FREE,  /* nobody holds it for us or against us: send it again */
  V_HELD,  /* ours: this attempt's live hold, or confirmed by the owner */
  V_OTHER, /* another owner's, confirmed or live */
  V_FULL   /* reserve: ours, live, max_holds others holding it */
} verdict_t;

/* What the reply says one statement did. */
enum { DID_MATCH, DID_INSERT, DID_DUPLICATE };

typedef struct slot {
  resv_request_t r;     /* the single-key request of this key */
  bson_t *raw;          /* the document read, or NULL */
  resv__doc_t doc; /* decoded from raw, or known (see know) */
  bool known;           /* doc is the request's own, no read behind it */
  bool todo;            /* in the next batch */
  bool unread;          /* no read has told its state since its last write */
  uint8_t did;          /* the last batch's statement: DID_* */
  bool emptied;         /* by the read's account no hold is left after the pull */
  verdict_t verdict;
} slot_t;

typedef struct all {
  resv__mongo_t *m;
  mongoc_collection_t *coll;
  const resv_request_t *req;
  int64_t now, deadline, expires;
  slot_t *s;
  size_t n;
  bool *gone;
} all_t;

static void slot_forget(slot_t *s) {
  if (s->raw) {
    resv__doc_free(&s->doc);
    bson_destroy(s->raw);
    s->raw = NULL;
  }
  s->known = false;
}

static bool has_doc(const slot_t *s) { return s->raw || s->known; }

static bool out_of_time(const all_t *a, const char *what, resv_error_t *err) {
  if (resv__mongo_max_time_ms(a->deadline) >= 0) return false;
  resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed", what);
  return true;
}

/* A server's error of one statement (or a write concern error) as the
 * call's error, with its code mapped as mongo_error.c maps any. */
static bool fail_code(const all_t *a, const bson_iter_t *entry, const char *what,
                      resv_error_t *err) {
  bson_iter_t f;
  int32_t code = 0;
  const char *msg = "write error";
  bson_error_t e;
  if (bson_iter_recurse(entry, &f) && bson_iter_find(&f, "code") && BSON_ITER_HOLDS_INT(&f))
    code = (int32_t)bson_iter_as_int64(&f);
  if (bson_iter_recurse(entry, &f) && bson_iter_find(&f, "errmsg") && BSON_ITER_HOLDS_UTF8(&f))
    msg = bson_iter_utf8(&f, NULL);
  bson_set_error(&e, MONGOC_ERROR_SERVER, (uint32_t)code, "%s", msg);
  return resv__mongo_fail(a->m, err, &e, a->deadline, what);
}

/* Marks did[j] DID_INSERT for each statement j the reply lists as
 * upserted. */
static void read_upserted(const bson_t *reply, uint8_t *did, size_t nstmt) {
  bson_iter_t it, e, f;
  if (!bson_iter_init_find(&it, reply, "upserted") || !BSON_ITER_HOLDS_ARRAY(&it) ||
      !bson_iter_recurse(&it, &e))
    return;
  while (bson_iter_next(&e))
    if (bson_iter_recurse(&e, &f) && bson_iter_find(&f, "index") && BSON_ITER_HOLDS_NUMBER(&f)) {
      int64_t index = bson_iter_as_int64(&f);
      if (index >= 0 && (size_t)index < nstmt) did[index] = DID_INSERT;
    }
}

/* Marks did[j] for each statement j that met a duplicate key or inserted
 * (did NULL: a duplicate key is an error too); any other write error, a
 * write concern error, or a command that failed whole fails the call. */
static bool read_bulk_reply(const all_t *a, bool sent, const bson_t *reply,
                            const bson_error_t *error, uint8_t *did, size_t nstmt,
                            const char *what, resv_error_t *err) {
  bson_iter_t it, e;
  bool write_errors = false;
  if (did) read_upserted(reply, did, nstmt);
  if (bson_iter_init_find(&it, reply, "writeConcernErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &e) && bson_iter_next(&e))
    return fail_code(a, &e, what, err);
  if (bson_iter_init_find(&it, reply, "writeErrors") && BSON_ITER_HOLDS_ARRAY(&it) &&
      bson_iter_recurse(&it, &e)) {
    while (bson_iter_next(&e)) {
      bson_iter_t f;
      int64_t index = -1, code = 0;
      write_errors = true;
      if (bson_iter_recurse(&e, &f) && bson_iter_find(&f, "index") && BSON_ITER_HOLDS_NUMBER(&f))
        index = bson_iter_as_int64(&f);
      if (bson_iter_recurse(&e, &f) && bson_iter_find(&f, "code") && BSON_ITER_HOLDS_NUMBER(&f))
        code = bson_iter_as_int64(&f);
      if (code != 11000 || index < 0 || (size_t)index >= nstmt || !did)
        return fail_code(a, &e, what, err);
      did[index] = DID_DUPLICATE;
    }
  }
  if (!sent && !write_errors)
    return resv__mongo_fail_reply(a->m, err, error, reply, a->deadline, what);
  return true;
}

/* Runs a bulk of nstmt statements; did as read_bulk_reply. Destroys
 * bulk. */
static bool run_bulk(const all_t *a, mongoc_bulk_operation_t *bulk, uint8_t *did,
                     size_t nstmt, const char *what, resv_error_t *err) {
  bson_t reply;
  bson_error_t error;
  bool ok = !out_of_time(a, what, err);
  if (ok) {
    bool sent = mongoc_bulk_operation_execute(bulk, &reply, &error) != 0;
    ok = read_bulk_reply(a, sent, &reply, &error, did, nstmt, what, err);
    bson_destroy(&reply);
  }
  mongoc_bulk_operation_destroy(bulk);
  return ok;
}

static mongoc_bulk_operation_t *new_bulk(const all_t *a) {
  bson_t opts = BSON_INITIALIZER;
  BSON_APPEND_BOOL(&opts, "ordered", false);
  mongoc_bulk_operation_t *bulk = mongoc_collection_create_bulk_operation_with_opts(a->coll, &opts);
  bson_destroy(&opts);
  return bulk;
}

/* Adds one update statement: filter built by the caller in fw, update in
 * uw (a pipeline or an operator document); both writers freed. */
static bool add_update(mongoc_bulk_operation_t *bulk, resv__bw_t *fw, resv__bw_t *uw,
                       bool upsert, resv_error_t *err) {
  bson_t filter, update, opts = BSON_INITIALIZER;
  bson_error_t error;
  resv__bw_finish(fw, &filter);
  resv__bw_finish(uw, &update);
  BSON_APPEND_BOOL(&opts, "upsert", upsert);
  bool ok = mongoc_bulk_operation_update_one_with_opts(bulk, &filter, &update, &opts, &error);
  bson_destroy(&opts);
  resv__bw_free(fw);
  resv__bw_free(uw);
  return ok || resv__fail(err, RESV_EINVALID, "batch: %s", error.message);
}

/* The single-key reserve's upsert of one key, or confirm's with the exact
 * filter (mongo_build.c): what it matches becomes the owner's confirmed
 * reservation of the request's version, so know can tell the answer. */
static bool add_upsert(const all_t *a, mongoc_bulk_operation_t *bulk, const slot_t *s,
                       resv_error_t *err) {
  resv__bw_t fw, uw;
  resv__bw_init(&fw);
  resv__mongo_upsert_filter(&fw, a->m, &s->r, a->now, s->r.op == RESV_OP_CONFIRM);
  resv__bw_init(&uw);
  resv__mongo_upsert_pipeline(&uw, a->m, &s->r, a->now, a->expires);
  return add_update(bulk, &fw, &uw, true, err);
}

/* abandon's pull of A, where F(key) and owner. */
static bool add_pull(const all_t *a, mongoc_bulk_operation_t *bulk, const slot_t *s,
                     resv_error_t *err) {
  resv__bw_t fw, uw;
  resv__bw_init(&fw);
  resv__mongo_owner_filter(&fw, a->m, &s->r, false);
  resv__bw_init(&uw);
  size_t pull = resv__bw_doc(&uw, K("$pull"));
  resv__bw_utf8(&uw, K("holds"), s->r.attempt.ptr ? s->r.attempt.ptr : "", s->r.attempt.len);
  resv__bw_end(&uw, pull);
  return add_update(bulk, &fw, &uw, false, err);
}

/* abandon's delete of what the pull emptied. */
static bool add_delete(const all_t *a, mongoc_bulk_operation_t *bulk, const slot_t *s,
                       resv_error_t *err) {
  resv__bw_t fw;
  bson_t filter;
  bson_error_t error;
  resv__bw_init(&fw);
  resv__mongo_owner_filter(&fw, a->m, &s->r, true);
  resv__bw_finish(&fw, &filter);
  bool ok = mongoc_bulk_operation_remove_one_with_opts(bulk, &filter, NULL, &error);
  resv__bw_free(&fw);
  return ok || resv__fail(err, RESV_EINVALID, "batch: %s", error.message);
}

typedef bool (*add_fn)(const all_t *, mongoc_bulk_operation_t *, const slot_t *,
                       resv_error_t *);

/* One batch of add's statements, one for each slot `pick` selects; what
 * each did is recorded in the slot's did. Sends nothing when none is
 * picked. */
static bool send_batch(const all_t *a, add_fn add, bool (*pick)(const slot_t *),
                       const char *what, resv_error_t *err) {
  mongoc_bulk_operation_t *bulk = new_bulk(a);
  size_t *of = calloc(a->n + 1, sizeof *of);
  uint8_t *did = calloc(a->n + 1, sizeof *did);
  size_t nstmt = 0;
  bool ok = of && did;
  if (!ok) resv__fail(err, RESV_ENOMEM, "%s: out of memory", what);
  for (size_t i = 0; ok && i < a->n; i++) {
    if (!pick(&a->s[i])) continue;
    a->s[i].did = DID_MATCH;
    a->s[i].unread = true;
    ok = add(a, bulk, &a->s[i], err);
    if (ok) of[nstmt++] = i;
  }
  if (ok && nstmt) {
    ok = run_bulk(a, bulk, did, nstmt, what, err);
    bulk = NULL;
    for (size_t j = 0; ok && j < nstmt; j++) a->s[of[j]].did = did[j];
  }
  if (bulk) mongoc_bulk_operation_destroy(bulk);
  free(of);
  free(did);
  return ok;
}

static bool pick_todo(const slot_t *s) { return s->todo; }
static bool pick_emptied(const slot_t *s) { return s->emptied; }
/* What reserve_all's taking back writes to: this owner's pending ones,
 * and every key whose state no read told. */
static bool pick_mine(const slot_t *s) {
  return s->unread || (has_doc(s) && s->doc.state == RESV_STATE_PENDING &&
                       resv__doc_owned_by(&s->doc, &s->r.owner));
}

static bool key_is(const resv_key_t *a, const resv_key_t *b) {
  return a->tenant.len == b->tenant.len && a->ns.len == b->ns.len &&
         a->key.len == b->key.len &&
         (!a->key.len || memcmp(a->key.ptr, b->key.ptr, a->key.len) == 0) &&
         (!a->ns.len || memcmp(a->ns.ptr, b->ns.ptr, a->ns.len) == 0) &&
         (!a->tenant.len || memcmp(a->tenant.ptr, b->tenant.ptr, a->tenant.len) == 0);
}

/* Files one document of the read under its key's slot; a document that
 * is not a format-1 reservation fails with RESV_EFORMAT. */
static bool file_doc(const all_t *a, const bson_t *doc, bool *format_seen, resv_error_t *err) {
  bson_iter_t it;
  resv__doc_t d;
  if (bson_iter_init_find(&it, doc, "_id") && BSON_ITER_HOLDS_UTF8(&it)) {
    *format_seen = true; /* the format record */
    return true;
  }
  bson_t *raw = bson_copy(doc);
  if (!resv__doc_decode(raw, &d, err)) {
    bson_destroy(raw);
    return false;
  }
  for (size_t i = 0; i < a->n; i++) {
    slot_t *s = &a->s[i];
    if (s->todo && !s->raw && key_is(&s->r.key, &d.key)) {
      s->raw = raw;
      s->doc = d;
      return true;
    }
  }
  resv__doc_free(&d);
  bson_destroy(raw);
  return true;
}

/* The find of every slot to do, by _id, with the format record where
 * _id alone routes (not on a mongos): *gone when it is missing. */
static bool read_todo(const all_t *a, resv_error_t *err) {
  resv__bw_t fw, ow;
  bson_t filter, opts;
  bson_error_t error;
  const bson_t *doc;
  char index[24];
  size_t count = 0;
  bool format_seen = false, ok = !out_of_time(a, "read reservations", err);
  bool with_format = a->gone && !a->m->is_mongos;
  if (!ok) return false;
  resv__bw_init(&fw);
  size_t id = resv__bw_doc(&fw, K("_id"));
  size_t in = resv__bw_array(&fw, K("$in"));
  for (size_t i = 0; i < a->n; i++) {
    if (!a->s[i].todo) continue;
    slot_forget(&a->s[i]);
    int len = snprintf(index, sizeof index, "%zu", count++);
    resv__mongo_put_id(&fw, index, (size_t)len, &a->s[i].r.key);
  }
  if (with_format) {
    int len = snprintf(index, sizeof index, "%zu", count);
    resv__bw_utf8(&fw, index, (size_t)len, K("format"));
  }
  resv__bw_end(&fw, in);
  resv__bw_end(&fw, id);
  resv__bw_finish(&fw, &filter);
  resv__bw_init(&ow);
  resv__bw_int64(&ow, K("batchSize"), (int64_t)count + 1);
  int64_t ms = resv__mongo_max_time_ms(a->deadline);
  if (ms > 0) resv__bw_int64(&ow, K("maxTimeMS"), ms);
  size_t rc = resv__bw_doc(&ow, K("readConcern"));
  resv__bw_utf8(&ow, K("level"), K("local"));
  resv__bw_end(&ow, rc);
  resv__bw_finish(&ow, &opts);
  mongoc_cursor_t *cursor = mongoc_collection_find_with_opts(a->coll, &filter, &opts, a->m->primary);
  while (ok && mongoc_cursor_next(cursor, &doc)) ok = file_doc(a, doc, &format_seen, err);
  if (ok && mongoc_cursor_error(cursor, &error))
    ok = resv__mongo_fail(a->m, err, &error, a->deadline, "read reservations");
  mongoc_cursor_destroy(cursor);
  resv__bw_free(&ow);
  resv__bw_free(&fw);
  if (ok && with_format && !format_seen) *a->gone = true;
  for (size_t i = 0; ok && i < a->n; i++)
    if (a->s[i].todo) a->s[i].unread = false;
  return ok;
}

static bool holds_attempt(const resv__doc_t *d, const resv_str_t *attempt) {
  for (size_t i = 0; i < d->nholds; i++)
    if (d->holds[i].len == attempt->len &&
        (!attempt->len || memcmp(d->holds[i].ptr, attempt->ptr, attempt->len) == 0))
      return true;
  return false;
}

/* Decides a read slot's verdict, as the single-key upsert decides after
 * its write and after a duplicate key's read. A confirm holds the owner's
 * confirmed reservation of a version at least its own (a lower one its
 * exact filter raises: sent again). */
static verdict_t judge(const all_t *a, const slot_t *s) {
  const resv__doc_t *d = &s->doc;
  if (!s->raw) return V_FREE;
  bool live = d->state == RESV_STATE_CONFIRMED || d->expires_at > a->now;
  if (!resv__doc_owned_by(d, &s->r.owner)) return live ? V_OTHER : V_FREE;
  if (d->state == RESV_STATE_CONFIRMED)
    return s->r.op == RESV_OP_RESERVE || d->version >= s->r.version ? V_HELD : V_FREE;
  if (s->r.op != RESV_OP_RESERVE || !live) return V_FREE;
  if (holds_attempt(d, &s->r.attempt)) return V_HELD;
  return d->nholds >= (size_t)a->m->max_holds ? V_FULL : V_FREE;
}

/* A key whose statement left the request's own document, which the
 * reply alone tells: a reserve's insert (no document stood there, so the
 * pipeline wrote the owner, the expiry and the one hold), or an exact
 * confirm that did not meet a duplicate key (it matched or inserted, and
 * either way wrote the owner's confirmed reservation of its version).
 * Its doc is then the request's, and it is not read. */
static bool know(all_t *a, slot_t *s) {
  bool reserve = s->r.op == RESV_OP_RESERVE;
  if (reserve ? s->did != DID_INSERT : s->did == DID_DUPLICATE) return false;
  slot_forget(s);
  s->doc = (resv__doc_t){.key = s->r.key, .owner = s->r.owner};
  if (reserve) {
    s->doc.state = RESV_STATE_PENDING;
    s->doc.expires_at = a->expires;
    s->doc.holds = &s->r.attempt;
    s->doc.nholds = 1;
  } else {
    s->doc.state = RESV_STATE_CONFIRMED;
    s->doc.version = s->r.version;
  }
  s->known = true;
  s->todo = s->unread = false;
  s->verdict = V_HELD;
  return true;
}

/* After a batch: know what the reply tells; true when some key is left
 * for the read. */
static bool left_to_read(all_t *a) {
  bool left = false;
  for (size_t i = 0; i < a->n; i++)
    if (a->s[i].todo && !know(a, &a->s[i])) left = true;
  return left;
}

/* Rounds of write and read until no key is free (or, for reserve_all,
 * some key is another owner's). */
static bool write_and_read(all_t *a, const char *what, resv_error_t *err) {
  for (int round = 0;; round++) {
    bool again = false, other = false;
    if (!send_batch(a, add_upsert, pick_todo, what, err)) return false;
    if (!left_to_read(a)) return true;
    if (!read_todo(a, err)) return false;
    a->gone = NULL; /* the format record is looked for once */
    for (size_t i = 0; i < a->n; i++) {
      slot_t *s = &a->s[i];
      if (!s->todo) continue;
      s->verdict = judge(a, s);
      s->todo = s->verdict == V_FREE;
      again = again || s->todo;
      other = other || s->verdict == V_OTHER;
      if (s->verdict == V_FULL) return resv__fail_holds_full(err, a->m->max_holds);
    }
    if (!again || (other && a->req->op == RESV_OP_RESERVE_ALL)) return true;
    if (round + 1 >= ALL_TRIES)
      return resv__fail_server(err, RESV_ESERVER, 11000,
                               "%s: a key kept changing hands (duplicate key %d times)",
                               what, ALL_TRIES);
    resv__stats_count(a->m->stats, RESV__STAT_DUPLICATE_RETRY);
  }
}

/* The pending reservation d of this owner holds nothing but attempt. */
static bool only_held_by(const resv__doc_t *d, const resv_str_t *attempt) {
  return d->nholds == 0 || (d->nholds == 1 && holds_attempt(d, attempt));
}

/* reserve_all's taking back: abandon of each key by this attempt, its
 * pulls in one batch and its deletes in another (pick_mine's keys; the
 * delete's filter takes only a pending reservation of this owner left
 * without holds). A key's answer is what they leave of it by the read's
 * account: abandoned when this attempt's hold was its only one. */
static bool take_back(all_t *a, resv_error_t *err) {
  for (size_t i = 0; i < a->n; i++) {
    slot_t *s = &a->s[i];
    s->emptied = has_doc(s) && s->doc.state == RESV_STATE_PENDING &&
                 resv__doc_owned_by(&s->doc, &s->r.owner) &&
                 only_held_by(&s->doc, &s->r.attempt);
  }
  return send_batch(a, add_pull, pick_mine, "reserve_all: take back", err) &&
         send_batch(a, add_delete, pick_mine, "reserve_all: take back", err);
}

/* One key's answer of reserve_all: the reserve's, or after the taking
 * back, conflict with the holder or what this attempt's abandon left. */
static bool reserve_key_answer(const slot_t *s, bool conflict, resv_answer_t *k,
                               resv_error_t *err) {
  const resv__doc_t *d = &s->doc;
  bool ours = has_doc(s) && resv__doc_owned_by(d, &s->r.owner);
  if (s->verdict == V_OTHER) return resv__doc_answer(d, RESV_CONFLICT, false, k, err);
  if (!conflict)
    return resv__doc_answer(d, d->state == RESV_STATE_CONFIRMED ? RESV_CONFIRMED
                                                                       : RESV_RESERVED,
                                  true, k, err);
  if (!ours) return resv__answer_status(k, RESV_ABSENT, err);
  return resv__answer_status(k, s->emptied ? RESV_ABANDONED : RESV_KEPT, err);
}

static bool reserve_all(all_t *a, resv_answer_t *answer, resv_error_t *err) {
  bool conflict = false;
  if (!resv__expiry(a->now, a->req->ttl_ms, &a->expires, err)) return false;
  if (!write_and_read(a, "reserve_all", err)) {
    resv_error_t ignored;
    take_back(a, &ignored); /* best effort; the first error is the answer */
    return false;
  }
  for (size_t i = 0; i < a->n; i++) conflict = conflict || a->s[i].verdict != V_HELD;
  if (conflict && !take_back(a, err)) return false;
  if (!resv__answer_keys(answer, conflict ? RESV_CONFLICT : RESV_RESERVED, a->n, err))
    return false;
  for (size_t i = 0; i < a->n; i++)
    if (!reserve_key_answer(&a->s[i], conflict, resv__answer_key(answer, i), err)) return false;
  return true;
}

static bool confirm_all(all_t *a, resv_answer_t *answer, resv_error_t *err) {
  if (!write_and_read(a, "confirm_all", err) ||
      !resv__answer_keys(answer, RESV_CONFIRMED, a->n, err))
    return false;
  for (size_t i = 0; i < a->n; i++) {
    slot_t *s = &a->s[i];
    int32_t status = s->verdict == V_HELD ? RESV_CONFIRMED : RESV_CONFLICT;
    if (!resv__doc_answer(&s->doc, status, false, resv__answer_key(answer, i), err))
      return false;
    if (status == RESV_CONFLICT) answer->status = RESV_CONFLICT;
  }
  return true;
}

/* abandon_all: the pulls, one read, the deletes of what they emptied.
 * Each key answers as abandon does, by the read's account of what its
 * pull left (design.md section 5: abandoned when no hold is left, kept
 * when other holds are or it is confirmed, absent when there is no
 * reservation of this owner). */
static bool abandon_all(all_t *a, resv_answer_t *answer, resv_error_t *err) {
  if (!send_batch(a, add_pull, pick_todo, "abandon_all", err) || !read_todo(a, err))
    return false;
  for (size_t i = 0; i < a->n; i++) {
    slot_t *s = &a->s[i];
    if (s->raw && !resv__doc_owned_by(&s->doc, &s->r.owner)) slot_forget(s);
    s->emptied = s->raw && s->doc.state == RESV_STATE_PENDING && s->doc.nholds == 0;
  }
  if (!send_batch(a, add_delete, pick_emptied, "abandon_all", err) ||
      !resv__answer_keys(answer, RESV_ABANDONED, a->n, err))
    return false;
  for (size_t i = 0; i < a->n; i++) {
    slot_t *s = &a->s[i];
    int32_t status = !s->raw ? RESV_ABSENT : s->emptied ? RESV_ABANDONED : RESV_KEPT;
    if (!resv__answer_status(resv__answer_key(answer, i), status, err)) return false;
  }
  return true;
}

bool resv__mongo_run_all(resv__mongo_t *m, mongoc_collection_t *coll,
                         const resv_request_t *req, int64_t now, int64_t deadline,
                         resv_answer_t *answer, bool *gone, resv_error_t *err) {
  all_t a = {.m = m, .coll = coll, .req = req, .now = now, .deadline = deadline,
             .n = req->nkeys, .gone = gone};
  bool ok;
  a.s = calloc(req->nkeys, sizeof *a.s);
  if (!a.s) return resv__fail(err, RESV_ENOMEM, "out of memory for %zu keys", req->nkeys);
  for (size_t i = 0; i < a.n; i++) {
    a.s[i].r = *req;
    a.s[i].r.op = resv__op_single(req->op);
    a.s[i].r.key = req->keys[i];
    a.s[i].r.keys = NULL;
    a.s[i].r.nkeys = 0;
    a.s[i].todo = true;
  }
  switch (req->op) {
  case RESV_OP_RESERVE_ALL: ok = reserve_all(&a, answer, err); break;
  case RESV_OP_CONFIRM_ALL: ok = confirm_all(&a, answer, err); break;
  default: ok = abandon_all(&a, answer, err); break;
  }
  for (size_t i = 0; i < a.n; i++) slot_forget(&a.s[i]);
  free(a.s);
  return ok;
}
