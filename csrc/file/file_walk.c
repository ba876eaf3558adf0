/* file_walk.c: the walk of data.mdb's B-trees at open.
 *
 * LMDB trusts its pages: a damaged page header, node offset or node flag
 * sends its cursor code past the page, or into a sub-database that is not
 * there, and the process dies (SIGSEGV) before any record's checksum is
 * looked at. In nginx each worker that reads such a page dies, and again
 * after each respawn. So at open, once LMDB has the directory and before
 * anything reads through it, the store walks every page that a lookup or
 * a write of the snapshot can reach, through a read-only map of its own
 * (file_layout.h says what the bytes are), and refuses the store with format when one of them is
 * not what LMDB writes:
 *
 * - every page of a tree is reached once, is within the snapshot's pages,
 *   carries its own number and the flags its level calls for (branch
 *   pages above, leaf pages at the depth the database's record says);
 * - its node offsets and nodes lie within it; in the list of databases
 *   and the free page list its keys are in order and within the keys of
 *   the branch that leads to it (a type's records need not be: each
 *   carries its checksum and its links to its neighbours, file_chain.c, so
 *   a key out of place answers format for the keys it hides, while a name
 *   out of place would hide a whole type and a page list out of place
 *   would hand out a page twice);
 * - a leaf node's flags are the ones resv writes: none or F_BIGDATA, and
 *   F_SUBDATA in the list of databases (one per type, a 48-byte record
 *   whose tree is walked too), never F_DUPDATA; an overflow run carries
 *   its number, P_OVERFLOW and the length its data needs;
 * - each database's record has the flags resv opens it with, the depth
 *   the walk found and the count of entries it found (the store reads
 *   those counts: an empty list of databases is a new store);
 * - each record of the free page list holds a count within it and page
 *   numbers in descending order within the snapshot, none on a tree or on
 *   the list twice.
 *
 * The walk holds a read transaction, so no writer of another process
 * reuses the pages it reads; the snapshot's meta page is the one LMDB
 * reads for it (page txnid & 1), read again when a writer has overwritten
 * it since. A record's bytes are the record checksum's (file_record.c):
 * the walk reads only the first page of an overflow run, except for the
 * free list's. It costs a read of every page in use at each open
 * (bench/open.c measures it). */
#include "file_check.h"
#include "file_layout.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 32 /* LMDB's cursor stack: no tree is deeper */
#define META_TRIES 1000
#define FREE_DB_FLAGS 0x08 /* MDB_INTEGERKEY */

enum kind { FREE_LIST, MAIN_DB, TYPE_DB };

typedef struct db_rec {
  uint16_t flags, depth;
  uint64_t entries, root;
} db_rec_t;

/* A type's database record, found in the main database's leaves. */
typedef struct named {
  char name[RESV__FILE_KEY_MAX + 1];
  unsigned char rec[RESV__DB_BYTES];
} named_t;

typedef struct walk {
  const unsigned char *map; /* data.mdb's pages in use, mapped for reading */
  size_t psize;
  uint64_t last_pg;
  unsigned char *used, *freed; /* one bit a page */
  named_t *named;
  size_t n_named, cap_named;
  enum kind kind;
  const char *db;   /* the database walked, for errors */
  uint64_t entries; /* what the walk counted of it */
  bool nomem;       /* it stopped for want of memory, not for damage */
  char why[600];    /* what is wrong, once it is */
} walk_t;

static bool bad(walk_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool bad(walk_t *w, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->why, sizeof w->why, fmt, ap);
  va_end(ap);
  return false;
}

static db_rec_t db_rec(const unsigned char *b) {
  return (db_rec_t){.flags = resv__u16_at(b, RESV__DB_FLAGS),
                    .depth = resv__u16_at(b, RESV__DB_DEPTH),
                    .entries = resv__u64_at(b, RESV__DB_ENTRIES),
                    .root = resv__u64_at(b, RESV__DB_ROOT)};
}

static bool bit(const unsigned char *map, uint64_t pg) { return map[pg / 8] >> (pg % 8) & 1; }
static void set_bit(unsigned char *map, uint64_t pg) {
  map[pg / 8] |= (unsigned char)(1u << (pg % 8));
}

