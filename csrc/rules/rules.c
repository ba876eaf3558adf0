/* rules.c: design.md section 5 decided once for the embedded stores.
 *
 * Each operation is a function from a view of the stored reservation and
 * a request at the store's clock to a decision (rules.h): the rules as the
 * MongoDB store executes them, so every store gives the same answers for
 * the same calls and clock. A reserve or a confirm matches a reservation
 * only when it is the owner's or pending and expired (expires_at <= now),
 * and otherwise meets it as a conflict; the owner's confirmed one is kept
 * by a reserve; the owner's live pending one is joined; anything else
 * (absent, or pending and expired) starts afresh. An abandon pulls its
 * hold and deletes only a pending reservation of the owner left without
 * holds. The *_all ops decide each key as its single-key op does; a
 * reserve_all that meets another owner on any key takes back, on every
 * other key, what its reserve did (design.md section 5, "Several keys at
 * once"). Nothing here touches a store: the stores apply the decision to
 * their own storage. */
#include "rules.h"

#include <stdlib.h>
#include <string.h>

/* Holds copied into an answer without a heap array up to this many. */
#define HOLDS_ON_STACK 16

static bool owned_by(const resv__view_t *v, const resv_owner_t *o) {
  return resv__str_eq(v->owner.tenant, o->tenant) && resv__str_eq(v->owner.id, o->id);
}

static bool present(const resv__view_t *v) { return v->state != RESV_STATE_NONE; }
static bool confirmed(const resv__view_t *v) { return v->state == RESV_STATE_CONFIRMED; }

static bool has_hold(const resv__view_t *v, const resv_str_t *attempt) {
  for (size_t i = 0; i < v->nholds; i++)
    if (resv__str_eq(v->holds[i], *attempt)) return true;
  return false;
}

/* Held by another owner: confirmed, or pending and live. */
static bool held_by_other(const resv__view_t *v, const resv_owner_t *o, int64_t now) {
  return present(v) && !owned_by(v, o) && (confirmed(v) || v->expires_at > now);
}

static void answer_only(resv__decision_t *d, int32_t status, int32_t shows, bool with_holds) {
  memset(d, 0, sizeof *d);
  d->status = status;
  d->shows = shows;
  d->with_holds = with_holds;
}

static bool decide_reserve(const resv__view_t *v, const resv_request_t *r, int64_t now,
                           int32_t max_holds, resv__decision_t *d, resv_error_t *err) {
  int64_t expires_at;
  /* First, as the MongoDB store computes it before its round trip. */
  if (!resv__expiry(now, r->ttl_ms, &expires_at, err)) return false;
  if (held_by_other(v, &r->owner, now)) {
    answer_only(d, RESV_CONFLICT, RESV__SHOWS_BEFORE, false);
    return true;
  }
  if (present(v) && confirmed(v)) { /* ours: kept exactly as it is */
    answer_only(d, RESV_CONFIRMED, RESV__SHOWS_BEFORE, false);
    return true;
  }
  answer_only(d, RESV_RESERVED, RESV__SHOWS_AFTER, true);
  d->write = RESV__WRITE_RECORD;
  d->state = RESV_STATE_PENDING;
  d->expires_at = expires_at;
  if (present(v) && v->expires_at > now) { /* our live pending one: join it */
    bool held = has_hold(v, &r->attempt);
    if (!held && v->nholds >= (size_t)max_holds) return resv__fail_holds_full(err, max_holds);
    d->holds = held ? RESV__HOLDS_KEEP : RESV__HOLDS_ADD;
    if (v->expires_at > expires_at) d->expires_at = v->expires_at;
    return true;
  }
  /* A new key, or an expired pending reservation of anyone: afresh. */
  d->new_owner = !present(v) || !owned_by(v, &r->owner);
  d->holds = RESV__HOLDS_ONLY;
  return true;
}

static void decide_confirm(const resv__view_t *v, const resv_request_t *r, int64_t now,
                           resv__decision_t *d) {
  if (held_by_other(v, &r->owner, now)) {
    answer_only(d, RESV_CONFLICT, RESV__SHOWS_BEFORE, false);
    return;
  }
  answer_only(d, RESV_CONFIRMED, RESV__SHOWS_AFTER, false);
  d->write = RESV__WRITE_RECORD;
  d->new_owner = !present(v) || !owned_by(v, &r->owner);
  d->state = RESV_STATE_CONFIRMED;
  d->version = r->version;
  if (present(v) && confirmed(v) && v->version > d->version) d->version = v->version;
  d->holds = RESV__HOLDS_CLEAR;
}

