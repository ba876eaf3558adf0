/* clock.c: the two clocks the core reads.
 *
 * The realtime clock is the store's default notion of "now" (epoch ms, the
 * unit expiries are stored in). Deadlines use the monotonic clock, so a
 * realtime clock step never makes a call wait forever or time out early;
 * the condition variables that wait for deadlines are set to that clock.
 *
 * Sums of times are made here too, checked: a clock a test (or a bad
 * host) set near INT64_MAX must not wrap an expiry into the past, and a
 * caller's INT64_MAX timeout must mean "no limit", not "already late". */
#include "base.h"

#include <time.h>

static int64_t read_ms(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t resv__realtime_ms(void) { return read_ms(CLOCK_REALTIME); }

int64_t resv__monotonic_ms(void) { return read_ms(CLOCK_MONOTONIC); }

int64_t resv__coarse_ms(void) { return read_ms(CLOCK_MONOTONIC_COARSE); }

int64_t resv_clock_ms(void) { return resv__monotonic_ms(); }

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

bool resv__add_ms_checked(int64_t a, int64_t b, int64_t *sum) {
  int64_t s;
  if (__builtin_add_overflow(a, b, &s)) return false;
  *sum = s;
  return true;
}

int64_t resv__add_ms_sat(int64_t a, int64_t b) {
  int64_t s;
  if (!__builtin_add_overflow(a, b, &s)) return s;
  return b > 0 ? INT64_MAX : INT64_MIN;
}

bool resv__expiry(int64_t now, int64_t ttl_ms, int64_t *expires,
                  resv_error_t *err) {
  if (resv__add_ms_checked(now, ttl_ms, expires)) return true;
  return resv__fail(err, RESV_EINVALID,
                    "ttl: the expiry now + ttl (%lld + %lld ms) is past the "
                    "largest int64; nothing was written",
                    (long long)now, (long long)ttl_ms);
}