/* Takes pages pg to pg + n - 1 for a tree: within the snapshot, each
 * once. */
static bool take(walk_t *w, uint64_t pg, uint64_t n, const char *what) {
  if (pg < 2 || n > w->last_pg || pg > w->last_pg + 1 - n)
    return bad(w, "%s page %llu is not among the snapshot's pages (2 to %llu)", what,
               (unsigned long long)pg, (unsigned long long)w->last_pg);
  for (uint64_t i = pg; i < pg + n; i++) {
    if (bit(w->used, i))
      return bad(w, "page %llu is reached twice", (unsigned long long)i);
    set_bit(w->used, i);
  }
  return true;
}

static const unsigned char *page_at(const walk_t *w, uint64_t pg) {
  return w->map + pg * w->psize;
}

/* LMDB's order of keys: the free list's are 8-byte integers, the others'
 * bytes, a shorter key before the longer it begins. */
static int compare(const walk_t *w, const unsigned char *a, size_t an, const unsigned char *b,
                   size_t bn) {
  if (w->kind == FREE_LIST) {
    uint64_t x = resv__u64_at(a, 0), y = resv__u64_at(b, 0);
    return x < y ? -1 : x > y;
  }
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : an < bn ? -1 : an > bn;
}

typedef struct bound {
  const unsigned char *p; /* NULL: no bound */
  size_t n;
} bound_t;

/* An overflow run of a leaf node: its first page carries its number,
 * P_OVERFLOW and the length size bytes need. */
static bool overflow(walk_t *w, uint64_t pg, size_t size) {
  uint64_t n = (RESV__PAGE_HEADER - 1 + size) / w->psize + 1;
  if (!take(w, pg, n, "an overflow")) return false;
  const unsigned char *p = page_at(w, pg);
  if (resv__u64_at(p, 0) != pg || resv__u16_at(p, RESV__PAGE_FLAGS) != RESV__P_OVERFLOW ||
      resv__u32_at(p, RESV__PAGE_RUN) != n)
    return bad(w, "overflow page %llu is not the run of %llu pages its node names",
               (unsigned long long)pg, (unsigned long long)n);
  return true;
}

/* A record of the free list: a count, then as many page numbers in
 * descending order, each free once and never on a tree. */
static bool free_record(walk_t *w, const unsigned char *p, size_t size) {
  uint64_t count = size >= 8 ? resv__u64_at(p, 0) : 0;
  if (size < 8 || size % 8 || count > size / 8 - 1)
    return bad(w, "a record of %zu bytes does not hold a list of free pages", size);
  uint64_t prev = UINT64_MAX;
  for (uint64_t i = 1; i <= count; i++) {
    uint64_t pg = resv__u64_at(p, i * 8);
    if (pg < 2 || pg > w->last_pg || pg >= prev)
      return bad(w, "a list of free pages names page %llu after %llu",
                 (unsigned long long)pg, (unsigned long long)prev);
    if (bit(w->freed, pg)) return bad(w, "page %llu is free twice", (unsigned long long)pg);
    set_bit(w->freed, pg);
    prev = pg;
  }
  return true;
}

/* A leaf node at off of page p (pg): flags, size, what its data holds. */
static bool leaf_node(walk_t *w, const unsigned char *p, uint64_t pg, unsigned i, size_t off,
                      size_t ksize) {
  uint16_t flags = resv__u16_at(p, off + 4);
  size_t size = resv__u16_at(p, off) | (size_t)resv__u16_at(p, off + 2) << 16;
  const unsigned char *data = p + off + RESV__NODE_HEADER + ksize;
  bool big = flags == RESV__F_BIGDATA;
  bool sub = flags == RESV__F_SUBDATA && w->kind == MAIN_DB;
  if (flags && !big && !sub)
    return bad(w, "page %llu's node %u has flags 0x%x, which resv never writes",
               (unsigned long long)pg, i, flags);
  if (off + RESV__NODE_HEADER + ksize + (big ? 8 : size) > w->psize)
    return bad(w, "page %llu's node %u runs past the page", (unsigned long long)pg, i);
  w->entries++;
  if (sub) {
    if (size != RESV__DB_BYTES)
      return bad(w, "page %llu's node %u names a database in %zu bytes",
                 (unsigned long long)pg, i, size);
    if (w->n_named == w->cap_named) {
      size_t cap = w->cap_named ? 2 * w->cap_named : 8;
      named_t *n = realloc(w->named, cap * sizeof *n);
      if (!n) {
        w->nomem = true;
        return bad(w, "out of memory for %zu databases", cap);
      }
      w->named = n;
      w->cap_named = cap;
    }
    named_t *n = &w->named[w->n_named++];
    memcpy(n->name, p + off + RESV__NODE_HEADER, ksize);
    n->name[ksize] = '\0';
    memcpy(n->rec, data, RESV__DB_BYTES);
    return true;
  }
  if (big) {
    uint64_t run = resv__u64_at(data, 0);
    if (!overflow(w, run, size)) return false;
    data = page_at(w, run) + RESV__PAGE_HEADER;
  }
  return w->kind != FREE_LIST || free_record(w, data, size);
}

