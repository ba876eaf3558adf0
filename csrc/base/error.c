/* error.c: errors as values, and the stable names of codes and answers.
 *
 * Every function that can fail takes an optional resv_error_t and returns
 * false (or NULL); resv__fail fills the struct in one line so failure paths
 * stay short. The names here are the strings Lua users match on
 * ("invalid: ..."), so they never change. */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool fail_v(resv_error_t *err, int32_t code, int32_t server_code,
                   const char *fmt, va_list ap) {
  if (err) {
    err->code = code;
    err->server_code = server_code;
    vsnprintf(err->message, sizeof err->message, fmt, ap);
  }
  return false;
}

bool resv__fail(resv_error_t *err, int32_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(err, code, 0, fmt, ap);
  va_end(ap);
  return false;
}

bool resv__fail_server(resv_error_t *err, int32_t code, int32_t server_code,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fail_v(err, code, server_code, fmt, ap);
  va_end(ap);
  return false;
}

void resv__error_clear(resv_error_t *err) {
  if (err) {
    err->code = RESV_OK;
    err->server_code = 0;
    err->message[0] = '\0';
  }
}

const char *resv_code_name(int32_t code) {
  static const char *const names[] = {
      "ok",     "invalid", "busy",   "timeout", "unavailable",
      "format", "server",  "closed", "nomem"};
  if (code < 0 || (size_t)code >= sizeof names / sizeof names[0]) return "unknown";
  return names[code];
}

const char *resv_status_name(int32_t status) {
  static const char *const names[] = {
      "none", "reserved", "confirmed", "conflict", "abandoned",
      "kept", "absent",   "released",  "pending",  "expired",
      "swept"};
  if (status < 0 || (size_t)status >= sizeof names / sizeof names[0]) return "unknown";
  return names[status];
}

const char *resv_state_name(int32_t state) {
  static const char *const names[] = {"none", "pending", "confirmed"};
  if (state < 0 || (size_t)state >= sizeof names / sizeof names[0]) return "unknown";
  return names[state];
}

/* The Makefile passes the rockspec's version. */
#ifndef RESV_VERSION
#error "RESV_VERSION is not defined: build with the project's Makefile"
#endif
const char *resv_version(void) { return RESV_VERSION; }

void resv__format_problem(char *buf, size_t size, bool numeric, double format) {
  if (!numeric)
    snprintf(buf, size, "the format record has no numeric format");
  else
    snprintf(buf, size, "the format record names format %g; this store reads and writes "
             "format 1", format);
}

bool resv__fail_format(resv_error_t *err, const char *collection, const char *why) {
  return resv__fail(err, RESV_EFORMAT, "%s: %s; nothing was written", collection, why);
}

bool resv__fail_format_number(resv_error_t *err, const char *collection, bool numeric,
                              double format) {
  char why[128];
  resv__format_problem(why, sizeof why, numeric, format);
  return resv__fail_format(err, collection, why);
}

bool resv__fail_holds_full(resv_error_t *err, int32_t max_holds) {
  return resv__fail(err, RESV_EINVALID,
                    "attempt: the reservation already has %d holds "
                    "(max_holds); abandon one or let it expire; nothing was "
                    "written",
                    (int)max_holds);
}
