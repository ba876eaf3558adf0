/* emu.h: what the MongoDB suites share: an emulator
 * this test starts (and kills, and restarts on the same port), MongoDB's
 * failCommand fail point sent with a plain mongoc client, and a plain
 * client to look behind the store. */
#ifndef RESV_TEST_EMU_H
#define RESV_TEST_EMU_H

#include <sys/types.h>

#include "mongo_internal.h"
#include "tests.h"

/* An emulator process of this test. It stops by itself when its stdin
 * (our pipe) closes, so a test that dies never leaves it running. */
typedef struct emu {
  pid_t pid;      /* 0: not running */
  int stdin_fd;
  int port;
  char uri[128];
} emu_t;

/* Starts /usr/bin/python3 emulator/run.py on port (0: a free one), as a
 * mongos when asked, and waits for its URI line. Fails the test when it
 * does not start. */
void emu_start(emu_t *e, int port, bool mongos);
/* The same with run.py's mode flag: NULL, "--mongos" or "--replset" (three
 * members on ports of its own choosing; port must be 0; uri is the seed
 * list with replicaSet=rs0). */
void emu_start_mode(emu_t *e, int port, const char *mode);
/* The same with any run.py arguments (NULL-terminated; e.g. "--mongos",
 * "--user", "app:pw:readWrite@resv"). */
void emu_start_args(emu_t *e, int port, const char *const *args);
/* Kills it with SIGKILL (a crash: no goodbye to the clients) and reaps it. */
void emu_kill(emu_t *e);
/* Stops it by closing its stdin, and reaps it. */
void emu_stop(emu_t *e);

/* uri with "appname=<name>" added, into out. Fail points are scoped to an
 * appName, so a fault test never disturbs other clients of a shared
 * server (MONGODB_URI may be a real one). */
void emu_uri_with_app(const char *uri, const char *app, char *out, size_t size);

/* Sends {configureFailPoint: "failCommand", mode: <mode_json>, data:
 * <data_json>} to uri's server with a plain client; mode "off" turns it
 * off. Fails the test when the server refuses. */
void emu_failpoint(const char *uri, const char *mode_json, const char *data_json);
/* The next times commands named command from the client named app are
 * held ms milliseconds on uri's server before they run (failCommand's
 * blockConnection). */
/* An admin command through client ("nearest" unless primary: a live
 * member even when there is no primary); the reply's string field
 * `field` (NULL: none) into out. Takes cmd. False, said on stderr, when
 * the command failed. */
bool emu_admin(mongoc_client_t *client, bson_t *cmd, bool primary, const char *field,
               char *out, size_t size);

void emu_block_app(const char *uri, const char *command, const char *app, int times, int ms);

/* A plain client on uri (error API 2) and one collection of its
 * database (the URI's, else "resv"). */
typedef struct emu_raw {
  mongoc_uri_t *uri;
  mongoc_client_t *client;
  mongoc_collection_t *coll;
} emu_raw_t;

void emu_raw_open(emu_raw_t *r, const char *uri, const char *collection);
void emu_raw_close(emu_raw_t *r);
/* Documents of the collection matching filter_json. */
int64_t emu_raw_count(emu_raw_t *r, const char *filter_json);
/* Inserts one document given as extended JSON. */
void emu_raw_insert(emu_raw_t *r, const char *json);
/* The one document matching filter (bson), as canonical extended JSON
 * (bson_free it), or NULL when there is none. */
char *emu_raw_find_json(emu_raw_t *r, const bson_t *filter);

/* A store on uri with these options (uri filled in). Fails the test. */
resv_store_t *emu_open(const char *uri, resv_options_t o);

#endif
