/* doc_template.c: recording a document written by doc_bson.h's writer,
 * and writing it again with other values (doc_template.h).
 *
 * The recorder learns of every string and int64 the writer writes and of
 * every document or array it ends (the writer's hooks): a placeholder's
 * string or int64 becomes a slot, and a document that holds a string
 * slot becomes a fix, whose length is the recorded one plus what the
 * strings inside grew by. Replaying copies the bytes between the slots
 * and writes each slot's value; a fix's offset moves by what the strings
 * before it grew by. Anything else the writer wrote is constant. */
#include "doc_template.h"

#include <string.h>

static void add_slot(resv__tpl_t *t, size_t at, size_t tlen, bool is_int, size_t value) {
  BSON_ASSERT(t->nslots < RESV__TPL_SLOTS);
  resv__tpl_slot_t *s = &t->slots[t->nslots++];
  s->at = (uint32_t)at;
  s->tlen = (uint32_t)tlen;
  s->is_int = is_int;
  s->value = (uint8_t)value;
}

static void rec_utf8(resv__bw_t *w, const char *s, size_t len) {
  resv__bw_rec_t *rec = w->rec;
  for (size_t i = 0; i < rec->nstrs; i++)
    if (s == rec->strs[i]) {
      add_slot(rec->tpl, w->len - rec->base, len, false, i);
      rec->tpl->uses[i]++;
      return;
    }
}

static void rec_int64(resv__bw_t *w, int64_t v) {
  resv__bw_rec_t *rec = w->rec;
  for (size_t i = 0; i < rec->nints; i++)
    if (v == rec->ints[i]) {
      add_slot(rec->tpl, w->len - rec->base, 8, true, i);
      return;
    }
}

static void rec_end(resv__bw_t *w, size_t at) {
  resv__bw_rec_t *rec = w->rec;
  resv__tpl_t *t = rec->tpl;
  if (at < rec->base)
    return; /* a document begun before the recording */
  size_t rel = at - rec->base, first = t->nslots;
  bool strings = false;
  while (first > 0 && t->slots[first - 1].at > rel) {
    first--;
    strings = strings || !t->slots[first].is_int;
  }
  if (!strings)
    return; /* its length is the recorded one whatever the values */
  if (t->nfixes == t->fixes_cap) {
    t->fixes_cap = t->fixes_cap ? 2 * t->fixes_cap : 16;
    t->fixes = bson_realloc(t->fixes, t->fixes_cap * sizeof *t->fixes);
  }
  resv__tpl_fix_t *f = &t->fixes[t->nfixes++];
  f->at = (uint32_t)rel;
  f->tlen = (uint32_t)(w->len - at);
  f->first = (uint16_t)first;
  f->last = (uint16_t)t->nslots;
}

/* The writer's hooks while it records. */
static const resv__bw_hooks_t recorder = {.utf8 = rec_utf8, .int64 = rec_int64, .end = rec_end};

void resv__tpl_record_begin(resv__bw_rec_t *rec, resv__tpl_t *t, resv__bw_t *w) {
  memset(t, 0, sizeof *t);
  t->nstrs = rec->nstrs;
  rec->tpl = t;
  rec->base = w->len;
  w->rec = rec;
  w->hooks = &recorder;
}

void resv__tpl_record_end(resv__bw_rec_t *rec, resv__bw_t *w) {
  resv__tpl_t *t = rec->tpl;
  t->len = w->len - rec->base;
  t->bytes = bson_malloc(t->len ? t->len : 1);
  memcpy(t->bytes, w->buf + rec->base, t->len);
  w->rec = NULL;
  w->hooks = NULL;
}

/* Writes the string element value v at out; returns its end. */
static uint8_t *put_string(uint8_t *restrict out, resv_str_t v) {
  resv__bw_put_u32(out, (uint32_t)(v.len + 1));
  if (v.len)
    memcpy(out + 4, v.ptr, v.len);
  out[4 + v.len] = 0;
  return out + 5 + v.len;
}

void resv__tpl_write(const resv__tpl_t *t, const resv_str_t *strs, const int64_t *ints,
                     resv__bw_t *w) {
  size_t more = t->len, n = t->nslots;
  for (size_t i = 0; i < t->nstrs; i++)
    more += t->uses[i] * strs[i].len;
  resv__bw_reserve(w, more);

  /* grown[i]: how much longer than recorded the strings of slots before
   * slot i are. */
  ptrdiff_t grown[RESV__TPL_SLOTS + 1], g = 0;
  const uint8_t *restrict in = t->bytes;
  size_t base = w->len, from = 0;
  uint8_t *restrict out = w->buf + base;
  grown[0] = 0;
  for (size_t i = 0; i < n; i++) {
    resv__tpl_slot_t s = t->slots[i];
    memcpy(out, in + from, s.at - from);
    out += s.at - from;
    if (s.is_int) {
      uint64_t le = BSON_UINT64_TO_LE((uint64_t)ints[s.value]);
      memcpy(out, &le, 8);
      out += 8;
      from = s.at + 8;
    } else {
      resv_str_t v = strs[s.value];
      out = put_string(out, v);
      from = s.at + 5 + s.tlen;
      g += (ptrdiff_t)v.len - (ptrdiff_t)s.tlen;
    }
    grown[i + 1] = g;
  }
  memcpy(out, in + from, t->len - from);
  out += t->len - from;
  w->len = (size_t)(out - w->buf);
  uint8_t *at = w->buf + base;
  for (size_t i = 0, nf = t->nfixes; i < nf; i++) {
    resv__tpl_fix_t f = t->fixes[i];
    resv__bw_put_u32(at + f.at + grown[f.first],
                     (uint32_t)((ptrdiff_t)f.tlen + grown[f.last] - grown[f.first]));
  }
}

void resv__tpl_free(resv__tpl_t *t) {
  bson_free(t->bytes);
  bson_free(t->fixes);
  t->bytes = NULL;
  t->fixes = NULL;
}
