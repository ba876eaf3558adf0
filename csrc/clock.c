/* clock.c: the two clocks the core reads.
 *
 * The realtime clock is the store's default notion of "now" (epoch ms, the
 * unit expiries are stored in). Deadlines use the monotonic clock, so a
 * realtime clock step never makes a call wait forever or time out early;
 * the condition variables that wait for deadlines are set to that clock. */
#include "internal.h"

#include <time.h>

static int64_t read_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t resv__realtime_ms(void) { return read_ms(CLOCK_REALTIME); }

int64_t resv__monotonic_ms(void) { return read_ms(CLOCK_MONOTONIC); }

void resv__deadline_timespec(int64_t deadline_ms, struct timespec *ts) {
  ts->tv_sec = (time_t)(deadline_ms / 1000);
  ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

void resv__cond_init(pthread_cond_t *cond) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cond, &attr);
  pthread_condattr_destroy(&attr);
}
