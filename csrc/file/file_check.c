/* file_check.c: what the file store checks before LMDB opens a directory.
 *
 * LMDB maps data.mdb and reads its pages where the map puts them: a page
 * past the end of a truncated file is not an error but SIGBUS, the death
 * of the process (in nginx, of every worker after each respawn), and with
 * MDB_WRITEMAP LMDB even extends a short file with zeros at open. So the
 * store reads the two meta pages itself first, with pread, and refuses
 * with format a data.mdb whose meta pages are damaged, or that is shorter
 * than the meta page LMDB would use says ((last page + 1) x page size).
 *
 * A meta page (file_layout.h) is whole here when its fields hold
 * together: the marks, a page size that is a power of two, its pages
 * within its map size, roots within its pages. Pages 0 and 1 are the two
 * metas; a commit writes the older one, and LMDB uses the one with the
 * larger transaction id.
 *
 * The same pass opens data.mdb and lock.mdb for reading and writing as
 * LMDB will (or checks that the directory lets the process make them), so
 * that a permission refused names the file, the operation and the user
 * the process runs as: LMDB's own answer is a bare errno. */
#include "file_check.h"
#include "file_layout.h"

#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define META_MAGIC 0xBEEFC0DEu
#define META_VERSION 1u
#define MIN_PSIZE 512
#define MAX_PSIZE 65536

typedef struct meta {
  bool lmdb_takes; /* passes LMDB's own checks (marks, version) */
  bool whole;      /* and holds together */
  uint64_t psize, last_pg, txnid;
} meta_t;

/* Reads meta page n at offset off; false when the file ends before it. */
static bool read_meta(int fd, uint64_t n, off_t off, meta_t *m) {
  unsigned char b[RESV__META_BYTES];
  *m = (meta_t){0};
  if (pread(fd, b, sizeof b, off) != (ssize_t)sizeof b) return false;
  m->lmdb_takes = (resv__u16_at(b, RESV__PAGE_FLAGS) & RESV__P_META) &&
                  resv__u32_at(b, RESV__META_MAGIC_AT) == META_MAGIC &&
                  resv__u32_at(b, RESV__META_VERSION_AT) == META_VERSION;
  m->psize = resv__u32_at(b, RESV__META_FREE_DB);
  m->last_pg = resv__u64_at(b, RESV__META_LAST_PG);
  m->txnid = resv__u64_at(b, RESV__META_TXNID);
  /* LMDB never writes past its map */
  uint64_t mapsize = resv__u64_at(b, RESV__META_MAPSIZE_AT);
  uint64_t free_root = resv__u64_at(b, RESV__META_FREE_DB + RESV__DB_ROOT);
  uint64_t main_root = resv__u64_at(b, RESV__META_MAIN_DB + RESV__DB_ROOT);
  bool roots = (free_root == RESV__NO_PAGE || (free_root >= 2 && free_root <= m->last_pg)) &&
               (main_root == RESV__NO_PAGE || (main_root >= 2 && main_root <= m->last_pg));
  m->whole = m->lmdb_takes && resv__u64_at(b, 0) == n && m->psize >= MIN_PSIZE &&
             m->psize <= MAX_PSIZE && (m->psize & (m->psize - 1)) == 0 &&
             m->last_pg >= 1 && m->last_pg < (UINT64_MAX / MAX_PSIZE) &&
             (m->last_pg + 1) * m->psize <= mapsize && roots;
  return true;
}

/* The second meta page sits one page in: at meta 0's page size when that
 * one is whole, else at whichever page size finds a meta of that size. */
static void read_second(int fd, const meta_t *m0, meta_t *m1) {
  if (m0->whole) {
    read_meta(fd, 1, (off_t)m0->psize, m1);
    return;
  }
  for (uint64_t ps = MIN_PSIZE; ps <= MAX_PSIZE; ps *= 2)
    if (read_meta(fd, 1, (off_t)ps, m1) && m1->whole && m1->psize == ps) return;
  *m1 = (meta_t){0};
}

/* Refuses a data.mdb (file in the directory path, open as fd, size bytes)
 * whose meta pages do not hold, or that is shorter than the meta LMDB
 * would use says. */
