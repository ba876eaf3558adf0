/* freeze_committer.c: a writer of a file store frozen inside a commit,
 * for the tests of "never blocks a host".
 *
 *   resv_freeze DIR
 *
 * Takes the store's write gate and LMDB's writer lock as a committing
 * writer does (file_gate.c, then a write transaction), prints "held" and
 * its pid on stdout and stops itself (SIGSTOP), as a process stopped by a
 * debugger or a signal, or swapped out, in the middle of a commit. Once
 * continued (SIGCONT) it aborts the transaction, lets go of the gate and
 * exits 0.
 * Exits 1 (saying why on stderr) when it cannot take them. */
#include "file_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: resv_freeze DIR\n");
    return 2;
  }
  resv_error_t err;
  resv__gate_t *gate = resv__gate_open(argv[1], &err);
  if (!gate || !resv__gate_enter(gate, resv__monotonic_ms() + 10000, "freeze", &err)) {
    fprintf(stderr, "resv_freeze: the gate: %s\n", err.message);
    return 1;
  }
  MDB_env *env;
  MDB_txn *txn;
  int rc = mdb_env_create(&env);
  if (!rc) rc = mdb_env_set_maxdbs(env, 512);
  if (!rc) rc = mdb_env_set_maxreaders(env, 1024);
  if (!rc) rc = mdb_env_open(env, argv[1], MDB_NOTLS | MDB_NOSYNC, 0660);
  if (!rc) rc = mdb_txn_begin(env, NULL, 0, &txn);
  if (rc) {
    fprintf(stderr, "resv_freeze: %s: %s\n", argv[1], mdb_strerror(rc));
    return 1;
  }
  printf("held %d\n", (int)getpid());
  fflush(stdout);
  raise(SIGSTOP);
  mdb_txn_abort(txn);
  resv__gate_leave(gate);
  mdb_env_close(env);
  resv__gate_close(gate);
  return 0;
}
