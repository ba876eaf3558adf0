/* file_internal.h: what runs inside one transaction of the file store,
 * and the write gate.
 *
 * The parts that open the environment and begin the transactions
 * (file_env.h) call these: file_ops.c applies the rules of docs/design.md
 * section 5 over the records (file_record.h), file_reclaim.c deletes
 * expired reservations, file_format.c checks a type's format record,
 * file_scan.c reads a page of a scan, file_chain.c links the records,
 * file_upgrade.c rewrites a store of format 1. None of them begins or
 * ends a transaction. The store sees only resv__file_open (file.h). */
#ifndef RESV_FILE_INTERNAL_H
#define RESV_FILE_INTERNAL_H

#include "backend.h"
#include "file_layout.h"
#include "rules.h"

#include <lmdb.h>

/* The first byte of every key of a type's database says what it is:
 * the format record; a reservation whose key is its tenant, namespace and
 * key, separated by NUL bytes (which validated strings never contain); or
 * a reservation whose key is too long for that, stored under the 16-byte
 * hash of its key and a 4-byte sequence number (the record itself holds
 * the whole key, which is compared on every lookup, so a collision of the
 * hash costs a longer scan, never a wrong answer). */
#define RESV__FILE_TAG_FORMAT 0x00
#define RESV__FILE_TAG_KEY 0x01
#define RESV__FILE_TAG_HASHED 0x02

/* A type's state in one process. dbi and ready are set once by the set-up
 * (under the environment's set-up mutex) and read without a lock after;
 * sweep_at and writes are read and written only inside write
 * transactions, which LMDB serialises across threads and processes. */
typedef struct resv__file_type {
  MDB_dbi dbi;
  const char *collection; /* the database's name, for errors */
  atomic_bool ready;
  unsigned char sweep_at[RESV__FILE_KEY_MAX + 1]; /* next key to visit */
  size_t sweep_len;                                /* 0: from the start */
  unsigned writes; /* since the last walk of the writes' reclaiming */
} resv__file_type_t;

/* Where a new key goes in the chain: the link of the key before its
 * place, and whether it is past the last key. */
typedef struct resv__file_place {
  uint32_t prev;
  bool tail;
} resv__file_place_t;

/* What a peek found of a key: a record (present), or none and, when its
 * gap was proven (placed), where it goes. place.prev is the link of the
 * key before the record or its place; place.tail is a placed key's. */
typedef struct resv__file_seen {
  bool present;
  bool placed;
  resv__file_place_t place;
} resv__file_seen_t;

/* The most keys of a call of several keys a peek plans; a call of more
 * decides again in its write. */
#define RESV__FILE_PLAN_KEYS 16

/* What resv__file_apply decided in a read-only transaction, for the
 * write transaction that may follow. write_needed: the request would
 * write, and its answer is to be thrown away unless planned. planned: the
 * rules decided on snapshot txnid what the call writes, and a write
 * transaction on that same snapshot (nothing committed since, so its id
 * is txnid + 1) writes it without deciding again, and the read's answer
 * stands (resv__file_apply_planned): each key's decision (decisions) and
 * what the peek found of it (seen). One key (nkeys 0: seen[0],
 * decisions[0], and its LMDB key): its new record, its record rewritten
 * without the holds it had (a confirm, a new owner's) or its delete is
 * written without looking the key up again. A call of several keys
 * (nkeys of them): a write takes what the peek found instead of looking
 * the key up again while no write of the call before it could have
 * changed that (file_ops.c says when). */
typedef struct resv__file_peek {
  bool write_needed;
  bool planned;
  size_t txnid;
  size_t key_len;
  unsigned char key[RESV__FILE_KEY_MAX + 1]; /* one key: the LMDB key the record takes */
  size_t nkeys;                              /* several keys: 0 for one */
  resv__decision_t decisions[RESV__FILE_PLAN_KEYS];
  resv__file_seen_t seen[RESV__FILE_PLAN_KEYS];
} resv__file_peek_t;

/* Runs one validated request in txn (a write transaction, or a read-only
 * one for RESV_OP_GET). Returns an LMDB error code, after which the
 * transaction must be aborted, or 0: then *ok says whether answer was
 * filled; when false, err is (RESV_EFORMAT for a record that is not a
 * format-1 reservation, RESV_EINVALID for a new attempt on a reservation
 * with max_holds holds, RESV_ENOMEM) and this request wrote nothing.
 * With peek not NULL the request only decides (txn may be read-only), and
 * peek says whether it would write and what (above); when it would not,
 * the answer stands. */
int resv__file_apply(MDB_txn *txn, resv__file_type_t *ft,
                     const resv_request_t *r, int64_t now, int32_t max_holds,
                     resv_answer_t *answer, resv_error_t *err, bool *ok,
                     resv__file_peek_t *peek);

/* Writes what peek planned (resv__file_apply), in the write transaction
 * txn, when txn is on the snapshot it was planned on: then *done, and the
 * return and *ok are resv__file_apply's for request r (whose answer the
 * peek filled). Else *done false and nothing is done. */
int resv__file_apply_planned(MDB_txn *txn, resv__file_type_t *ft, const resv_request_t *r,
                             const resv__file_peek_t *peek, resv_error_t *err, bool *ok,
                             bool *done);

