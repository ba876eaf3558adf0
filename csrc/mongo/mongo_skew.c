/* mongo_skew.c: how far the servers' clocks are from this host's.
 *
 * Expiry is judged by the caller's clock (an expires_at written by one
 * host is compared with another host's now), so hosts whose clocks
 * disagree see a reservation expire early or late. The store cannot fix
 * that, but it can see it: every hello the driver's monitor sends carries
 * the server's wall clock (localTime), and the driver reports each
 * successful one with its round trip (the APM heartbeat event), so the
 * measure costs no command of its own.
 *
 * The server read its clock somewhere between the hello's sending and its
 * reply, so the skew (server minus host) is taken at the middle of the
 * round trip and is known to within half of it. An awaited hello (the
 * streaming protocol) waits at the server before answering, so its
 * duration is no round trip: it is measured with the last round trip of
 * a plain one, and skipped until there is one. The latest measure wins,
 * whichever server it came from.
 *
 * When the skew is more than a tenth of the shortest ttl a reserve of
 * this store asked for, the store warns through its log (at most once a
 * minute, as every kind of line). The host's clock here is its realtime
 * clock: the store's clock, unless a test froze it. */
#include "mongo_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* The ttl of every reserve goes through here: the shortest is kept. */
void resv__mongo_skew_ttl(resv__mongo_t *m, int64_t ttl_ms) {
  int64_t shortest = atomic_load_explicit(&m->shortest_ttl_ms, memory_order_relaxed);
  while ((shortest == 0 || ttl_ms < shortest) && ttl_ms > 0 &&
         !atomic_compare_exchange_weak(&m->shortest_ttl_ms, &shortest, ttl_ms)) {
  }
}

static void warn_if_large(resv__mongo_t *m, const char *host, int64_t skew,
                          int64_t error) {
  int64_t ttl = atomic_load_explicit(&m->shortest_ttl_ms, memory_order_relaxed);
  int64_t size = llabs(skew);
  char text[640];
  if (ttl == 0 || size * 10 <= ttl)
    return;
  snprintf(text, sizeof text,
           "the clock of %s is %lld ms %s this host's (within %lld ms), more than a "
           "tenth of the shortest ttl in use (%lld ms): expiry is judged by each "
           "caller's clock, so hosts whose clocks disagree take over live "
           "reservations early and sweep them; keep every host's clock in sync (NTP)",
           host, (long long)size, skew > 0 ? "ahead of" : "behind",
           (long long)error, (long long)ttl);
  resv__mongo_log_say(m->log, "clock", text);
}

static void heartbeat_succeeded(const mongoc_apm_server_heartbeat_succeeded_t *event) {
  resv__mongo_t *m = mongoc_apm_server_heartbeat_succeeded_get_context(event);
  const bson_t *reply = mongoc_apm_server_heartbeat_succeeded_get_reply(event);
  int64_t now = resv__realtime_ms();
  int64_t rtt_ms;
  bson_iter_t it;

  if (!bson_iter_init_find(&it, reply, "localTime") || !BSON_ITER_HOLDS_DATE_TIME(&it))
    return;
  if (mongoc_apm_server_heartbeat_succeeded_get_awaited(event)) {
    rtt_ms = atomic_load_explicit(&m->skew_rtt_ms, memory_order_relaxed);
    if (rtt_ms < 0)
      return;
  } else {
    rtt_ms = mongoc_apm_server_heartbeat_succeeded_get_duration(event) / 1000;
    atomic_store_explicit(&m->skew_rtt_ms, rtt_ms, memory_order_relaxed);
  }
  int64_t skew = bson_iter_date_time(&it) - (now - rtt_ms / 2);
  int64_t error = (rtt_ms + 1) / 2;
  atomic_store_explicit(&m->skew_ms, skew, memory_order_relaxed);
  atomic_store_explicit(&m->skew_error_ms, error, memory_order_release);
  warn_if_large(m, mongoc_apm_server_heartbeat_succeeded_get_host(event)->host_and_port,
                skew, error);
}

void resv__mongo_skew_watch(resv__mongo_t *m) {
  resv__mongo_log_capture_t said;
  mongoc_apm_callbacks_t *callbacks = mongoc_apm_callbacks_new();

  atomic_init(&m->skew_ms, 0);
  atomic_init(&m->skew_error_ms, -1);
  atomic_init(&m->skew_rtt_ms, -1);
  atomic_init(&m->shortest_ttl_ms, 0);
  mongoc_apm_set_server_heartbeat_succeeded_cb(callbacks, heartbeat_succeeded);
  /* A pool whose callbacks a wrapper set already (bench/apm.c) refuses
   * with an error line: kept quiet, the skew is then not measured. */
  resv__mongo_log_capture(&said);
  mongoc_client_pool_set_apm_callbacks(m->pool, callbacks, m);
  resv__mongo_log_release();
  mongoc_apm_callbacks_destroy(callbacks);
}

bool resv__mongo_skew(void *backend, int64_t *skew_ms, int64_t *error_ms) {
  resv__mongo_t *m = backend;
  *error_ms = atomic_load_explicit(&m->skew_error_ms, memory_order_acquire);
  *skew_ms = *error_ms < 0 ? 0 : atomic_load_explicit(&m->skew_ms, memory_order_relaxed);
  return *error_ms >= 0;
}
