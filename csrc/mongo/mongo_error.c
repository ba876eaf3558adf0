/* mongo_error.c: driver errors as resv errors.
 *
 * The pool runs with mongoc's error API version 2, where a server's own
 * error arrives as domain MONGOC_ERROR_SERVER (or MONGOC_ERROR_WRITE_CONCERN)
 * with MongoDB's code, so a duplicate key is exactly MONGOC_ERROR_SERVER /
 * 11000 and nothing else. The mapping follows docs/design.md section 8:
 *   - server errors are RESV_ESERVER with the server's code and message,
 *     but for MaxTimeMSExpired (50), ExceededTimeLimit (262) and a write
 *     concern's wtimeout (WriteConcernFailed, 64), which are RESV_ETIMEOUT,
 *     and a primary stepping down or a node shutting down (10107, 189,
 *     11602, 11600, 91, 13435, 13436, or any error labelled
 *     RetryableWriteError), which is RESV_EUNAVAILABLE (RESV_ETIMEOUT once
 *     the deadline passed), each keeping the server's code;
 *   - failing to select a server is RESV_EUNAVAILABLE, also when the
 *     selection waited out the call's deadline (no server could be
 *     reached: retrying later may help, waiting longer on this call not);
 *   - losing the connection is RESV_EUNAVAILABLE, or RESV_ETIMEOUT when
 *     the call's deadline has passed (a socket timeout is how a late
 *     server shows itself);
 *   - anything else the driver refuses is RESV_ESERVER with code 0.
 * Messages may quote a connection string (host lists, auth failures): the
 * URI's password is replaced by "***" before a message leaves the
 * backend. */
#include "mongo_internal.h"

#include <string.h>

#define SERVER_DUPLICATE_KEY 11000
#define SERVER_MAX_TIME_EXPIRED 50
#define SERVER_WRITE_CONCERN_FAILED 64 /* wtimeout passed */
#define SERVER_EXCEEDED_TIME_LIMIT 262

/* A member stepping down, shutting down, or no longer primary (docs/design.md
 * section 12): the caller can act on it (retry, elsewhere or later), so it
 * is RESV_EUNAVAILABLE, not a server error, also when the driver's one
 * retry met it again. */
static bool is_unavailable_code(uint32_t code) {
  switch (code) {
  case 10107: /* NotWritablePrimary */
  case 189:   /* PrimarySteppedDown */
  case 11602: /* InterruptedDueToReplStateChange */
  case 11600: /* InterruptedAtShutdown */
  case 91:    /* ShutdownInProgress */
  case 13435: /* NotPrimaryNoSecondaryOk */
  case 13436: /* NotPrimaryOrSecondary */
    return true;
  default:
    return false;
  }
}

bool resv__mongo_is_duplicate(const bson_error_t *error) {
  return error->domain == MONGOC_ERROR_SERVER &&
         error->code == SERVER_DUPLICATE_KEY;
}

/* Replaces each occurrence of needle in s (cap bytes of room, NUL
 * included) with "***", cutting the result to cap when a short needle
 * makes it grow. */
static void scrub_one(char *s, size_t cap, const char *needle) {
  char out[1024];
  size_t nlen, o = 0;
  const char *p = s;

  if (!needle || !*needle || !strstr(s, needle))
    return;
  if (cap > sizeof out)
    cap = sizeof out;
  nlen = strlen(needle);
  while (*p && o + 1 < cap) {
    if (strncmp(p, needle, nlen) == 0) {
      for (int i = 0; i < 3 && o + 1 < cap; i++)
        out[o++] = '*';
      p += nlen;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = '\0';
  memcpy(s, out, o + 1);
}

void resv__mongo_scrub(const resv__mongo_t *m, char *s) {
  size_t cap = strlen(s) + 1;
  if (!m)
    return;
  /* The raw form first: it contains the decoded one when no character
   * needed escaping, and both are secret. */
  scrub_one(s, cap, m->secret_raw);
  scrub_one(s, cap, m->secret);
}

bool resv__mongo_fail(const resv__mongo_t *m, resv_error_t *err,
                      const bson_error_t *error, int64_t deadline,
                      const char *what) {
  return resv__mongo_fail_reply(m, err, error, NULL, deadline, what);
}

bool resv__mongo_fail_reply(const resv__mongo_t *m, resv_error_t *err,
                            const bson_error_t *error, const bson_t *reply,
                            int64_t deadline, const char *what) {
  char text[sizeof error->message];
  bool late = deadline > 0 && resv__monotonic_ms() >= deadline;

  memcpy(text, error->message, sizeof text);
  text[sizeof text - 1] = '\0';
  resv__mongo_scrub(m, text);

  switch (error->domain) {
  case MONGOC_ERROR_SERVER:
  case MONGOC_ERROR_WRITE_CONCERN:
    /* The server ran out of the time it was given (maxTimeMS, or the
     * write concern's wtimeout; a write concern error means the write
     * itself was applied): the deadline passed. */
    if (error->code == SERVER_MAX_TIME_EXPIRED ||
        error->code == SERVER_EXCEEDED_TIME_LIMIT ||
        (error->domain == MONGOC_ERROR_WRITE_CONCERN &&
         error->code == SERVER_WRITE_CONCERN_FAILED))
      return resv__fail_server(err, RESV_ETIMEOUT, (int32_t)error->code,
                               "%s: %s (code %u)", what, text,
                               (unsigned)error->code);
    if (is_unavailable_code(error->code) ||
        (reply && mongoc_error_has_label(reply, "RetryableWriteError")))
      return resv__fail_server(err, late ? RESV_ETIMEOUT : RESV_EUNAVAILABLE,
                               (int32_t)error->code, "%s: %s (code %u)", what,
                               text, (unsigned)error->code);
    return resv__fail_server(err, RESV_ESERVER, (int32_t)error->code,
                             "%s: %s (code %u)", what, text,
                             (unsigned)error->code);
  case MONGOC_ERROR_SERVER_SELECTION:
    return resv__fail(err, RESV_EUNAVAILABLE, "%s: %s", what, text);
  case MONGOC_ERROR_STREAM:
    if (late)
      return resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed: %s", what,
                        text);
    return resv__fail(err, RESV_EUNAVAILABLE, "%s: %s", what, text);
  case MONGOC_ERROR_CLIENT:
    if (error->code == MONGOC_ERROR_CLIENT_AUTHENTICATE)
      return resv__fail(err, RESV_ESERVER, "%s: authentication: %s", what,
                        text);
    if (late)
      return resv__fail(err, RESV_ETIMEOUT, "%s: deadline passed: %s", what,
                        text);
    return resv__fail(err, RESV_ESERVER, "%s: %s", what, text);
  default:
    return resv__fail(err, RESV_ESERVER, "%s: %s (driver domain %u code %u)",
                      what, text, (unsigned)error->domain,
                      (unsigned)error->code);
  }
}
