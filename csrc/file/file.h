/* file.h: the file store, as the store (csrc/store/) sees it: its open.
 * file_internal.h is what the files of the file store share. */
#ifndef RESV_FILE_H
#define RESV_FILE_H

#include "backend.h"

/* Opens the file store (file_store.c). options->path is set, uri is not.
 * Set-up failures are counted into stats (NULL: not counted). */
void *resv__file_open(const resv_options_t *options, resv__stats_t *stats,
                      const resv__backend_ops_t **ops, resv_error_t *err);

#endif /* RESV_FILE_H */
