/* rules.h: the decision of each operation of design.md section 5, for the
 * embedded stores (memory.c, file_ops.c).
 *
 * A store shows the rules a view of the reservation it keeps for the key
 * (resv__view_t: state, owner, expiry or version, holds) and the request
 * at its clock; the rules answer with a decision (resv__decision_t): the
 * status, what the answer shows, and what to write (nothing, the record
 * as the decision describes it, or a delete). The store then fills the
 * answer through resv__rules_answer and applies the write to its own
 * storage. The rules read nothing but their arguments and write nothing
 * but the decision: no store, no lock, no LMDB, no MongoDB. The MongoDB
 * store runs the same rules as pipelines on the server (mongo_build.c); the
 * differential tests compare the two. */
#ifndef RESV_RULES_H
#define RESV_RULES_H

#include "base.h"

/* A stored reservation as the rules see it. state RESV_STATE_NONE: the
 * key has no record (the other fields are not read). The strings point
 * into the store's storage and are only read. */
typedef struct resv__view {
  int32_t state;           /* resv_state_t */
  resv_owner_t owner;
  int64_t expires_at;      /* pending */
  int64_t version;         /* confirmed */
  const resv_str_t *holds; /* pending: the attempts holding it */
  size_t nholds;
} resv__view_t;

/* What a decision writes. */
typedef enum resv__write {
  RESV__WRITE_NOTHING = 0,
  RESV__WRITE_RECORD = 1, /* the record becomes the decision's (made when absent) */
  RESV__WRITE_DELETE = 2  /* the record goes */
} resv__write_t;

/* How the holds of a RESV__WRITE_RECORD come from the view's. */
typedef enum resv__holds_change {
  RESV__HOLDS_KEEP = 0,  /* as they are */
  RESV__HOLDS_ADD = 1,   /* the request's attempt added after them */
  RESV__HOLDS_PULL = 2,  /* the request's attempt taken out (it is there) */
  RESV__HOLDS_CLEAR = 3, /* none */
  RESV__HOLDS_ONLY = 4   /* the request's attempt alone */
} resv__holds_change_t;

/* What an answer describes besides its status. */
typedef enum resv__shows {
  RESV__SHOWS_STATUS = 0, /* nothing (abandoned, kept, absent, released) */
  RESV__SHOWS_BEFORE = 1, /* the stored reservation (conflict, kept confirmed, get) */
  RESV__SHOWS_AFTER = 2   /* the record written (reserved, confirmed) */
} resv__shows_t;

typedef struct resv__decision {
  int32_t status;   /* resv_status_t */
  int32_t shows;    /* resv__shows_t */
  bool with_holds;  /* the answer lists the holds of what it shows */
  int32_t write;    /* resv__write_t */
  /* RESV__WRITE_RECORD: the record after the write, always the request's
   * owner's. new_owner: the owner's fields are written anew (the key had
   * no record, or another owner's expired one); otherwise they stay. */
  bool new_owner;
  int32_t state;      /* RESV_STATE_PENDING or RESV_STATE_CONFIRMED */
  int64_t expires_at; /* pending */
  int64_t version;    /* confirmed */
  int32_t holds;      /* resv__holds_change_t */
} resv__decision_t;

/* Decides r (reserve, confirm, abandon, release or get) on the view v at
 * now. False with err (RESV_EINVALID: an expiry past int64, a new attempt
 * on a reservation with max_holds holds, an unknown op), d then
 * undefined. */
bool resv__rules_decide(const resv__view_t *v, const resv_request_t *r, int64_t now,
                        int32_t max_holds, resv__decision_t *d, resv_error_t *err);

/* The holds of the record d writes, from v's and attempt, into out (room
 * for v->nholds + 1). Returns how many. */
size_t resv__rules_holds(const resv__view_t *v, const resv__decision_t *d,
                         const resv_str_t *attempt, resv_str_t *out);

/* True when resv__rules_holds reads v's holds for d (the record's holds
 * kept, added to or pulled from); false when they are none or the
 * attempt alone. */
static inline bool resv__rules_holds_read_view(const resv__decision_t *d) {
  return d->holds == RESV__HOLDS_KEEP || d->holds == RESV__HOLDS_ADD ||
         d->holds == RESV__HOLDS_PULL;
}

/* Fills a as d says, from v and r (call it before the store writes: v's
 * strings point into what the write may move). Fails only for memory. */
bool resv__rules_answer(const resv__view_t *v, const resv__decision_t *d,
                        const resv_request_t *r, resv_answer_t *a, resv_error_t *err);

/* Decides a reserve_all, confirm_all or abandon_all r on the views of its
 * keys (v[i] of r->keys[i]) at now: d[i] is key i's decision, *status the
 * call's. False with err as resv__rules_decide (an error on any key is the
 * call's, and nothing is to be written). */
bool resv__rules_decide_all(const resv__view_t *v, const resv_request_t *r, int64_t now,
                            int32_t max_holds, resv__decision_t *d, int32_t *status,
                            resv_error_t *err);

/* Fills a as an answer of r's keys with status, key i's as d[i] says
 * (before the store writes, as resv__rules_answer). */
bool resv__rules_answer_all(const resv__view_t *v, const resv__decision_t *d, int32_t status,
                            const resv_request_t *r, resv_answer_t *a, resv_error_t *err);

/* The latest expiry that reclaiming and a sweep delete at now: pending
 * reservations expired for at least grace_ms. */
static inline int64_t resv__rules_sweep_limit(int64_t now, int64_t grace_ms) {
  return resv__add_ms_sat(now, -grace_ms);
}

/* True for a reservation that reclaiming and a sweep delete: pending and
 * expired at or before limit (resv__rules_sweep_limit's). */
static inline bool resv__rules_reclaimable(bool confirmed, int64_t expires_at, int64_t limit) {
  return !confirmed && expires_at <= limit;
}

#endif