/* Visits up to steps records of the type from where the last visit
 * stopped (wrapping at the end) and deletes the pending reservations that
 * expired at or before limit. Records that are not format-1 reservations
 * are left alone. Adds the deletions to *deleted. Returns an LMDB error
 * code (0 on success). */
int resv__file_reclaim(MDB_txn *txn, resv__file_type_t *ft, int64_t limit,
                       size_t steps, size_t *deleted);

/* The reclaiming of one write: resv__file_reclaim of steps * every
 * records, on every every-th call for the type (the others visit none),
 * so the writes visit steps records each on average. */
int resv__file_reclaim_some(MDB_txn *txn, resv__file_type_t *ft, int64_t limit,
                            size_t steps, unsigned every, size_t *deleted);

/* The walk of resv__file_reclaim from the key at[0..*at_len) (0: the
 * first), in database dbi: visits up to steps records, deletes the
 * reclaimable ones, then stores where it stopped into at (*at_len 0 at
 * the end). sweep walks a whole type with it, chunk by chunk. */
int resv__file_walk(MDB_txn *txn, MDB_dbi dbi, unsigned char *at,
                    size_t *at_len, int64_t limit, size_t steps,
                    size_t *deleted);

/* Checks the format record of a type's database (the document
 * {_id: "format", format: 1}); writes it when there is none. Returns an
 * LMDB error code, or 0 with *ok false and err filled (RESV_EFORMAT) for
 * another format. */
int resv__file_format(MDB_txn *txn, MDB_dbi dbi, const char *collection,
                      resv_error_t *err, bool *ok);

/* resv_type_put of a validated entry in txn (a write transaction):
 * writes it when its key is free. Returns an LMDB error code, or 0 with
 * *outcome set (*ok false only when err says why). */
int resv__file_put(MDB_txn *txn, resv__file_type_t *ft, const resv_scan_entry_t *e,
                   int32_t *outcome, resv_error_t *err, bool *ok);

/* One page of resv_type_scan over database dbi in txn (file_scan.c).
 * Returns an LMDB error code, or 0 with *ok saying whether the page was
 * filled (false: err says why). */
int resv__file_scan(MDB_txn *txn, MDB_dbi dbi, const resv_str_t *after,
                    size_t limit, int64_t now, resv_scan_t *scan,
                    resv_error_t *err, bool *ok);

/* The chain of a type's records (file_chain.c). chain_insert, for a new
 * record of key: finds its place (unless at gives it, as found on the
 * same snapshot), has put_new write the record through cursor c with the
 * link of the key before (prev; append: key is past the last, so
 * MDB_APPEND), then relinks the record after it (past the last, the
 * format record) to key. chain_delete deletes key's record and relinks
 * the one after it to the deleted one's link. chain_gap: true when
 * after's link (after NULL: the format record's tail) is before_link,
 * the link of the key before (resv__file_key_link), proving nothing lies between them (c, a cursor on the type's database,
 * may be moved). The first two return an LMDB error code (0 on success;
 * put_new returns one too). */
typedef int resv__file_put_new_fn(MDB_cursor *c, uint32_t prev, bool append, void *arg);
int resv__file_chain_insert(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key,
                            const resv__file_place_t *at, resv__file_put_new_fn *put_new,
                            void *arg);
int resv__file_chain_delete(MDB_txn *txn, MDB_dbi dbi, const MDB_val *key);
bool resv__file_chain_gap(MDB_cursor *c, uint32_t before_link, const MDB_val *after,
                          const MDB_val *after_val);

/* Whether the store's "resv" database lists the type collection (a key
 * "type <collection>"), in *listed; with add, lists it when it is not.
 * A type is listed when its format record is written: a listed type
 * without one lost its database to damage. Returns an LMDB error code. */
int resv__file_type_listed(MDB_txn *txn, const char *collection, bool add, bool *listed);

/* Rewrites every record of a store of format 1 (BSON documents) into
 * the records of format 2 (file_record.h), in txn (a write transaction
 * that then marks the store 2; file_upgrade.c). Records not of the layout
 * are left as they are. Returns an LMDB error code (0 on success). */
int resv__file_upgrade(MDB_txn *txn);

/* ---- The write gate (file_gate.c) ---------------------------------- */

/* The file of the gate in a store's directory, beside LMDB's two. */
#define RESV__GATE_FILE "resv.gate"

typedef struct resv__gate resv__gate_t;

/* Maps the gate of the store in dir, making the file when it is missing.
 * NULL with err filled when it cannot (the file is not a gate, no room). */
resv__gate_t *resv__gate_open(const char *dir, resv_error_t *err);
/* Unmaps it; accepts NULL. The gate must not be held by this process. */
void resv__gate_close(resv__gate_t *g);
/* Takes the gate when it is free, without waiting: false when another
 * writer (a thread or a process) holds it. */
bool resv__gate_try(resv__gate_t *g);
/* Takes the gate, waiting at most until deadline (resv__monotonic_ms's
 * clock). False with err filled: RESV_ETIMEOUT past the deadline (what
 * names the call), RESV_EUNAVAILABLE when the lock itself fails. */
bool resv__gate_enter(resv__gate_t *g, int64_t deadline, const char *what,
                      resv_error_t *err);
void resv__gate_leave(resv__gate_t *g);

#endif /* RESV_FILE_INTERNAL_H */