/* Page pg at level (1: the root) of a tree depth levels deep, its keys
 * within [lo, hi). */
static bool walk_page(walk_t *w, uint64_t pg, unsigned level, unsigned depth, bound_t lo,
                      bound_t hi) {
  if (!take(w, pg, 1, "a tree's")) return false;
  const unsigned char *p = page_at(w, pg);
  bool leaf = level == depth;
  uint16_t flags = resv__u16_at(p, RESV__PAGE_FLAGS);
  if (resv__u64_at(p, 0) != pg)
    return bad(w, "page %llu says it is page %llu", (unsigned long long)pg,
               (unsigned long long)resv__u64_at(p, 0));
  if (flags != (leaf ? RESV__P_LEAF : RESV__P_BRANCH))
    return bad(w, "page %llu has flags 0x%x where a %s page belongs (level %u of %u)",
               (unsigned long long)pg, flags, leaf ? "leaf" : "branch", level, depth);
  size_t lower = resv__u16_at(p, RESV__PAGE_LOWER), upper = resv__u16_at(p, RESV__PAGE_UPPER);
  if (lower < RESV__PAGE_HEADER + 2 || lower % 2 || upper < lower || upper > w->psize)
    return bad(w, "page %llu's bounds (%zu, %zu) do not hold a node", (unsigned long long)pg,
               lower, upper);
  unsigned n = (unsigned)(lower - RESV__PAGE_HEADER) / 2;
  bound_t prev = lo;
  for (unsigned i = 0; i < n; i++) {
    size_t off = resv__u16_at(p, RESV__PAGE_HEADER + 2 * i);
    if (off < upper || off % 2 || off + RESV__NODE_HEADER > w->psize)
      return bad(w, "page %llu's node %u is at %zu, outside its nodes (%zu to %zu)",
                 (unsigned long long)pg, i, off, upper, w->psize);
    size_t ksize = resv__u16_at(p, off + 6);
    if (ksize > RESV__FILE_KEY_MAX || off + RESV__NODE_HEADER + ksize > w->psize)
      return bad(w, "page %llu's node %u has a key of %zu bytes", (unsigned long long)pg, i,
                 ksize);
    /* A branch's first key is not one: its child holds what is below the
     * second. */
    bound_t k = {p + off + RESV__NODE_HEADER, ksize};
    if (leaf || i > 0) {
      if (ksize == 0 || (w->kind == FREE_LIST && ksize != 8))
        return bad(w, "page %llu's node %u has a key of %zu bytes", (unsigned long long)pg,
                   i, ksize);
      int c = prev.p && w->kind != TYPE_DB ? compare(w, prev.p, prev.n, k.p, k.n) : -1;
      if ((i > 0 || !leaf) ? c >= 0 : c > 0)
        return bad(w, "page %llu's node %u is out of order", (unsigned long long)pg, i);
      if (hi.p && w->kind != TYPE_DB && compare(w, k.p, k.n, hi.p, hi.n) >= 0)
        return bad(w, "page %llu's node %u is past the keys its branch leads to",
                   (unsigned long long)pg, i);
      prev = k;
    }
    if (leaf && !leaf_node(w, p, pg, i, off, ksize)) return false;
  }
  if (leaf) return true;
  for (unsigned i = 0; i < n; i++) {
    size_t off = resv__u16_at(p, RESV__PAGE_HEADER + 2 * i);
    uint64_t child = resv__node_child(p + off);
    bound_t clo = i ? (bound_t){p + off + RESV__NODE_HEADER, resv__u16_at(p, off + 6)} : lo;
    bound_t chi = hi;
    if (i + 1 < n) {
      size_t next = resv__u16_at(p, RESV__PAGE_HEADER + 2 * (i + 1));
      chi = (bound_t){p + next + RESV__NODE_HEADER, resv__u16_at(p, next + 6)};
    }
    if (!walk_page(w, child, level + 1, depth, clo, chi)) return false;
  }
  return true;
}

