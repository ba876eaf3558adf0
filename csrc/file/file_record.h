/* file_record.h: the file store's records, as bytes (file_record.c).
 *
 * A record is the value of one LMDB key of a type's database:
 *
 *   kind    1 byte: 'P' pending, 'C' confirmed, 'F' the format record;
 *           'p' and 'c' for a reservation under a hashed key, whose
 *           record also holds its key
 *   link    4 bytes: a reservation, the CRC32C of the LMDB key before
 *           its own; the format record, its format (4 bytes) and then the
 *           CRC32C of the database's last key
 *   key     ('p' and 'c' only) tenant, namespace, key: three strings
 *   owner   ('P', 'C', 'p', 'c') tenant and id: two strings
 *   state   pending: expires_at, 8 bytes, then the count of holds (a
 *           varint) and each attempt (a string); confirmed: version,
 *           8 bytes
 *   crc     4 bytes: CRC32C of the LMDB key followed by every byte of
 *           the record before it
 *
 * A string is its length (a varint: 7 bits a byte, low bits first) and
 * its bytes as they are, so mdb_dump -p shows them; integers are little
 * endian. The checksum covers the key too: a record moved under another
 * key, or a key whose bytes changed, fails it like a damaged value.
 *
 * The links chain the database's keys in order, from the format record
 * (always the first key) to the last key, whose CRC32C the format record
 * holds: so two neighbouring keys whose link agrees prove that no record
 * lies between them, and a lookup answers absent only with that proof (a
 * record hidden or lost by a damaged page breaks the chain). Each insert
 * and delete relinks the record after it (or the format record). */
#ifndef RESV_FILE_RECORD_H
#define RESV_FILE_RECORD_H

#include "base.h"

#include <lmdb.h>

#define RESV__REC_PENDING 'P'
#define RESV__REC_CONFIRMED 'C'
#define RESV__REC_FORMAT 'F'
#define RESV__REC_HOLDS_INLINE 8

/* A decoded reservation, its strings pointing into the LMDB key and value
 * it was read from (valid while the transaction lives and writes nothing
 * that moves them). */
typedef struct resv__file_rec {
  resv_key_t key;
  resv_owner_t owner;
  int32_t state;      /* RESV_STATE_PENDING or RESV_STATE_CONFIRMED */
  int64_t expires_at; /* pending */
  int64_t version;    /* confirmed */
  uint32_t prev;      /* the link: CRC32C of the key before */
  resv_str_t *holds;  /* pending: inline, or malloc'd past HOLDS_INLINE */
  size_t nholds;
  resv_str_t inline_holds[RESV__REC_HOLDS_INLINE];
} resv__file_rec_t;

/* A record being written: bytes in a buffer of its own (malloc'd only
 * past what fits inline). */
typedef struct resv__file_buf {
  unsigned char *p;
  size_t len, cap;
  bool failed; /* out of memory */
  unsigned char inline_bytes[256];
} resv__file_buf_t;

/* CRC32C (Castagnoli) of p[0..n), continuing from crc (0 to start). */
uint32_t resv__crc32c(uint32_t crc, const void *p, size_t n);

/* True when the record's last 4 bytes are the CRC32C of key and the rest. */
bool resv__file_rec_sound(const MDB_val *key, const MDB_val *val);

/* The link of a sound reservation or format record (the key before, or
 * for the format record the last key): false for another record. */
bool resv__file_rec_link(const MDB_val *key, const MDB_val *val, uint32_t *link);

/* The record val of key with its link set to link, into b (initialised
 * by it); false for a record without a link or failing its checksum
 * (never given a new one), or out of memory. */
bool resv__file_rec_relink(resv__file_buf_t *b, const MDB_val *key, const MDB_val *val,
                           uint32_t link);

/* The link of an LMDB key: its CRC32C. */
uint32_t resv__file_key_link(const MDB_val *key);

/* Decodes the reservation of LMDB key key with value val: checks the
 * checksum first, then the layout. The key's parts come from the record
 * of a hashed key, else from key itself (tag, tenant NUL ns NUL key).
 * False with err (RESV_EFORMAT saying what is wrong, or RESV_ENOMEM);
 * out then needs no freeing. */
bool resv__file_rec_decode(const MDB_val *key, const MDB_val *val,
                           resv__file_rec_t *out, resv_error_t *err);
void resv__file_rec_free(resv__file_rec_t *rec);

/* Encodes a reservation for LMDB key key into b (initialised by it; free
 * it with resv__file_buf_free); k is written into the record when the key
 * is hashed (its tag RESV__FILE_TAG_HASHED). False when out of memory. */
bool resv__file_rec_encode(resv__file_buf_t *b, const MDB_val *key,
                           const resv_key_t *k, const resv_owner_t *owner,
                           bool confirmed, int64_t expires_at, int64_t version,
                           const resv_str_t *holds, size_t nholds, uint32_t prev);

/* What a reservation's record says of its state, read from its bytes
 * alone (no checksum, no key): whether it is confirmed and, pending, its
 * expiry. False when they do not read as a reservation. Only a reason to
 * skip a record or to decode it: a damaged record may say anything. */
bool resv__file_rec_glance(const MDB_val *val, bool *confirmed, int64_t *expires_at);

/* The format record of format into b, for LMDB key key, with tail the
 * link of the database's last key. */
bool resv__file_format_encode(resv__file_buf_t *b, const MDB_val *key, int32_t format,
                              uint32_t tail);

/* Reads a format record: true with *format set, or false with why (a
 * static string) when it is damaged or not a format record. */
bool resv__file_format_decode(const MDB_val *key, const MDB_val *val, int32_t *format,
                              const char **why);

void resv__file_buf_free(resv__file_buf_t *b);

/* The key of a direct LMDB key (tag, tenant NUL ns NUL key) into k; false
 * for a key of another shape. */
bool resv__file_key_parts(const MDB_val *key, resv_key_t *k);

/* Where a key and a record may lie: in a read-only transaction, whose
 * pages are the file's, mapped, a key and a record that is not big within
 * their leaf page, a big record within the overflow pages its page header
 * counts (at most RESV__FILE_MAX_PAGES); in a write transaction, whose
 * pages may be copies on the heap, a key of at most RESV__FILE_KEY_MAX
 * bytes and a record of at most RESV__FILE_MAX_PAGES pages. A damaged size
 * that reaches past them is damage, never read (past the end of the file
 * it would kill the process). */
#define RESV__FILE_MAX_PAGES 4096
typedef struct resv__file_bounds {
  size_t psize;   /* LMDB's page size; 0: unknown */
  bool in_pages;  /* the transaction reads the map itself */
} resv__file_bounds_t;

/* The bounds for txn, read-only when read_only says so. */
void resv__file_bounds_of(MDB_txn *txn, bool read_only, resv__file_bounds_t *b);
bool resv__file_in_map(const resv__file_bounds_t *b, const MDB_val *key, const MDB_val *val);

#endif /* RESV_FILE_RECORD_H */
