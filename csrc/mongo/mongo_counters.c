/* mongo_counters.c: mongoc's shared-memory counters leave no file behind.
 *
 * libmongoc, built with shared-memory counters (as Debian's is), makes a
 * POSIX shared-memory object, /dev/shm/mongoc-<pid>, as it is loaded (its
 * constructor runs mongoc_init), for a tool such as mongoc-stat to read,
 * and removes it when the process exits normally. A process that is
 * killed leaves it behind, and a later one given the same pid cannot make
 * its own and logs "Falling back to malloc for counters". So resv removes
 * the name as soon as it is loaded (a constructor of its own, which runs
 * after its dependencies'), and again when a MongoDB store opens: the
 * driver keeps its mapping and counts as before, but nothing is left to
 * pile up, whatever ends the process. mongoc's own MONGOC_DISABLE_SHM,
 * read by its constructor before resv runs, spares the object altogether
 * when it is in the process's environment; RESV_MONGOC_SHM (any value)
 * keeps the name for mongoc-stat. */
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void resv__mongo_counters_forget(void) {
  char name[32];

  if (getenv("RESV_MONGOC_SHM"))
    return;
  snprintf(name, sizeof name, "/mongoc-%u", (unsigned)getpid());
  shm_unlink(name); /* ENOENT when the driver made none: nothing to do */
}

__attribute__((constructor)) static void forget_at_load(void) {
  resv__mongo_counters_forget();
}
