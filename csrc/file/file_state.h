/* file_state.h: the file store's state file and checkpoints (file_state.c).
 *
 * file_store.c calls resv__file_state_open before LMDB opens the
 * directory (it may refuse the store, or move a crashed one aside),
 * resv__file_state_start once the environment is open and marked,
 * resv__file_state_dirty inside every write transaction before it writes,
 * resv__file_state_wrote after it, and resv__file_state_close when the
 * environment closes. */
#ifndef RESV_FILE_STATE_H
#define RESV_FILE_STATE_H

#include "base.h"

#include <lmdb.h>
#include <pthread.h>

typedef struct resv__file_state resv__file_state_t;

/* Reads path's resv.state before anything reads data.mdb. Refuses
 * (RESV_EFORMAT) a store that an OS crash may have damaged (dirty, in
 * another boot), unless reset: then moves its files aside and starts
 * empty. Refuses a missing or empty data.mdb beside a state file. Returns
 * the state, or NULL with err filled. */
resv__file_state_t *resv__file_state_open(const char *path, bool disk, bool reset,
                                          resv_error_t *err);

/* With the environment open: records the state when the directory has
 * none, checkpoints a dirty store of this boot, and (sync = "process")
 * starts the checkpoint thread. resize is the environment's lock that
 * every transaction holds shared; gate the write gate every checkpoint
 * takes first (file_gate.c), waiting for it at open until deadline; id
 * the files' check (file_check.h) every checkpoint runs before it begins
 * its transaction. */
struct resv__gate;
struct resv__file_identity;
bool resv__file_state_start(resv__file_state_t *s, MDB_env *env,
                            pthread_rwlock_t *resize, struct resv__gate *gate,
                            struct resv__file_identity *id, int64_t deadline,
                            resv_error_t *err);

/* Inside a write transaction, before it writes (it holds LMDB's writer
 * lock): makes the state file say dirty, durably, unless it does already.
 * Returns 0 or an errno. A no-op for sync = "disk". */
int resv__file_state_dirty(resv__file_state_t *s);

/* True when resv__file_state_dirty has nothing to do (sync = "disk", or
 * the state file says dirty already), so a write costs no fsync of the
 * state file. Inside a write transaction. */
bool resv__file_state_marked(const resv__file_state_t *s);

/* Inside a write transaction, before it writes (sync = "process"):
 * allocates data.mdb on the disk ahead of what the map may write next.
 * Returns 0 or ENOSPC (the disk is full: nothing must be written). */
int resv__file_state_room(resv__file_state_t *s);

/* After a write transaction: the checkpoint thread runs once the process
 * has been idle for a moment. */
void resv__file_state_wrote(resv__file_state_t *s);

/* Stops the checkpoint thread, checkpoints when the store is dirty, and
 * frees s (NULL is fine). */
void resv__file_state_close(resv__file_state_t *s);

#endif /* RESV_FILE_STATE_H */