static void decide_abandon(const resv__view_t *v, const resv_request_t *r,
                           resv__decision_t *d) {
  if (!present(v) || !owned_by(v, &r->owner)) {
    answer_only(d, RESV_ABSENT, RESV__SHOWS_STATUS, false);
    return;
  }
  if (confirmed(v)) { /* never deleted by an abandon */
    answer_only(d, RESV_KEPT, RESV__SHOWS_STATUS, false);
    return;
  }
  bool held = has_hold(v, &r->attempt);
  size_t left = v->nholds - (held ? 1 : 0);
  if (left == 0) {
    answer_only(d, RESV_ABANDONED, RESV__SHOWS_STATUS, false);
    d->write = RESV__WRITE_DELETE;
    return;
  }
  answer_only(d, RESV_KEPT, RESV__SHOWS_STATUS, false);
  if (!held) return; /* not our hold: nothing changes */
  d->write = RESV__WRITE_RECORD;
  d->state = RESV_STATE_PENDING;
  d->expires_at = v->expires_at;
  d->holds = RESV__HOLDS_PULL;
}

static void decide_release(const resv__view_t *v, const resv_request_t *r,
                           resv__decision_t *d) {
  if (!present(v) || !owned_by(v, &r->owner)) {
    answer_only(d, RESV_ABSENT, RESV__SHOWS_STATUS, false);
    return;
  }
  answer_only(d, RESV_RELEASED, RESV__SHOWS_STATUS, false);
  d->write = RESV__WRITE_DELETE;
}

static void decide_get(const resv__view_t *v, int64_t now, resv__decision_t *d) {
  if (!present(v)) {
    answer_only(d, RESV_ABSENT, RESV__SHOWS_STATUS, false);
    return;
  }
  int32_t status = confirmed(v) ? RESV_CONFIRMED
                   : v->expires_at > now ? RESV_PENDING : RESV_EXPIRED;
  answer_only(d, status, RESV__SHOWS_BEFORE, !confirmed(v));
}

