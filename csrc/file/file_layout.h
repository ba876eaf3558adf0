/* file_layout.h: LMDB 0.9's layout of data.mdb, as the store's own checks
 * read it (file_check.c, file_walk.c), on a 64-bit little-endian machine
 * (lmdb.h's MDB_DATA_VERSION 1; Debian builds without MDB_DEVEL).
 *
 * Every page begins with a 16-byte header: its page number (8 bytes), a
 * pad (2), its flags (2), then for a branch or leaf page the bounds of its
 * free space (lower, upper: 2 each) or for the first of a run of overflow
 * pages the run's length (4). A branch or leaf page's node offsets (2
 * bytes each, from the page's start) follow the header, so it holds
 * (lower - 16) / 2 nodes; the nodes sit between upper and the page's end.
 * A node is 8 bytes (data size or child page number: lo 2, hi 2, flags 2,
 * key size 2), its key, then in a leaf its data (or, with F_BIGDATA, the
 * number of the overflow page that holds it). In a branch node the flags
 * field is the page number's top 16 bits.
 *
 * A database's record (MDB_db, 48 bytes: in the meta page for the free
 * page list and the main database, in a main database's F_SUBDATA node for
 * a named one): pad 4 (the free list's holds the page size), flags 2,
 * depth 2, branch, leaf and overflow page counts, entries, root page (8
 * each). The meta page after its header: magic 0xBEEFC0DE, version,
 * address, map size, the two MDB_db records, the last page used, the
 * transaction id. */
#ifndef RESV_FILE_LAYOUT_H
#define RESV_FILE_LAYOUT_H

#include <stdint.h>
#include <string.h>

#define RESV__P_BRANCH 0x01
#define RESV__P_LEAF 0x02
#define RESV__P_OVERFLOW 0x04
#define RESV__P_META 0x08
#define RESV__F_BIGDATA 0x01
#define RESV__F_SUBDATA 0x02
#define RESV__NO_PAGE UINT64_MAX /* an empty database's root */

#define RESV__PAGE_HEADER 16
#define RESV__PAGE_FLAGS 10
#define RESV__PAGE_LOWER 12
#define RESV__PAGE_UPPER 14
#define RESV__PAGE_RUN 12 /* an overflow run's length */
#define RESV__NODE_HEADER 8
#define RESV__FILE_KEY_MAX 511 /* MDB_MAXKEYSIZE of Debian's build */

#define RESV__DB_BYTES 48
#define RESV__DB_FLAGS 4
#define RESV__DB_DEPTH 6
#define RESV__DB_ENTRIES 32
#define RESV__DB_ROOT 40

#define RESV__META_MAGIC_AT 16
#define RESV__META_VERSION_AT 20
#define RESV__META_MAPSIZE_AT 32
#define RESV__META_FREE_DB 40 /* its pad, first, is the page size */
#define RESV__META_MAIN_DB 88
#define RESV__META_LAST_PG 136
#define RESV__META_TXNID 144
#define RESV__META_BYTES 152

static inline uint16_t resv__u16_at(const unsigned char *b, size_t off) {
  uint16_t v;
  memcpy(&v, b + off, sizeof v);
  return v;
}

static inline uint32_t resv__u32_at(const unsigned char *b, size_t off) {
  uint32_t v;
  memcpy(&v, b + off, sizeof v);
  return v;
}

static inline uint64_t resv__u64_at(const unsigned char *b, size_t off) {
  uint64_t v;
  memcpy(&v, b + off, sizeof v);
  return v;
}

/* The child page a branch node at n names. */
static inline uint64_t resv__node_child(const unsigned char *n) {
  return resv__u16_at(n, 0) | (uint64_t)resv__u16_at(n, 2) << 16 |
         (uint64_t)resv__u16_at(n, 4) << 32;
}

#endif /* RESV_FILE_LAYOUT_H */
