/* file_ring.c: a standing poll of one descriptor in an io_uring, whose
 * shared flags say, without a system call, whether it had anything to
 * read (file_ring.h).
 *
 * The ring is made with IORING_SETUP_DEFER_TASKRUN (the kernel defers
 * the poll's work until the ring's one thread asks for completions,
 * never interrupting it: no spurious EINTR in a host's epoll_wait),
 * IORING_SETUP_SINGLE_ISSUER (which that mode requires: only the thread
 * that made the ring may enter it) and IORING_SETUP_TASKRUN_FLAG (the
 * kernel sets IORING_SQ_TASKRUN in the shared flags when it defers work).
 * One multishot poll (IORING_POLL_ADD_MULTI) for POLLIN stays armed. When
 * an event is queued, the kernel's wake-up of the poll defers its work
 * and sets the flag in the same call that queued the event, before that
 * call returns to whoever made the change. So on the ring's thread:
 * - the flag clear (and no completion waiting) means nothing was queued
 *   since the last time the ring said yes: no read is needed;
 * - the flag set means the queue may hold events: entering the ring runs
 *   the deferred work (the poll's completion is posted, the flag
 *   cleared), the completions are reaped (a poll that ended, with no
 *   IORING_CQE_F_MORE, is armed again), and only then does the caller
 *   read the queue to its end. An event queued after that entering sets
 *   the flag again, whether the caller's read saw the event or not.
 * A thread is told apart by a number of its own (never reused in the
 * process, unlike a thread id), so a thread made after the ring's thread
 * ended can never take the ring for its own. */
#include "file_ring.h"

#include <errno.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ENTRIES 4

_Atomic bool resv__file_ring_refused;

static _Atomic uint64_t threads_seen;
static __thread uint64_t this_thread;

static uint64_t thread_number(void) {
  if (!this_thread) this_thread = atomic_fetch_add(&threads_seen, 1) + 1;
  return this_thread;
}

static int enter(resv__file_ring_t *r, unsigned submit, unsigned flags) {
  for (;;) {
    long rc = syscall(__NR_io_uring_enter, r->fd, submit, 0, flags, NULL, 0);
    if (rc >= 0 || errno != EINTR) return (int)rc;
  }
}

/* Submits the multishot poll of r->watched. */
static bool arm(resv__file_ring_t *r) {
  unsigned tail = atomic_load_explicit(r->sq_tail, memory_order_relaxed);
  unsigned at = tail & r->sq_mask;
  struct io_uring_sqe *e = &r->sqes[at];
  memset(e, 0, sizeof *e);
  e->opcode = IORING_OP_POLL_ADD;
  e->fd = r->watched;
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  e->poll32_events = (uint32_t)POLLIN << 16 | (uint32_t)POLLIN >> 16;
#else
  e->poll32_events = POLLIN;
#endif
  e->len = IORING_POLL_ADD_MULTI;
  r->sq_array[at] = at;
  atomic_store_explicit(r->sq_tail, tail + 1, memory_order_release);
  return enter(r, 1, 0) == 1;
}

static void unmap(resv__file_ring_t *r) {
  if (r->rings) munmap(r->rings, r->rings_len);
  if (r->sqe_map) munmap(r->sqe_map, r->sqe_len);
  close(r->fd);
  r->rings = r->sqe_map = NULL;
}

void resv__file_ring_open(resv__file_ring_t *r, int fd) {
  memset(r, 0, sizeof *r);
  r->watched = fd;
  if (atomic_load(&resv__file_ring_refused)) return;
  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  /* EINVAL before Linux 6.1, EPERM or ENOSYS where io_uring is refused. */
  r->fd = (int)syscall(__NR_io_uring_setup, ENTRIES, &p);
  if (r->fd < 0) return;
  size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
  r->rings_len = sq_len > cq_len ? sq_len : cq_len;
  r->sqe_len = p.sq_entries * sizeof(struct io_uring_sqe);
  void *rings = MAP_FAILED, *sqes = MAP_FAILED;
  if (p.features & IORING_FEAT_SINGLE_MMAP) { /* one map for both rings: 5.4 and later */
    rings = mmap(NULL, r->rings_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                 IORING_OFF_SQ_RING);
    sqes = mmap(NULL, r->sqe_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, r->fd,
                IORING_OFF_SQES);
  }
  r->rings = rings == MAP_FAILED ? NULL : rings;
  r->sqe_map = sqes == MAP_FAILED ? NULL : sqes;
  if (!r->rings || !r->sqe_map) {
    unmap(r);
    return;
  }
  char *b = r->rings;
  r->flags = (_Atomic unsigned *)(void *)(b + p.sq_off.flags);
  r->sq_tail = (_Atomic unsigned *)(void *)(b + p.sq_off.tail);
  r->sq_array = (unsigned *)(void *)(b + p.sq_off.array);
  r->sq_mask = *(unsigned *)(void *)(b + p.sq_off.ring_mask);
  r->sqes = r->sqe_map;
  r->cq_head = (_Atomic unsigned *)(void *)(b + p.cq_off.head);
  r->cq_tail = (_Atomic unsigned *)(void *)(b + p.cq_off.tail);
  r->cq_mask = *(unsigned *)(void *)(b + p.cq_off.ring_mask);
  r->cqes = (struct io_uring_cqe *)(void *)(b + p.cq_off.cqes);
  r->owner = thread_number();
  if (!arm(r)) unmap(r);
}

bool resv__file_ring_news(resv__file_ring_t *r) {
  /* thread_number() is never 0, a zeroed ring's owner. */
  if (r->owner != thread_number() || !r->rings) return true;
  unsigned head = atomic_load_explicit(r->cq_head, memory_order_relaxed);
  unsigned flags = atomic_load_explicit(r->flags, memory_order_acquire);
  if (!(flags & (IORING_SQ_TASKRUN | IORING_SQ_CQ_OVERFLOW)) &&
      head == atomic_load_explicit(r->cq_tail, memory_order_acquire))
    return false;
  bool ended = enter(r, 0, IORING_ENTER_GETEVENTS) < 0;
  unsigned tail = atomic_load_explicit(r->cq_tail, memory_order_acquire);
  for (; head != tail; head++)
    if (!(r->cqes[head & r->cq_mask].flags & IORING_CQE_F_MORE)) ended = true;
  atomic_store_explicit(r->cq_head, head, memory_order_release);
  if (ended && !arm(r)) unmap(r); /* from now on, every check reads */
  return true;
}

void resv__file_ring_close(resv__file_ring_t *r) {
  if (r->rings) unmap(r);
}
