/* doc_template.h: a document written once by doc_bson.h's writer and
 * replayed with other values.
 *
 * A document whose shape is fixed and whose values change (a filter or an
 * update pipeline of the MongoDB store) is recorded once: its builder
 * runs on a writer with placeholder values, strings the recorder knows by
 * their address and int64s it knows by their value, and the recorder
 * notes where each one went and which enclosing documents' lengths depend
 * on a string's length. resv__tpl_write then copies the recorded bytes
 * with the call's values in the placeholders' places and fixes those
 * lengths: the same bytes the builder writes for those values, for a few
 * copies instead of an append per element.
 *
 * A template holds the contents of a document (its elements, not the
 * length or the final NUL), so it is written into an open writer, as the
 * builder would be, and the caller ends it. */
#ifndef RESV_DOC_TEMPLATE_H
#define RESV_DOC_TEMPLATE_H

#include "base.h"
#include "doc_bson.h"

#define RESV__TPL_STRS 8   /* string values a template may take */
#define RESV__TPL_INTS 4   /* int64 values */
#define RESV__TPL_SLOTS 64 /* places they may take in one document */

/* A value's place: the offset of its BSON value (a string's int32 length,
 * an int64's 8 bytes) in the template, the placeholder string's length,
 * and which value it is. */
typedef struct resv__tpl_slot {
  uint32_t at;
  uint32_t tlen;
  uint8_t is_int;
  uint8_t value;
} resv__tpl_slot_t;

/* A document or array length that depends on strings: its offset and
 * length in the template, and the slots before it and before its end. */
typedef struct resv__tpl_fix {
  uint32_t at;
  uint32_t tlen;
  uint16_t first, last;
} resv__tpl_fix_t;

typedef struct resv__tpl {
  uint8_t *bytes; /* bson_malloc'd */
  size_t len;
  resv__tpl_slot_t slots[RESV__TPL_SLOTS];
  size_t nslots;
  size_t nstrs;                /* the string values it takes */
  size_t uses[RESV__TPL_STRS]; /* how many slots each has */
  resv__tpl_fix_t *fixes; /* bson_malloc'd */
  size_t nfixes, fixes_cap;
} resv__tpl_t;

/* A recording: the placeholders' addresses (string value i is the one
 * whose bytes are strs[i]) and values (int64 value i is ints[i]), which
 * the builder must not write for anything else. */
typedef struct resv__bw_rec {
  resv__tpl_t *tpl;
  const char *strs[RESV__TPL_STRS];
  int64_t ints[RESV__TPL_INTS];
  size_t nstrs, nints;
  size_t base; /* where the contents begin in the writer */
} resv__bw_rec_t;

/* Starts recording into t (zeroed by it) what is written into w, an open
 * writer, from now on. */
void resv__tpl_record_begin(resv__bw_rec_t *rec, resv__tpl_t *t, resv__bw_t *w);
/* Ends the recording: t keeps what was written since the beginning. */
void resv__tpl_record_end(resv__bw_rec_t *rec, resv__bw_t *w);

/* Appends t to w with strs[i] (NULL ptr with len 0 is empty) for string
 * value i and ints[i] for int64 value i: as many as the recording's
 * nstrs and nints. */
void resv__tpl_write(const resv__tpl_t *t, const resv_str_t *strs, const int64_t *ints,
                     resv__bw_t *w);

void resv__tpl_free(resv__tpl_t *t);

#endif /* RESV_DOC_TEMPLATE_H */
