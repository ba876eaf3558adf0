/* file_ring.h: the kernel's own word that a descriptor has something to
 * read, without a system call (file_ring.c).
 *
 * file_identity.c reads its inotify queue at the start of every
 * transaction, and the queue is nearly always empty: that empty read was
 * a third of a get. A ring (io_uring, Linux 6.1 and later) keeps a
 * standing poll of the queue; the kernel marks the ring's shared flags
 * inside the very call that queues an event (the remove, the rename, the
 * truncation), so one load tells the thread that made the ring whether
 * the queue may hold anything. Only that thread can clear the mark, so
 * any other thread, and every thread where no ring could be made (an
 * older kernel, io_uring refused by a sandbox), reads the queue as
 * before. */
#ifndef RESV_FILE_RING_H
#define RESV_FILE_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zeroed, a ring that is not there. */
typedef struct resv__file_ring {
  int fd;          /* the ring, while rings is mapped */
  int watched;     /* the descriptor it polls */
  uint64_t owner;  /* the thread that made it (file_ring.c's number of it):
                   * the only one that may enter it */
  _Atomic unsigned *flags;   /* the submission ring's flags */
  _Atomic unsigned *sq_tail; /* the submission ring */
  unsigned *sq_array, sq_mask;
  struct io_uring_sqe *sqes;
  _Atomic unsigned *cq_head, *cq_tail; /* the completion ring */
  unsigned cq_mask;
  struct io_uring_cqe *cqes;
  void *rings, *sqe_map; /* the maps (rings NULL: no ring), and their lengths */
  size_t rings_len, sqe_len;
} resv__file_ring_t;

/* Makes a ring on the calling thread that polls fd; without one
 * resv__file_ring_news always says yes. */
void resv__file_ring_open(resv__file_ring_t *r, int fd);

/* False only when the ring is sure the polled descriptor has had nothing
 * to read since the last call that said yes, read in full after it. True
 * otherwise: the caller reads the descriptor until it is empty (and, on
 * the owner, the ring is ready to mark the next event before it returns). */
bool resv__file_ring_news(resv__file_ring_t *r);

/* Frees the ring; accepts a zeroed one. */
void resv__file_ring_close(resv__file_ring_t *r);

/* For tests: no ring is made while set (the fallback's behaviour). */
extern _Atomic bool resv__file_ring_refused;

#endif