static bool check_metas(const char *path, const char *file, int fd, off_t size,
                        resv_error_t *err) {
  meta_t m[2];
  read_meta(fd, 0, 0, &m[0]);
  read_second(fd, &m[0], &m[1]);
  if (!m[0].whole && !m[1].whole)
    return resv__fail(err, RESV_EFORMAT,
                      "path: %s is not a resv store, or a damaged one: neither of its "
                      "two meta pages is whole (the file is %lld bytes); nothing was "
                      "read from it", file, (long long)size);
  /* LMDB refuses a file when either meta lacks its marks, and otherwise
   * uses the one with the larger transaction id, whole or not. */
  int use = m[1].txnid > m[0].txnid ? 1 : 0;
  int bad = !m[0].lmdb_takes ? 0 : !m[1].lmdb_takes ? 1 : !m[use].whole ? use : -1;
  if (bad >= 0)
    return resv__fail(err, RESV_EFORMAT,
                      "path: %s is damaged: its meta page %d is not whole (the other "
                      "one, of transaction %llu, is); nothing was read from it: "
                      RESV__FILE_REMEDY, file, bad, (unsigned long long)m[1 - bad].txnid,
                      path);
  uint64_t need = (m[use].last_pg + 1) * m[use].psize;
  if ((uint64_t)size < need)
    return resv__fail(err, RESV_EFORMAT,
                      "path: %s is damaged: it is %lld bytes, shorter than its meta "
                      "page says (%llu bytes: pages 0 to %llu of %llu bytes, as of "
                      "transaction %llu): the file was truncated, or that meta page "
                      "is damaged; nothing was read from it: " RESV__FILE_REMEDY, file,
                      (long long)size, (unsigned long long)need,
                      (unsigned long long)m[use].last_pg,
                      (unsigned long long)m[use].psize, (unsigned long long)m[use].txnid,
                      path);
  return true;
}

/* "user nobody (uid 65534)" for uid, or "uid N" when it has no name. */
static void user_name(uid_t uid, char *buf, size_t size) {
  struct passwd pw, *found = NULL;
  char room[1024];
  if (getpwuid_r(uid, &pw, room, sizeof room, &found) == 0 && found)
    snprintf(buf, size, "user %s (uid %u)", found->pw_name, (unsigned)uid);
  else
    snprintf(buf, size, "uid %u", (unsigned)uid);
}

bool resv__file_fail_access(resv_error_t *err, int errnum, const char *op,
                            const char *file, const char *how) {
  if (errnum != EACCES && errnum != EPERM && errnum != EROFS)
    return resv__fail(err, RESV_EUNAVAILABLE, "path: cannot %s %s%s%s: %s", op, file,
                      how[0] ? " " : "", how, strerror(errnum));
  char me[300], owner[300] = "", where[4096 + 400] = "";
  user_name(geteuid(), me, sizeof me);
  /* Whose the file is, or the directory it is to be made in. */
  struct stat st;
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", file);
  char *slash = strrchr(dir, '/');
  bool have = stat(file, &st) == 0;
  if (!have && slash && slash != dir) {
    *slash = '\0';
    have = stat(dir, &st) == 0;
  } else {
    dir[0] = '\0';
  }
  if (have) {
    user_name(st.st_uid, owner, sizeof owner);
    snprintf(where, sizeof where, " (%s%s is owned by %s, mode %04o)",
             dir[0] ? "its directory " : "", dir[0] ? dir : "it", owner,
             (unsigned)(st.st_mode & 07777));
  }
  return resv__fail(err, RESV_EINVALID, "path: cannot %s %s%s%s as %s: %s%s", op, file,
                    how[0] ? " " : "", how, me, strerror(errnum), where);
}

/* Checks that file can be opened for reading and writing, as LMDB will
 * open it, or when it is missing that the directory lets the process make
 * it. With fd not NULL, opens it (*fd -1 when missing); lock.mdb is only
 * looked at, never opened: closing a descriptor of it would drop every
 * lock the process holds on it. */
static bool can_open(const char *path, const char *file, int *fd, resv_error_t *err) {
  int rc = fd ? (*fd = open(file, O_RDWR | O_CLOEXEC))
              : faccessat(AT_FDCWD, file, R_OK | W_OK, AT_EACCESS);
  if (rc >= 0) return true;
  if (errno != ENOENT) return resv__file_fail_access(err, errno, "open", file, "for writing");
  if (faccessat(AT_FDCWD, path, W_OK | X_OK, AT_EACCESS) == 0) return true;
  return resv__file_fail_access(err, errno, "create", file, "");
}

bool resv__file_check(const char *path, resv_error_t *err) {
  char data[4096 + 16], lock[4096 + 16];
  snprintf(data, sizeof data, "%s/data.mdb", path);
  snprintf(lock, sizeof lock, "%s/lock.mdb", path);
  int fd;
  if (!can_open(path, lock, NULL, err) || !can_open(path, data, &fd, err)) return false;
  if (fd < 0) return true; /* a new store */
  struct stat st;
  bool ok = fstat(fd, &st) == 0
                ? st.st_size == 0 || check_metas(path, data, fd, st.st_size, err)
                : resv__fail(err, RESV_EUNAVAILABLE, "path: %s: %s", data, strerror(errno));
  close(fd);
  return ok;
}
