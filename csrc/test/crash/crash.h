/* crash.h: what the two halves of crash_state share: the log the
 * recorder keeps of the workload's writes and barriers (crash_record.c)
 * and the answers of the workload, which the state builder and checker
 * (crash_state.c) replay and hold every state to. */
#ifndef RESV_CRASH_H
#define RESV_CRASH_H

#include "resv.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PAGE 4096
#define MAX_INODES 4096
#define MAX_FDS 1024
#define KEYS_PER_BURST 40
#define WORKERS 4 /* threads of the workload, each on its own keys */
#define BURSTS 3
#define T0 INT64_C(1700000000000)
#define HOUR INT64_C(3600000)

enum { EV_WRITE, EV_SYNC, EV_RENAME, EV_DIRSYNC, EV_TRUNC };

typedef struct {
  int type;
  int inode;
  int64_t off;
  size_t len;
  size_t data; /* into bytes */
} event_t;

typedef struct {
  unsigned char *p;
  size_t len, cap;
} file_t;

/* A call of the workload: its key, the state it left, the log positions
 * at which it began and was answered. */
enum { ABSENT, PENDING, CONFIRMED };

typedef struct {
  int key;
  int state; /* after the call */
  size_t begun, answered;
} op_t;

extern bool recording;         /* the interposed calls log */
extern char store_dir[PATH_MAX];
extern event_t *events;        /* the log */
extern size_t n_events;
extern unsigned char *bytes;   /* the bytes of the log's writes */
extern int fd_inode[MAX_FDS];  /* -1 untracked, -2 the directory */
extern int state_name;         /* the inode bound to resv.state */
extern int n_inodes;
extern file_t model;           /* data.mdb as the log says it is */
extern int snap_fd;
extern op_t ops[BURSTS * KEYS_PER_BURST * 3];
extern atomic_int n_ops;
extern int32_t sync_mode;
extern const char *mode_name;

void put_bytes(file_t *f, int64_t off, const unsigned char *p, size_t len);
void resize(file_t *f, size_t len);
void key_name(char *buf, size_t size, int k);
void owner_name(char *buf, size_t size, int k);
resv_store_t *open_store(const char *dir, resv_error_t *err);
resv_type_t *type_of(resv_store_t *s);
/* Records the workload on the store in dir: the log and ops. */
void workload(const char *dir);

#endif
