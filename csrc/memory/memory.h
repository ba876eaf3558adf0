/* memory.h: the memory store, as the store (csrc/store/) sees it: its open.
 * memory.c is the rest. */
#ifndef RESV_MEMORY_H
#define RESV_MEMORY_H

#include "backend.h"

/* Opens the memory store. */
void *resv__memory_open(const resv_options_t *options,
                        const resv__backend_ops_t **ops, resv_error_t *err);

#endif /* RESV_MEMORY_H */
