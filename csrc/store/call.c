/* call.c: one-line wrappers over resv_call for C callers, who would rather
 * pass arguments than fill a resv_request_t. */
#include "internal.h"

#include <string.h>

resv_str_t resv_cstr(const char *s) {
  resv_str_t out = {s ? s : "", s ? strlen(s) : 0};
  return out;
}

bool resv_reserve(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  int64_t ttl_ms, resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RESERVE, .key = *key, .owner = *owner,
                      .attempt = attempt, .ttl_ms = ttl_ms};
  return resv_call(type, &r, answer, err);
}

bool resv_confirm(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, int64_t version,
                  resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_CONFIRM, .key = *key, .owner = *owner,
                      .version = version};
  return resv_call(type, &r, answer, err);
}

bool resv_abandon(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_str_t attempt,
                  resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_ABANDON, .key = *key, .owner = *owner,
                      .attempt = attempt};
  return resv_call(type, &r, answer, err);
}

bool resv_release(resv_type_t *type, const resv_key_t *key,
                  const resv_owner_t *owner, resv_answer_t *answer,
                  resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_RELEASE, .key = *key, .owner = *owner};
  return resv_call(type, &r, answer, err);
}

bool resv_get(resv_type_t *type, const resv_key_t *key, resv_answer_t *answer,
              resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_GET, .key = *key};
  return resv_call(type, &r, answer, err);
}

bool resv_sweep(resv_type_t *type, resv_answer_t *answer, resv_error_t *err) {
  resv_request_t r = {.op = RESV_OP_SWEEP};
  return resv_call(type, &r, answer, err);
}
