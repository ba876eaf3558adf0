/* mongo.h: the MongoDB store, as the store (csrc/store/) sees it: its open.
 * mongo_internal.h is what the files of the MongoDB store share; this
 * header names no mongoc type, so the store builds without the driver's
 * headers. */
#ifndef RESV_MONGO_H
#define RESV_MONGO_H

#include "backend.h"

/* Opens the MongoDB store (mongo_store.c). options->uri is set and every
 * number option has its default. Duplicate-key retries and set-up
 * failures are counted into stats (NULL: not counted). database holds
 * the database option, or "" for the URI's (else "resv"), which is then
 * written into it (database_size bytes). */
void *resv__mongo_open(const resv_options_t *options, resv__stats_t *stats,
                       char *database, size_t database_size,
                       const resv__backend_ops_t **ops, resv_error_t *err);

#endif /* RESV_MONGO_H */