/* One database from its record: its tree, against the record's counts. */
static bool walk_db(walk_t *w, const unsigned char *b, enum kind kind, const char *db) {
  db_rec_t r = db_rec(b);
  w->kind = kind;
  w->db = db;
  w->entries = 0;
  if (r.flags != (kind == FREE_LIST ? FREE_DB_FLAGS : 0))
    return bad(w, "its record has flags 0x%x, which resv never sets", r.flags);
  if (r.root != RESV__NO_PAGE) {
    if (r.depth < 1 || r.depth > MAX_DEPTH)
      return bad(w, "its record says it is %u levels deep", r.depth);
    if (!walk_page(w, r.root, 1, r.depth, (bound_t){0}, (bound_t){0})) return false;
  } else if (r.depth) {
    return bad(w, "its record says it is empty and %u levels deep", r.depth);
  }
  if (w->entries != r.entries)
    return bad(w, "its record counts %llu entries; its tree has %llu",
               (unsigned long long)r.entries, (unsigned long long)w->entries);
  return true;
}

/* Every tree of the snapshot whose meta page is meta. */
static bool walk_all(walk_t *w, const unsigned char *meta) {
  if (!walk_db(w, meta + RESV__META_FREE_DB, FREE_LIST, "the free page list") ||
      !walk_db(w, meta + RESV__META_MAIN_DB, MAIN_DB, "the list of databases"))
    return false;
  for (size_t i = 0; i < w->n_named; i++)
    if (!walk_db(w, w->named[i].rec, TYPE_DB, w->named[i].name)) return false;
  for (uint64_t i = 0; i <= w->last_pg / 8; i++)
    if (w->used[i] & w->freed[i]) {
      uint64_t pg = i * 8;
      while (!(bit(w->used, pg) && bit(w->freed, pg))) pg++;
      w->db = "the free page list";
      return bad(w, "page %llu is on it and on a tree", (unsigned long long)pg);
    }
  return true;
}

/* Begins a read transaction and reads its snapshot's meta page (page
 * txnid & 1) from data.mdb (fd). A commit two after the snapshot's
 * overwrites that page, and cannot begin to before the one in between has
 * published its transaction id in lock.mdb, where every read transaction
 * begins: so what was read is the snapshot's when its transaction id is
 * the snapshot's and, once it has been read, a read transaction still
 * begins at the snapshot. (Not the newest meta page of the map, which
 * mdb_env_info reports: a writer killed after writing its meta page and
 * before publishing it leaves that page one ahead of every read, until
 * the next writer takes LMDB's lock and adopts it.) */
static int begin(MDB_env *mdb, int fd, size_t psize, MDB_txn **txn, unsigned char *meta) {
  for (int i = 0; i < META_TRIES; i++) {
    MDB_txn *after;
    int rc = mdb_txn_begin(mdb, NULL, MDB_RDONLY, txn);
    if (rc) return rc;
    uint64_t id = mdb_txn_id(*txn);
    if (pread(fd, meta, RESV__META_BYTES, (off_t)((id & 1) * psize)) != RESV__META_BYTES)
      rc = errno ? errno : EIO;
    else if (resv__u64_at(meta, RESV__META_TXNID) == id &&
             (rc = mdb_txn_begin(mdb, NULL, MDB_RDONLY, &after)) == 0) {
      bool still = mdb_txn_id(after) == id;
      mdb_txn_abort(after);
      if (still) return 0;
    }
    mdb_txn_abort(*txn);
    *txn = NULL;
    if (rc) return rc;
  }
  return EAGAIN;
}

