/* doc.h: the format-1 document (docs/design.md section 3), the layout of a
 * reservation in MongoDB: its strict decoder, its writer (doc_bson.h),
 * a scan entry to a document and back, and a format record read into a
 * scan. Built on libbson alone: nothing here includes the MongoDB driver
 * or talks to a server, so any store that keeps these documents can use
 * it. */
#ifndef RESV_DOC_H
#define RESV_DOC_H

#include "base.h"

#include <bson/bson.h>

/* ---- Reading (doc_decode.c, doc_inplace.c) ------------------------------ */

/* A stored reservation, its strings pointing into the document it was
 * read from (valid while that bson_t lives). */
typedef struct resv__doc {
  resv_key_t key;
  resv_owner_t owner;
  int32_t state;      /* RESV_STATE_PENDING or RESV_STATE_CONFIRMED */
  int64_t expires_at; /* pending */
  int64_t version;    /* confirmed */
  resv_str_t *holds;  /* pending; malloc'd, freed by resv__doc_free */
  size_t nholds;
} resv__doc_t;

/* Parses doc strictly against the format-1 layout (docs/design.md
 * section 3): field order, types, UTF-8, the state's fields and no others. Anything else
 * fails with RESV_EFORMAT (or RESV_ENOMEM); out then needs no freeing. */
bool resv__doc_decode(const bson_t *doc, resv__doc_t *out,
                        resv_error_t *err);
void resv__doc_free(resv__doc_t *doc);

/* The same for a document of data[0..len) laid out exactly as the store
 * writes it, read in place (doc_inplace.c): true only when
 * resv__doc_decode would accept it and give the same *out, whose holds
 * are then room's first nholds (at most nroom), not for
 * resv__doc_free. False for anything else, without saying why: the
 * caller then decodes with resv__doc_decode. */
bool resv__doc_decode_inplace(const uint8_t *data, size_t len, resv__doc_t *out,
                                resv_str_t *room, size_t nroom);

/* A new aggregation expression (bson_destroy it) that the server finds
 * true for exactly the documents resv__doc_decode accepts, bar the
 * bytes of their strings. The MongoDB store puts it in every write's
 * filter as $expr. Cannot fail (out of memory aborts). */
bson_t *resv__doc_conforms_new(void);

/* True when the document's owner is owner (bytewise). */
bool resv__doc_owned_by(const resv__doc_t *doc,
                              const resv_owner_t *owner);

/* Fills answer with status and the document's reservation data: owner,
 * state, and expires_at (pending) or version (confirmed); a pending one's
 * holds too when with_holds (a conflict does not show another owner's
 * attempts). */
bool resv__doc_answer(const resv__doc_t *doc, int32_t status,
                            bool with_holds, resv_answer_t *answer,
                            resv_error_t *err);

/* ---- Entries (doc_entry.c) ------------------------------------------- */

/* The format-1 document of entry e into w (initialised by it; the caller
 * frees it with resv__bw_free). */
struct resv__bw;
void resv__scan_entry_encode(const resv_scan_entry_t *e, struct resv__bw *w);
/* True when the decoded document d is the reservation e describes. */
bool resv__scan_entry_matches(const resv_scan_entry_t *e, const resv__doc_t *d);

/* ---- Scans (doc_scan.c) ---------------------------------------------- */

/* Fills a new entry of scan from a stored document (BSON bytes
 * doc[0..len)): a reservation decoded by resv__doc_decode, with get's
 * status at now, or a RESV_NONE entry naming its _id and what is wrong.
 * Fails only for memory. */
bool resv__scan_add_document(resv_scan_t *scan, const uint8_t *doc, size_t len,
                             int64_t now, resv_error_t *err);
/* Sets scan->format from a format record's BSON (NULL: none). Fails only
 * for memory. */
bool resv__scan_set_format(resv_scan_t *scan, const uint8_t *doc, size_t len,
                           resv_error_t *err);

#endif /* RESV_DOC_H */
