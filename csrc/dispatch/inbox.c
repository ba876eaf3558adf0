/* inbox.c: the completion queue that event loops watch.
 *
 * Workers append finished jobs to an intrusive doubly linked list and bump
 * an eventfd; the caller's thread drains the list whenever the descriptor
 * is readable (a game loop may also just drain once per frame). Signals
 * coalesce, so draining empties the whole list and resets the counter in
 * one step, under the same lock as the appends: the descriptor is readable
 * exactly while the list is non-empty. Workers never call into the host
 * (pull, never push).
 *
 * A job destroyed by its caller is unlinked here, and marked so that a
 * worker finishing it later does not append it. The inbox is reference
 * counted by its jobs, so it outlives every job that may still reach it. */
#include "dispatch.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct resv_inbox {
  pthread_mutex_t mutex;
  resv_job_t *head;
  resv_job_t *tail;
  int fd;
  atomic_int refs;
  unsigned generation; /* the fork generation that made it */
};

resv_inbox_t *resv_inbox_new(resv_error_t *err) {
  resv_inbox_t *inbox = calloc(1, sizeof *inbox);
  if (!inbox) {
    resv__fail(err, RESV_ENOMEM, "out of memory for an inbox");
    return NULL;
  }
  inbox->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (inbox->fd < 0) {
    resv__fail(err, RESV_ENOMEM, "eventfd: %s", strerror(errno));
    free(inbox);
    return NULL;
  }
  pthread_mutex_init(&inbox->mutex, NULL);
  atomic_init(&inbox->refs, 1);
  inbox->generation = resv__generation_start();
  return inbox;
}

void resv__inbox_ref(resv_inbox_t *inbox) {
  atomic_fetch_add_explicit(&inbox->refs, 1, memory_order_relaxed);
}

void resv__inbox_unref(resv_inbox_t *inbox) {
  if (atomic_fetch_sub_explicit(&inbox->refs, 1, memory_order_acq_rel) != 1) return;
  close(inbox->fd);
  pthread_mutex_destroy(&inbox->mutex);
  free(inbox);
}

void resv_inbox_destroy(resv_inbox_t *inbox) {
  /* A child forked after the inbox was made leaves the parent's alone:
   * its jobs are the parent's, and so is the descriptor's counter. */
  if (inbox && inbox->generation == resv__generation()) resv__inbox_unref(inbox);
}

int resv_inbox_fd(const resv_inbox_t *inbox) { return inbox->fd; }

static void signal_fd(int fd) {
  uint64_t one = 1;
  /* Can only fail when the counter would overflow: it is readable then. */
  ssize_t n = write(fd, &one, sizeof one);
  (void)n;
}

static void reset_fd(int fd) {
  uint64_t count;
  ssize_t n = read(fd, &count, sizeof count);
  (void)n;
}

void resv__inbox_push(resv_inbox_t *inbox, resv_job_t *job) {
  pthread_mutex_lock(&inbox->mutex);
  if (!job->detached) {
    job->next = NULL;
    job->prev = inbox->tail;
    if (inbox->tail) inbox->tail->next = job; else inbox->head = job;
    inbox->tail = job;
    job->in_inbox = true;
    signal_fd(inbox->fd);
  }
  pthread_mutex_unlock(&inbox->mutex);
}

static void unlink_job(resv_inbox_t *inbox, resv_job_t *job) {
  if (job->prev) job->prev->next = job->next; else inbox->head = job->next;
  if (job->next) job->next->prev = job->prev; else inbox->tail = job->prev;
  job->next = job->prev = NULL;
  job->in_inbox = false;
}

void resv__inbox_remove(resv_inbox_t *inbox, resv_job_t *job) {
  pthread_mutex_lock(&inbox->mutex);
  job->detached = true;
  if (job->in_inbox) {
    unlink_job(inbox, job);
    if (!inbox->head) reset_fd(inbox->fd);
  }
  pthread_mutex_unlock(&inbox->mutex);
}

size_t resv_inbox_drain(resv_inbox_t *inbox, resv_job_t **jobs, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&inbox->mutex);
  while (n < max && inbox->head) {
    resv_job_t *job = inbox->head;
    unlink_job(inbox, job);
    jobs[n++] = job;
  }
  /* The counter is zero whenever the list is empty (whoever empties it
   * resets it), so a drain that found nothing makes no system call. */
  if (n && !inbox->head) reset_fd(inbox->fd);
  pthread_mutex_unlock(&inbox->mutex);
  return n;
}

bool resv_inbox_wait(resv_inbox_t *inbox, int64_t timeout_ms) {
  struct pollfd pfd = {.fd = inbox->fd, .events = POLLIN};
  /* Negative, or past int64 (INT64_MAX): without limit. */
  int64_t deadline = -1;
  if (timeout_ms >= 0 && !resv__add_ms_checked(resv__monotonic_ms(), timeout_ms, &deadline))
    deadline = -1;
  for (;;) {
    int wait = -1;
    if (deadline >= 0) {
      int64_t left = deadline - resv__monotonic_ms();
      wait = left > 0 ? (left > 1000000 ? 1000000 : (int)left) : 0;
    }
    int rc = poll(&pfd, 1, wait);
    if (rc > 0) return true;
    if (rc == 0 && (deadline < 0 || resv__monotonic_ms() >= deadline)) return false;
    if (rc < 0 && errno != EINTR) return false;
  }
}