bool resv__file_walk_trees(MDB_env *mdb, const char *path, resv_error_t *err) {
  char file[PATH_MAX + 16];
  snprintf(file, sizeof file, "%s/data.mdb", path);
  walk_t w = {0};
  MDB_txn *txn = NULL;
  MDB_stat st;
  struct stat fst;
  int fd, rc = mdb_env_get_fd(mdb, &fd);
  if (!rc) rc = mdb_env_stat(mdb, &st);
  if (rc)
    return resv__fail(err, RESV_EUNAVAILABLE, "open: cannot look at %s: %s", file,
                      mdb_strerror(rc));
  w.psize = st.ms_psize;
  unsigned char meta[RESV__META_BYTES];
  errno = 0;
  if ((rc = begin(mdb, fd, w.psize, &txn, meta)))
    return resv__fail(err, RESV_EUNAVAILABLE, "open: cannot read %s's meta page: %s", file,
                      rc == EAGAIN ? "other processes' commits changed it at every try"
                                   : mdb_strerror(rc));
  uint64_t id = mdb_txn_id(txn);
  w.last_pg = resv__u64_at(meta, RESV__META_LAST_PG);
  /* The snapshot's pages, once the file is seen to hold them (a page past
   * the end of the file would be SIGBUS). */
  size_t size = (size_t)(w.last_pg + 1) * w.psize, bits = (size_t)(w.last_pg / 8 + 1);
  void *map = MAP_FAILED;
  int code = RESV_EFORMAT; /* of what went wrong, when ok is false */
  bool ok = false;
  if (fstat(fd, &fst) != 0) {
    code = RESV_EUNAVAILABLE;
    bad(&w, "its size cannot be read: %s", strerror(errno));
  } else if ((uint64_t)fst.st_size < size) {
    bad(&w, "the file is %lld bytes, shorter than its %llu pages", (long long)fst.st_size,
        (unsigned long long)w.last_pg + 1);
  } else if ((map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    code = RESV_EUNAVAILABLE;
    bad(&w, "it cannot be mapped: %s", strerror(errno));
  } else if (!(w.used = calloc(bits, 1)) || !(w.freed = calloc(bits, 1))) {
    code = RESV_ENOMEM;
    bad(&w, "out of memory for the walk");
  } else {
    w.map = map;
    ok = walk_all(&w, meta);
    if (w.nomem) code = RESV_ENOMEM;
  }
  mdb_txn_abort(txn);
  if (map != MAP_FAILED) munmap(map, size);
  if (!ok && code == RESV_EFORMAT)
    resv__fail(err, code,
               "path: %s is damaged: in %s, %s (as of transaction %llu); nothing was "
               "read from it through LMDB: " RESV__FILE_REMEDY, file,
               w.db ? w.db : "the file", w.why, (unsigned long long)id, path);
  else if (!ok)
    resv__fail(err, code, "open: %s: %s", file, w.why);
  free(w.used);
  free(w.freed);
  free(w.named); /* after the error, which may name one */
  return ok;
}

int resv__file_sound(const char *path, resv_error_t *err) {
  char file[PATH_MAX + 16];
  struct stat st;
  snprintf(file, sizeof file, "%s/data.mdb", path);
  if (stat(file, &st) != 0 || st.st_size == 0) return 1; /* nothing to walk */
  resv_error_t why = {0};
  if (!resv__file_check(path, &why)) {
    *err = why;
    return why.code == RESV_EFORMAT ? 0 : -1;
  }
  MDB_env *mdb;
  int rc = mdb_env_create(&mdb);
  if (rc) {
    resv__fail(err, RESV_ENOMEM, "open: %s", mdb_strerror(rc));
    return -1;
  }
  /* Read only, without the lock file: no process has the store open. */
  if ((rc = mdb_env_open(mdb, path, MDB_RDONLY | MDB_NOLOCK | MDB_NOTLS, 0))) {
    mdb_env_close(mdb);
    resv__fail(err, RESV_EUNAVAILABLE, "open: %s: %s", file, mdb_strerror(rc));
    return -1;
  }
  bool ok = resv__file_walk_trees(mdb, path, &why);
  mdb_env_close(mdb);
  if (ok) return 1;
  *err = why;
  return why.code == RESV_EFORMAT ? 0 : -1;
}
