/* apm.h: counting the commands resv sends, with mongoc's APM callbacks.
 *
 * The store keeps its mongoc_client_pool_t private, so the benchmarks are
 * linked with -Wl,--wrap for the two functions through which libresv makes
 * its clients (mongoc_client_pool_new_with_error for the dispatcher's pool,
 * mongoc_client_new_from_uri_with_error for the start-up check). The
 * wrappers call the real functions and, when bench_apm_enable() was called
 * first, install a command-started callback that counts each command and
 * keeps its name. Every bench links this file; only the round-trip bench
 * turns counting on, so the others pay nothing for it. */
#ifndef RESV_BENCH_APM_H
#define RESV_BENCH_APM_H

#include <stddef.h>

/* Counts the commands of every client or pool made from now on. */
void bench_apm_enable(void);
/* Forgets what was counted. */
void bench_apm_reset(void);
/* How many commands started since the last reset. */
int bench_apm_count(void);
/* Their names, comma-separated, into buf (cut to size). */
void bench_apm_names(char *buf, size_t size);

#endif
