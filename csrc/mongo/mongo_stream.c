/* mongo_stream.c: a client's connections bounded by the deadline of the
 * call that uses them.
 *
 * mongoc 1.23 takes a client's socket timeout from the URI, never per
 * call, and on a dispatcher thread that is enough: the call's waiter gives
 * up at its deadline plus RESV__DEADLINE_GRACE_MS whatever the socket
 * does. A blocking call on its caller's thread (mongo_caller.c) has no
 * such waiter, so its client's connections are made by this initiator:
 * the driver's own stream (TCP, buffered, TLS when the URI asks), wrapped
 * in one whose every read and write waits at most until that bound, and
 * connected within it too. A server that accepts a command and never
 * answers (blackholed, or a blockConnection fail point) then costs the
 * caller no more than the dispatcher's waiter would wait; maxTimeMS
 * (resv__mongo_max_time_ms, below) still ends the command on a server that
 * does answer. */
#include "mongo_internal.h"

#include <time.h>

/* The driver's own initiator (what a client without one uses), exported
 * by libmongoc 1.23 but declared only in its private mongoc-client-private.h;
 * user_data is the client (for its TLS options). */
mongoc_stream_t *mongoc_client_default_stream_initiator(const mongoc_uri_t *uri,
                                                        const mongoc_host_list_t *host,
                                                        void *user_data,
                                                        bson_error_t *error);

/* Not one of mongoc's stream types (1 to 7). */
#define DEADLINE_STREAM_TYPE 0x7273

typedef struct deadline_stream {
  mongoc_stream_t vtable; /* first: the stream mongoc sees */
  mongoc_stream_t *inner;
  const resv__mongo_deadline_t *d;
} deadline_stream_t;

/* ms left until d's deadline plus the grace (at least 1), or -1 without
 * a deadline. Read on the coarse monotonic clock (a load, where the fine
 * one reads the TSC), which lags the fine one by at most a tick (a few
 * ms), against the grace's 250. */
static int64_t left_ms(const resv__mongo_deadline_t *d) {
  if (d->deadline == INT64_MAX)
    return -1;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  int64_t left = d->deadline + RESV__DEADLINE_GRACE_MS - now;
  return left < 1 ? 1 : left;
}

/* timeout_msec (mongoc's: negative waits for ever, 0 does not wait),
 * shortened to the call's bound. */
static int32_t bounded(const deadline_stream_t *s, int32_t timeout_msec) {
  int64_t left = left_ms(s->d);
  if (left < 0 || timeout_msec == 0 || (timeout_msec > 0 && timeout_msec <= left))
    return timeout_msec;
  return left > INT32_MAX ? INT32_MAX : (int32_t)left;
}

static deadline_stream_t *of(mongoc_stream_t *stream) {
  return (deadline_stream_t *)stream;
}

static void ds_destroy(mongoc_stream_t *stream) {
  mongoc_stream_destroy(of(stream)->inner);
  bson_free(stream);
}

static void ds_failed(mongoc_stream_t *stream) {
  mongoc_stream_failed(of(stream)->inner);
  bson_free(stream);
}

static int ds_close(mongoc_stream_t *stream) {
  return mongoc_stream_close(of(stream)->inner);
}

static int ds_flush(mongoc_stream_t *stream) {
  return mongoc_stream_flush(of(stream)->inner);
}

static ssize_t ds_writev(mongoc_stream_t *stream, mongoc_iovec_t *iov,
                         size_t iovcnt, int32_t timeout_msec) {
  deadline_stream_t *s = of(stream);
  return mongoc_stream_writev(s->inner, iov, iovcnt, bounded(s, timeout_msec));
}

static ssize_t ds_readv(mongoc_stream_t *stream, mongoc_iovec_t *iov,
                        size_t iovcnt, size_t min_bytes, int32_t timeout_msec) {
  deadline_stream_t *s = of(stream);
  return mongoc_stream_readv(s->inner, iov, iovcnt, min_bytes,
                             bounded(s, timeout_msec));
}

static int ds_setsockopt(mongoc_stream_t *stream, int level, int optname,
                         void *optval, mongoc_socklen_t optlen) {
  return mongoc_stream_setsockopt(of(stream)->inner, level, optname, optval, optlen);
}

static mongoc_stream_t *ds_base(mongoc_stream_t *stream) {
  return of(stream)->inner;
}

static bool ds_check_closed(mongoc_stream_t *stream) {
  return mongoc_stream_check_closed(of(stream)->inner);
}

static bool ds_timed_out(mongoc_stream_t *stream) {
  return mongoc_stream_timed_out(of(stream)->inner);
}

static bool ds_should_retry(mongoc_stream_t *stream) {
  return mongoc_stream_should_retry(of(stream)->inner);
}

mongoc_stream_t *resv__mongo_deadline_stream(const mongoc_uri_t *uri,
                                             const mongoc_host_list_t *host,
                                             void *user_data,
                                             bson_error_t *error) {
  const resv__mongo_deadline_t *d = user_data;
  int64_t left = left_ms(d);
  int32_t connect_ms = mongoc_uri_get_option_as_int32(
      uri, MONGOC_URI_CONNECTTIMEOUTMS, 10000);
  mongoc_uri_t *sooner = NULL;
  if (left >= 0 && (connect_ms <= 0 || connect_ms > left)) {
    sooner = mongoc_uri_copy(uri);
    mongoc_uri_set_option_as_int32(sooner, MONGOC_URI_CONNECTTIMEOUTMS,
                                   left > INT32_MAX ? INT32_MAX : (int32_t)left);
  }
  mongoc_stream_t *inner = mongoc_client_default_stream_initiator(
      sooner ? sooner : uri, host, d->client, error);
  mongoc_uri_destroy(sooner);
  if (!inner)
    return NULL;
  deadline_stream_t *s = bson_malloc0(sizeof *s);
  s->vtable.type = DEADLINE_STREAM_TYPE;
  s->vtable.destroy = ds_destroy;
  s->vtable.failed = ds_failed;
  s->vtable.close = ds_close;
  s->vtable.flush = ds_flush;
  s->vtable.writev = ds_writev;
  s->vtable.readv = ds_readv;
  s->vtable.setsockopt = ds_setsockopt;
  s->vtable.get_base_stream = ds_base;
  s->vtable.check_closed = ds_check_closed;
  s->vtable.timed_out = ds_timed_out;
  s->vtable.should_retry = ds_should_retry;
  s->inner = inner;
  s->d = d;
  return &s->vtable;
}

/* The server is told each command's time limit (maxTimeMS): what is left
 * of the call's deadline, so a command the server cannot finish in time
 * ends there with MaxTimeMSExpired (50, a timeout; not retried by the
 * driver, and the connection is kept) instead of running on for nobody.
 * The margin for that answer to travel back is on the far side of the
 * deadline: the caller waits the deadline plus its grace
 * (RESV__DEADLINE_GRACE_MS) before it gives up on the worker, so the
 * server gets the whole time the caller was promised and a timeout is
 * never answered early.
 * The socket timeout stays as a larger backstop (mongo_store.c). */
int64_t resv__mongo_max_time_ms(int64_t deadline) {
  int64_t left = deadline - resv__monotonic_ms();
  if (left >= INT32_MAX)
    return 0; /* a deadline past any limit the server takes: none */
  /* One more: the clock counts whole milliseconds, and the server must
   * not stop before the deadline. */
  return left >= 1 ? left + 1 : -1;
}