bool resv__rules_decide(const resv__view_t *v, const resv_request_t *r, int64_t now,
                        int32_t max_holds, resv__decision_t *d, resv_error_t *err) {
  switch (r->op) {
  case RESV_OP_RESERVE: return decide_reserve(v, r, now, max_holds, d, err);
  case RESV_OP_CONFIRM: decide_confirm(v, r, now, d); return true;
  case RESV_OP_ABANDON: decide_abandon(v, r, d); return true;
  case RESV_OP_RELEASE: decide_release(v, r, d); return true;
  case RESV_OP_GET: decide_get(v, now, d); return true;
  default: return resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
}

size_t resv__rules_holds(const resv__view_t *v, const resv__decision_t *d,
                         const resv_str_t *attempt, resv_str_t *out) {
  size_t n = 0;
  switch (d->holds) {
  case RESV__HOLDS_KEEP: /* these three only change a present record's */
  case RESV__HOLDS_ADD:
    for (size_t i = 0; i < v->nholds; i++) out[n++] = v->holds[i];
    if (d->holds == RESV__HOLDS_ADD) out[n++] = *attempt;
    break;
  case RESV__HOLDS_PULL:
    for (size_t i = 0; i < v->nholds; i++)
      if (!resv__str_eq(v->holds[i], *attempt)) out[n++] = v->holds[i];
    break;
  case RESV__HOLDS_ONLY: out[n++] = *attempt; break;
  default: break; /* RESV__HOLDS_CLEAR */
  }
  return n;
}

/* The record d writes, as an answer shows it. */
static bool answer_after(const resv__view_t *v, const resv__decision_t *d,
                         const resv_request_t *r, resv_answer_t *a, resv_error_t *err) {
  resv_str_t on_stack[HOLDS_ON_STACK], *holds = on_stack;
  size_t nholds = 0;
  if (d->with_holds) {
    size_t need = (present(v) ? v->nholds : 0) + 1;
    if (need > HOLDS_ON_STACK && !(holds = malloc(need * sizeof *holds)))
      return resv__fail(err, RESV_ENOMEM, "out of memory for an answer");
    nholds = resv__rules_holds(v, d, &r->attempt, holds);
  }
  bool pending = d->state == RESV_STATE_PENDING;
  bool ok = resv__answer_set(a, d->status, d->state, pending ? d->expires_at : 0,
                             pending ? 0 : d->version, &r->owner.tenant, &r->owner.id,
                             nholds ? holds : NULL, nholds, err);
  if (holds != on_stack) free(holds);
  return ok;
}

bool resv__rules_answer(const resv__view_t *v, const resv__decision_t *d,
                        const resv_request_t *r, resv_answer_t *a, resv_error_t *err) {
  if (d->shows == RESV__SHOWS_AFTER) return answer_after(v, d, r, a, err);
  if (d->shows == RESV__SHOWS_STATUS) return resv__answer_status(a, d->status, err);
  bool pending = v->state == RESV_STATE_PENDING, holds = pending && d->with_holds;
  return resv__answer_set(a, d->status, v->state, pending ? v->expires_at : 0,
                          pending ? 0 : v->version, &v->owner.tenant, &v->owner.id,
                          holds ? v->holds : NULL, holds ? v->nholds : 0, err);
}

/* ---- several keys ------------------------------------------------------- */

/* Key i of a *_all request as its single-key request. */
static resv_request_t key_request(const resv_request_t *r, size_t i) {
  resv_request_t one = *r;
  one.op = resv__op_single(r->op);
  one.key = r->keys[i];
  one.keys = NULL;
  one.nkeys = 0;
  return one;
}

/* A reserve that a reserve_all decided (d: reserved or confirmed), then
 * the abandon of the same attempt on what it left: the one decision of
 * both, so that a conflicting reserve_all writes only their sum. */
static void take_back(const resv__view_t *v, resv__decision_t *d) {
  if (d->status == RESV_CONFIRMED) { /* the owner's confirmed one: kept */
    answer_only(d, RESV_KEPT, RESV__SHOWS_STATUS, false);
    return;
  }
  /* The reserve's holds, less the attempt. */
  size_t left = d->holds == RESV__HOLDS_ONLY ? 0
                : v->nholds - (d->holds == RESV__HOLDS_KEEP ? 1 : 0);
  int64_t expires_at = d->expires_at;
  int32_t holds = d->holds == RESV__HOLDS_KEEP ? RESV__HOLDS_PULL : RESV__HOLDS_KEEP;
  if (left == 0) {
    answer_only(d, RESV_ABANDONED, RESV__SHOWS_STATUS, false);
    d->write = present(v) ? RESV__WRITE_DELETE : RESV__WRITE_NOTHING;
    return;
  }
  answer_only(d, RESV_KEPT, RESV__SHOWS_STATUS, false);
  d->write = RESV__WRITE_RECORD;
  d->state = RESV_STATE_PENDING;
  d->expires_at = expires_at; /* the reserve's later expiry stays */
  d->holds = holds;
}

bool resv__rules_decide_all(const resv__view_t *v, const resv_request_t *r, int64_t now,
                            int32_t max_holds, resv__decision_t *d, int32_t *status,
                            resv_error_t *err) {
  bool conflict = false;
  resv_request_t one = key_request(r, 0);
  for (size_t i = 0; i < r->nkeys; i++) {
    one.key = r->keys[i];
    if (!resv__rules_decide(&v[i], &one, now, max_holds, &d[i], err)) return false;
    conflict = conflict || d[i].status == RESV_CONFLICT;
  }
  switch (r->op) {
  case RESV_OP_RESERVE_ALL:
    *status = conflict ? RESV_CONFLICT : RESV_RESERVED;
    for (size_t i = 0; conflict && i < r->nkeys; i++)
      if (d[i].status != RESV_CONFLICT) take_back(&v[i], &d[i]);
    return true;
  case RESV_OP_CONFIRM_ALL: *status = conflict ? RESV_CONFLICT : RESV_CONFIRMED; return true;
  case RESV_OP_ABANDON_ALL: *status = RESV_ABANDONED; return true;
  default: return resv__fail(err, RESV_EINVALID, "op: unknown operation %d", (int)r->op);
  }
}

bool resv__rules_answer_all(const resv__view_t *v, const resv__decision_t *d, int32_t status,
                            const resv_request_t *r, resv_answer_t *a, resv_error_t *err) {
  if (!resv__answer_keys(a, status, r->nkeys, err)) return false;
  for (size_t i = 0; i < r->nkeys; i++)
    if (!resv__rules_answer(&v[i], &d[i], r, resv__answer_key(a, i), err)) return false;
  return true;
}
