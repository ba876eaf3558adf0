#!/usr/bin/env python3
"""The `resv` command (bin/resv, docs/design.md section 13) run as an operator would.

Every subcommand runs against a file store (a fresh directory) and against
MongoDB (RESV_TEST_URI: the emulator that scripts/with-mongo starts, or a
real server); the reservations it looks at are made through the Lua API
(luajit -e). Bad arguments must be answered with a usage line and exit
code 2. Run: make test-cli (RESV_BUILD names the build folder).
"""
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, os.environ.get("RESV_BUILD", "build"))
URI = os.environ.get("RESV_TEST_URI")
ENV = dict(os.environ,
           LUA_CPATH=os.path.join(BUILD, "?.so") + ";;",
           LUA_PATH=os.path.join(ROOT, "lua", "?.lua") + ";;")
RESV = os.path.join(ROOT, "bin", "resv")
_db_counter = [0]


def run(*args, stdin=None):
    """Runs bin/resv with args; returns (exit code, stdout, stderr)."""
    p = subprocess.run([RESV] + list(args), env=ENV, cwd=ROOT, input=stdin,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def lua(store_opts, code):
    """Runs Lua code with `store` opened by resv.open(store_opts)."""
    script = ("local resv = require 'resv'\n"
              "local store = assert(resv.open(" + store_opts + "))\n"
              + code + "\nstore:close()\n")
    subprocess.run(["luajit", "-e", script], env=ENV, cwd=ROOT, check=True,
                   timeout=60)


class Store:
    """A fresh store of one kind: its command-line options and its
    resv.open table."""

    def __init__(self, kind):
        self.kind = kind
        self.dir = None
        if kind == "file":
            self.dir = tempfile.mkdtemp(prefix="resv-cli-")
            self.args = ["--path", self.dir]
            self.opts = "{ path = %s }" % json.dumps(self.dir)
        else:
            _db_counter[0] += 1
            db = "cli_%d_%d" % (os.getpid(), _db_counter[0])
            self.db = db
            self.args = ["--uri", URI, "--database", db]
            self.opts = "{ uri = %s, database = %s }" % (json.dumps(URI), json.dumps(db))

    def close(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


SEED = """
local t = assert(store:type("shop", "user"))
local function key(k) return { tenant = "", namespace = "email", key = k } end
assert(t:reserve(key("ann@example.com"), { tenant = "t1", id = "u1" }, "a1", 3600000).status == "reserved")
assert(t:reserve(key("ann@example.com"), { tenant = "t1", id = "u1" }, "a2", 3600000).status == "reserved")
assert(t:confirm(key("bob@example.com"), { tenant = "t1", id = "u2" }, 7).status == "confirmed")
assert(t:reserve(key("a/b"), { id = "u3" }, "a3", 1).status == "reserved")
"""


class CommandTests:
    kind = None

    def setUp(self):
        self.store = Store(self.kind)
        lua(self.store.opts, SEED)

    def tearDown(self):
        self.store.close()

    def resv(self, *args):
        return run(*(self.store.args + list(args)))

    def resv_json(self, *args):
        code, out, err = self.resv("--json", *args)
        self.assertEqual(code, 0, err)
        return [json.loads(line) for line in out.splitlines()]

    def test_get_shows_pending_confirmed_and_absent(self):
        [r] = self.resv_json("get", "shop/user", "/email/ann@example.com")
        self.assertEqual(r["status"], "pending")
        self.assertEqual(r["owner"], {"tenant": "t1", "id": "u1"})
        self.assertEqual(r["holds"], ["a1", "a2"])
        [r] = self.resv_json("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(r, {"status": "confirmed", "version": 7,
                             "owner": {"tenant": "t1", "id": "u2"}})
        [r] = self.resv_json("get", "shop/user", "/email/nobody@example.com")
        self.assertEqual(r, {"status": "absent"})

    def test_get_reads_a_key_with_slashes_and_tells_expired(self):
        # Reserved with a ttl of 1 ms by SEED: expired by now.
        [r] = self.resv_json("get", "shop/user", "/email/a/b")
        self.assertEqual(r["status"], "expired")
        self.assertEqual(r["owner"], {"tenant": "", "id": "u3"})

    def test_get_for_people_names_owner_expiry_and_holds(self):
        code, out, err = self.resv("get", "shop/user", "/email/ann@example.com")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^pending, owner t1/u1, expires \d{4}-\d\d-\d\dT"
                              r"\d\d:\d\d:\d\d\.\d{3}Z \(in \d+\.\d s\), holds a1 a2\n$")
        code, out, err = self.resv("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(out, "confirmed, owner t1/u2, version 7\n")

    def test_release_deletes_only_the_owners_reservation(self):
        [r] = self.resv_json("release", "shop/user", "/email/bob@example.com", "t1/other")
        self.assertEqual(r, {"status": "absent"})
        [r] = self.resv_json("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(r["status"], "confirmed")
        code, out, err = self.resv("release", "shop/user", "/email/bob@example.com", "t1/u2")
        self.assertEqual((code, out), (0, "released\n"), err)
        [r] = self.resv_json("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(r, {"status": "absent"})
        [r] = self.resv_json("release", "shop/user", "/email/a/b", "u3")
        self.assertEqual(r, {"status": "released"})

    def test_sweep_deletes_only_long_expired_pending_reservations(self):
        # SEED's /email/a/b expired 1 ms after it was made; the default
        # grace (60 s) keeps it, a grace of 1 ms does not.
        [r] = self.resv_json("sweep", "shop/user")
        self.assertEqual(r, {"status": "swept", "count": 0})
        [r] = self.resv_json("get", "shop/user", "/email/a/b")
        self.assertEqual(r["status"], "expired")
        code, out, err = self.resv("sweep", "--grace-ms", "1", "shop/user")
        self.assertEqual((code, out), (0, "swept, 1 reservation\n"), err)
        [r] = self.resv_json("get", "shop/user", "/email/a/b")
        self.assertEqual(r, {"status": "absent"})
        [r] = self.resv_json("get", "shop/user", "/email/ann@example.com")
        self.assertEqual(r["status"], "pending")
        [r] = self.resv_json("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(r["status"], "confirmed")
        [r] = self.resv_json("sweep", "--grace-ms=1", "shop/user")
        self.assertEqual(r, {"status": "swept", "count": 0})

    def test_ls_lists_every_reservation_once_page_by_page(self):
        lua(self.store.opts, """
local t = assert(store:type("shop", "user"))
for i = 1, 23 do
  assert(t:reserve({ namespace = "n", key = string.format("k%02d", i) }, { id = "o" }, "a", 3600000))
end""")
        [whole] = self.resv_json("ls", "--limit", "1000", "shop/user")
        self.assertNotIn("next", whole)
        keys = [e["key"]["namespace"] + "/" + e["key"]["key"] for e in whole["entries"]]
        self.assertEqual(len(keys), 26)
        self.assertEqual(len(set(keys)), 26)
        self.assertEqual(sorted(k for k in keys if k.startswith("n/")),
                         ["n/k%02d" % i for i in range(1, 24)])
        paged, after, pages = [], [], 0
        while True:
            [page] = self.resv_json("ls", "--limit", "5", "shop/user", *after)
            self.assertLessEqual(len(page["entries"]), 5)
            paged += page["entries"]
            pages += 1
            if "next" not in page:
                break
            after = ["--after", page["next"]]
        self.assertEqual(paged, whole["entries"])
        self.assertEqual(pages, 6)

    def test_ls_filters_by_state_and_prints_a_line_each(self):
        [page] = self.resv_json("ls", "--state", "confirmed", "shop/user")
        self.assertEqual(page["entries"], [{"status": "confirmed", "version": 7,
                                            "owner": {"tenant": "t1", "id": "u2"},
                                            "key": {"tenant": "", "namespace": "email",
                                                    "key": "bob@example.com"}}])
        [page] = self.resv_json("ls", "--state", "expired", "shop/user")
        self.assertEqual([e["key"]["key"] for e in page["entries"]], ["a/b"])
        [page] = self.resv_json("ls", "--state", "pending", "shop/user")
        self.assertEqual([e["key"]["key"] for e in page["entries"]], ["ann@example.com"])
        [page] = self.resv_json("ls", "--state", "format", "shop/user")
        self.assertEqual(page["entries"], [])
        code, out, err = self.resv("ls", "--limit", "2", "shop/user")
        self.assertEqual(code, 0, err)
        lines = out.splitlines()
        self.assertEqual(len(lines), 3, out)
        self.assertRegex(lines[0], r"^/email/\S+  (pending|expired|confirmed), owner ")
        self.assertRegex(lines[2], r"^more: --after [0-9a-f]+$")
        code, out, err = self.resv("ls", "shop/nobody")
        self.assertEqual((code, out), (1, ""), err)
        self.assertIn("no type shop/nobody", err)

    def test_check_passes_a_type_written_by_the_store(self):
        code, out, err = self.resv("check", "shop/user")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "wow_reservation__shop__user: format record format 1, "
                              "3 documents, 3 conform, 0 do not\n")
        [r] = self.resv_json("check", "shop/user")
        self.assertEqual(r, {"collection": "wow_reservation__shop__user", "ok": True,
                             "format_record": "format 1", "documents": 3,
                             "conforming": 3, "nonconforming": []})

    def test_types_lists_the_store_types_and_check_and_sweep_take_all(self):
        lua(self.store.opts, """
assert(assert(store:type("game", "player")):reserve({ namespace = "name", key = "zed" }, { id = "p" }, "a", 1))""")
        code, out, err = self.resv("types")
        self.assertEqual((code, out), (0, "game/player\nshop/user\n"), err)
        [g, s] = self.resv_json("types")
        self.assertEqual(g, {"context": "game", "aggregate": "player",
                             "collection": "wow_reservation__game__player"})
        code, out, err = self.resv("check")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines(), [
            "wow_reservation__game__player: format record format 1, 1 document, 1 conforms, 0 do not",
            "wow_reservation__shop__user: format record format 1, 3 documents, 3 conform, 0 do not"])
        code, out, err = self.resv("sweep", "--grace-ms", "1")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines(), ["wow_reservation__game__player: swept, 1 reservation",
                                            "wow_reservation__shop__user: swept, 1 reservation"])

    def test_stats_counts_types_and_embedded_entries(self):
        code, out, err = self.resv("stats")
        self.assertEqual(code, 0, err)
        if self.kind == "file":
            self.assertRegex(out, r"^resv store \(file .*\): 1 type, 3 entries, [1-9]\d* bytes\n$")
        else:
            self.assertRegex(out, r"^mongodb .*: 1 type\n$")
        [r] = self.resv_json("stats")
        self.assertEqual(r["types"], 1)
        self.assertEqual(r.get("entries"), 3 if self.kind == "file" else None)
        code, out, err = self.resv("stats", "--prometheus")
        self.assertEqual(code, 0, err)
        self.assertIn("# TYPE resv_calls_total counter", out)
        self.assertRegex(out, r'resv_calls_total\{op="get",status="absent"\} 1\n')

    def test_stats_prometheus_passes_promtool_with_short_floats(self):
        code, out, err = self.resv("stats", "--prometheus")
        self.assertEqual(code, 0, err)
        les = re.findall(r'resv_call_duration_seconds_bucket\{op="get",le="([^"]+)"\}', out)
        self.assertEqual(les[:3], ["1e-06", "2.5e-06", "5e-06"])
        self.assertIn("0.1", les)
        for le in les[:-1]:
            self.assertLessEqual(len(le.replace(".", "").lstrip("0").split("e")[0]), 3, le)
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool is not installed (Debian package prometheus)")
        p = subprocess.run([promtool, "check", "metrics"], input=out, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual((p.returncode, p.stdout), (0, ""), out)

    def test_a_store_error_exits_1_with_its_code(self):
        code, out, err = self.resv("get", "shop/us.er", "/email/x")
        self.assertEqual(code, 1)
        self.assertRegex(err, r"^resv: invalid: ")

    def collections(self):
        """The store's types, as `resv types` lists them."""
        code, out, err = self.resv("types")
        self.assertEqual(code, 0, err)
        return out.splitlines()

    def test_no_command_makes_a_type(self):
        # A type typed wrong: an error naming it, exit 1, and still no type
        # (on MongoDB: no collection, which copy would copy later).
        for args in (["get", "shop/typo", "/e/x"], ["--json", "get", "shop/typo", "/e/x"],
                     ["ls", "shop/typo"], ["check", "shop/typo"], ["--json", "check", "shop/typo"],
                     ["release", "shop/typo", "/e/x", "o"], ["sweep", "shop/typo"]):
            code, out, err = self.resv(*args)
            self.assertEqual((code, out), (1, ""), (args, err))
            self.assertRegex(err, r"^resv: invalid: no type shop/typo in ", args)
            self.assertIn("wow_reservation__shop__typo", err)
        code, out, err = self.resv("stats")
        self.assertEqual(code, 0, err)
        self.assertEqual(self.collections(), ["shop/user"])
        if self.kind == "mongo":
            import pymongo
            client = pymongo.MongoClient(URI)
            self.addCleanup(client.close)
            self.assertEqual(client[self.store.db].list_collection_names(),
                             ["wow_reservation__shop__user"])

    def test_counts_of_one_are_singular(self):
        one = Store(self.kind)
        self.addCleanup(one.close)
        lua(one.opts, """
assert(assert(store:type("a", "b")):confirm({ namespace = "n", key = "k" }, { id = "o" }, 1))""")
        code, out, err = run(*(one.args + ["check"]))
        self.assertEqual((code, out), (0, "wow_reservation__a__b: format record format 1, "
                                          "1 document, 1 conforms, 0 do not\n"), err)
        code, out, err = run(*(one.args + ["stats"]))
        self.assertEqual(code, 0, err)
        if self.kind == "file":
            self.assertRegex(out, r": 1 type, 1 entry, [1-9]\d* bytes\n$")
        else:
            self.assertRegex(out, r": 1 type\n$")
        code, out, err = run(*(one.args + ["sweep", "--grace-ms", "1"]))
        self.assertEqual((code, out), (0, "wow_reservation__a__b: swept, 0 reservations\n"), err)


class FileStore(CommandTests, unittest.TestCase):
    kind = "file"

    def test_a_missing_store_is_an_error_and_stays_missing(self):
        missing = os.path.join(self.store.dir, "none")
        empty = tempfile.mkdtemp(prefix="resv-cli-")
        self.addCleanup(shutil.rmtree, empty, True)
        for args in (["types"], ["check"], ["stats"], ["stats", "--prometheus"], ["sweep"],
                     ["get", "shop/user", "/e/x"], ["ls", "shop/user"],
                     ["check", "shop/user"], ["release", "shop/user", "/e/x", "o"]):
            code, out, err = run("--path", missing, *args)
            self.assertEqual((code, out), (1, ""), (args, err))
            self.assertTrue(err.startswith("resv: invalid: path: no file store at %s: " % missing),
                            err)
            code, out, err = run("--path", empty, *args)
            self.assertEqual((code, out), (1, ""), (args, err))
            self.assertIn("no file store in %s (no data.mdb" % empty, err)
        self.assertFalse(os.path.exists(missing))
        self.assertEqual(os.listdir(empty), [])

    def test_a_store_without_types_lists_none(self):
        lua("{ path = %s }" % json.dumps(os.path.join(self.store.dir, "new")), "")
        args = ["--path", os.path.join(self.store.dir, "new")]
        self.assertEqual(run(*(args + ["types"]))[:2], (0, ""))
        code, out, err = run(*(args + ["check"]))
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"^resv store \(file .*/new, sync=disk\): no type to check\n$")
        self.assertRegex(run(*(args + ["stats"]))[1], r": 0 types, 0 entries, 0 bytes\n$")

    def test_check_lists_a_damaged_record_and_get_answers_format(self):
        # One bit of bob's record flipped in data.mdb: its owner id u2
        # reads u3. The record's checksum (over its key and bytes) fails.
        path = os.path.join(self.store.dir, "data.mdb")
        with open(path, "rb") as f:
            data = bytearray(f.read())
        # Every copy of it: the file keeps old pages too (copy on write).
        key = b"\x01\x00email\x00bob@example.com"
        at, copies = data.find(key), 0
        while at >= 0:
            value = at + len(key)
            if data[value:value + 1] == b"C" and data[value + 5:value + 11] == b"\x02t1\x02u2":
                data[value + 10] ^= 0x01
                copies += 1
            at = data.find(key, at + 1)
        self.assertGreater(copies, 0)
        with open(path, "wb") as f:
            f.write(data)
        code, out, err = self.resv("get", "shop/user", "/email/bob@example.com")
        self.assertEqual(code, 1)
        self.assertRegex(err, r"^resv: format: wow_reservation__shop__user: the record of key "
                              r"\(, email, bob@example.com\) .*checksum")
        code, out, err = self.resv("check", "shop/user")
        self.assertEqual(code, 3, err)
        lines = out.splitlines()
        self.assertEqual(lines[-1], "wow_reservation__shop__user: format record format 1, "
                                    "3 documents, 2 conform, 1 does not")
        self.assertRegex(lines[0], r'^not a format-1 reservation: _id \{ "t" : "", "n" : '
                                   r'"email", "k" : "bob@example.com" \}: its checksum '
                                   r'does not match')
        # The others still answer.
        code, out, err = self.resv("get", "shop/user", "/email/ann@example.com")
        self.assertEqual(code, 0, err)


@unittest.skipUnless(URI, "RESV_TEST_URI is not set (run under scripts/with-mongo)")
class MongoStore(CommandTests, unittest.TestCase):
    maxDiff = None
    kind = "mongo"

    def collection(self):
        import pymongo
        client = pymongo.MongoClient(URI)
        self.addCleanup(client.close)
        return client[self.store.db]["wow_reservation__shop__user"]

    def test_check_lists_planted_documents_and_changes_nothing(self):
        from bson.son import SON
        from bson.objectid import ObjectId
        coll = self.collection()
        key = lambda k: SON([("t", ""), ("n", "email"), ("k", k)])
        owner = SON([("tenant_id", ""), ("id", "o")])
        planted = [
            SON([("_id", key("s")), ("tenant_id", ""), ("key", "s"), ("owner", owner),
                 ("expires_at", "soon"), ("holds", ["a"])]),
            SON([("_id", key("t")), ("tenant_id", "other"), ("key", "t"), ("owner", owner),
                 ("expires_at", None), ("version", 1)]),
            SON([("_id", key("u")), ("tenant_id", ""), ("key", "u"), ("owner", owner),
                 ("expires_at", None), ("version", 1), ("extra", True)]),
            SON([("_id", 42), ("hello", "world")]),
            SON([("_id", ObjectId("65a000000000000000000001")), ("x", 1)]),
        ]
        coll.insert_many(planted)
        before = sorted(map(repr, coll.find({})))
        code, out, err = self.resv("check", "shop/user")
        self.assertEqual(code, 3, err)
        lines = out.splitlines()
        self.assertEqual(lines[-1], "wow_reservation__shop__user: format record format 1, "
                                    "8 documents, 3 conform, 5 do not")
        self.assertEqual(len(lines), 6, out)
        [r] = [json.loads(line) for line in self.resv("--json", "check", "shop/user")[1].splitlines()]
        self.assertFalse(r["ok"])
        why = {e["id"]: e["problem"] for e in r["nonconforming"]}
        self.assertEqual(why, {
            '42': "_id is not {t, n, k}",
            '{ "$oid" : "65a000000000000000000001" }': "_id is not {t, n, k}",
            '{ "t" : "", "n" : "email", "k" : "s" }': "expires_at is neither int64 nor null",
            '{ "t" : "", "n" : "email", "k" : "t" }': "tenant_id missing or not the _id's",
            '{ "t" : "", "n" : "email", "k" : "u" }':
                "an unknown field after the reservation's fields",
        })
        self.assertEqual(sorted(map(repr, coll.find({}))), before)
        # ls lists them too, as state format, across the types of _id.
        [page] = self.resv_json("ls", "--state", "format", "--limit", "2", "shop/user")
        seen = [e["id"] for e in page["entries"]]
        while "next" in page:
            [page] = self.resv_json("ls", "--state", "format", "--limit", "2",
                                    "--after", page["next"], "shop/user")
            seen += [e["id"] for e in page["entries"]]
        self.assertEqual(sorted(seen), sorted(why))

    def test_a_database_without_types_is_an_error_naming_it(self):
        db = "cli_typo_%d" % os.getpid()
        for args in (["types"], ["check"], ["stats"], ["stats", "--prometheus"], ["sweep"]):
            code, out, err = run("--uri", URI, "--database", db, *args)
            self.assertEqual((code, out), (1, ""), (args, err))
            self.assertIn("resv: invalid: no type in database %s of mongodb " % db, err)
            self.assertIn("is --database right?", err)
        for args in (["get", "shop/user", "/e/x"], ["ls", "shop/user"], ["check", "shop/user"]):
            code, out, err = run("--uri", URI, "--database", db, *args)
            self.assertEqual((code, out), (1, ""), (args, err))
            self.assertIn("no type shop/user in database %s" % db, err)
        import pymongo
        client = pymongo.MongoClient(URI)
        self.addCleanup(client.close)
        self.assertNotIn(db, client.list_database_names())

    def test_check_refuses_another_format(self):
        self.collection().update_one({"_id": "format"}, {"$set": {"format": 2}})
        code, out, err = self.resv("check", "shop/user")
        self.assertEqual(code, 3, err)
        self.assertIn("format record: the format record names format 2; this store reads and writes format 1", out)


def entries(store, name):
    """Every entry of a type of store, by `resv ls --json`."""
    out = run(*(store.args + ["--json", "ls", "--limit", "10000", name]))
    assert out[0] == 0, out[2]
    return json.loads(out[1])["entries"]


@unittest.skipUnless(URI, "RESV_TEST_URI is not set (run under scripts/with-mongo)")
class Copy(unittest.TestCase):
    """copy: file -> MongoDB -> file, equal entry by entry; run again it
    adds nothing; a key held otherwise in the target is listed, not
    overwritten."""

    def setUp(self):
        self.file = Store("file")
        self.mongo = Store("mongo")
        self.back = Store("file")
        lua(self.file.opts, SEED + """
local g = assert(store:type("game", "player"))
for i = 1, 40 do
  assert(g:reserve({ tenant = "eu", namespace = "name", key = "p" .. i }, { tenant = "eu", id = "u" .. i }, "a", 3600000))
  if i % 3 == 0 then assert(g:confirm({ tenant = "eu", namespace = "name", key = "p" .. i }, { tenant = "eu", id = "u" .. i }, i)) end
end""")

    def tearDown(self):
        for s in (self.file, self.mongo, self.back):
            s.close()

    def copy(self, src, dst, *more):
        args = ["copy", "--from", src.args[1], "--to", dst.args[1]]
        if src.kind == "mongo":
            args += ["--from-database", src.db]
        if dst.kind == "mongo":
            args += ["--to-database", dst.db]
        return run(*(args + list(more)))

    def test_copy_round_trip_file_mongodb_file(self):
        code, out, err = self.copy(self.file, self.mongo)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "copy: 2 types, 43 reservations: 43 added, 0 same, 0 differ "
                              "(not overwritten), 0 skipped (not format-1)\n")
        code, out, err = self.copy(self.mongo, self.back)
        self.assertEqual(code, 0, err)
        for name in ("shop/user", "game/player"):
            a, b, c = entries(self.file, name), entries(self.mongo, name), entries(self.back, name)
            key = lambda e: json.dumps(e["key"], sort_keys=True)
            self.assertEqual(sorted(a, key=key), sorted(b, key=key))
            self.assertEqual(a, c)  # the same store order, file to file
        # Document by document in MongoDB: the layout, field order included.
        import pymongo
        client = pymongo.MongoClient(URI, document_class=__import__("bson").son.SON)
        self.addCleanup(client.close)
        doc = client[self.mongo.db]["wow_reservation__shop__user"].find_one(
            {"_id": __import__("bson").son.SON([("t", ""), ("n", "email"), ("k", "ann@example.com")])})
        self.assertEqual(list(doc.keys()), ["_id", "tenant_id", "key", "owner", "expires_at", "holds"])
        self.assertEqual(doc["holds"], ["a1", "a2"])
        self.assertEqual(list(doc["owner"].items()), [("tenant_id", "t1"), ("id", "u1")])

    def test_copy_draws_a_progress_bar_on_a_terminal_only(self):
        # Quoted for the shell of script(1): a checkout may sit in a path with spaces.
        cmd = shlex.join([RESV, "copy", "--from", self.file.dir, "--to", self.back.dir])
        # Bytes: text mode would turn the bar's carriage returns into newlines.
        p = subprocess.run(["script", "-qec", cmd, "/dev/null"], env=ENV, cwd=ROOT,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        shown = p.stdout.decode()
        self.assertRegex(shown, r"\r\[#{30}\] 43/43 ")
        self.assertIn("copy: 2 types, 43 reservations: 43 added", shown)
        code, out, err = self.copy(self.file, self.back)  # not a terminal
        self.assertEqual((code, err), (0, ""))
        self.assertNotIn("[", out)

    def test_copy_again_adds_nothing_and_resumes(self):
        code, out, err = self.copy(self.file, self.mongo)
        self.assertEqual(code, 0, err)
        # More in the source meanwhile, as after an interrupted copy.
        lua(self.file.opts, """
local g = assert(store:type("game", "player"))
assert(g:reserve({ tenant = "eu", namespace = "name", key = "late" }, { tenant = "eu", id = "x" }, "a", 3600000))""")
        code, out, err = self.copy(self.file, self.mongo)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "copy: 2 types, 44 reservations: 1 added, 43 same, 0 differ "
                              "(not overwritten), 0 skipped (not format-1)\n")

    def test_copy_from_a_missing_store_makes_nothing(self):
        missing = self.file.dir + "-none"
        code, out, err = run("copy", "--from", missing, "--to", self.back.dir)
        self.assertEqual((code, out), (1, ""), err)
        self.assertIn("resv: --from: invalid: path: no file store at " + missing, err)
        self.assertFalse(os.path.exists(missing))
        code, out, err = run("copy", "--from", URI, "--from-database", self.mongo.db,
                             "--to", self.back.dir)
        self.assertEqual((code, out), (1, ""), err)
        self.assertIn("resv: --from: invalid: no type in database %s" % self.mongo.db, err)
        self.assertEqual(os.listdir(self.back.dir), [])  # --to was not made either

    def test_copy_counts_of_one_are_singular(self):
        one = Store("file")
        self.addCleanup(one.close)
        lua(one.opts, """
assert(assert(store:type("a", "b")):confirm({ namespace = "n", key = "k" }, { id = "o" }, 1))""")
        lua(self.mongo.opts, """
assert(assert(store:type("a", "b")):confirm({ namespace = "n", key = "k" }, { id = "other" }, 1))""")
        code, out, err = self.copy(one, self.mongo)
        self.assertEqual((code, out), (3, "differs: a/b /n/k\ncopy: 1 type, 1 reservation: 0 added, "
                                          "0 same, 1 differs (not overwritten), 0 skipped "
                                          "(not format-1)\n"), err)

    def test_copy_never_overwrites_another_reservation(self):
        lua(self.mongo.opts, """
local t = assert(store:type("shop", "user"))
assert(t:confirm({ namespace = "email", key = "ann@example.com" }, { tenant = "t9", id = "other" }, 1))""")
        code, out, err = self.copy(self.file, self.mongo)
        self.assertEqual(code, 3, err)
        lines = out.splitlines()
        self.assertEqual(lines[0], "differs: shop/user /email/ann@example.com")
        self.assertEqual(lines[-1], "copy: 2 types, 43 reservations: 42 added, 0 same, 1 differs "
                                    "(not overwritten), 0 skipped (not format-1)")
        [r] = [json.loads(l) for l in run(*(self.mongo.args + ["--json", "get", "shop/user",
                                                              "/email/ann@example.com"]))[1].splitlines()]
        self.assertEqual(r["owner"], {"tenant": "t9", "id": "other"})


class Usage(unittest.TestCase):
    """Bad arguments: a usage line on stderr, nothing on stdout, exit 2."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="resv-cli-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def assertUsage(self, *args):
        code, out, err = run(*args)
        self.assertEqual(code, 2, (args, out, err))
        self.assertEqual(out, "")
        self.assertIn("usage: resv ", err)
        return err

    def test_bad_arguments_exit_2_with_usage(self):
        p = ["--path", self.dir]
        self.assertUsage()
        self.assertUsage(*p)
        self.assertUsage(*p, "frobnicate")
        self.assertUsage(*p, "--frob", "get", "a/b", "/n/k")
        self.assertUsage(*p, "get", "a/b")
        self.assertUsage(*p, "get", "a/b", "/n/k", "extra")
        self.assertUsage(*p, "get", "ab", "/n/k")
        self.assertUsage(*p, "get", "a/b", "n/k")
        self.assertUsage(*p, "release", "a/b", "/n/k")
        self.assertUsage("get", "a/b", "/n/k")
        self.assertUsage(*p, "--uri", "mongodb://127.0.0.1:1", "get", "a/b", "/n/k")
        self.assertUsage(*p, "--database", "x", "get", "a/b", "/n/k")
        self.assertUsage("--path")
        self.assertUsage(*p, "--json=yes", "get", "a/b", "/n/k")
        self.assertUsage(*p, "sweep", "a/b", "--grace-ms", "soon")
        self.assertUsage(*p, "sweep", "a/b", "--grace-ms", "0")
        self.assertUsage(*p, "sweep", "a/b", "--grace-ms")
        self.assertUsage(*p, "get", "--grace-ms", "5", "a/b", "/n/k")
        self.assertUsage(*p, "ls", "a/b", "--limit", "0")
        self.assertUsage(*p, "ls", "a/b", "--limit", "10001")
        self.assertUsage(*p, "ls", "a/b", "--limit", "many")
        self.assertUsage(*p, "ls", "a/b", "--after", "xyz")
        self.assertUsage(*p, "ls", "a/b", "--state", "live")
        self.assertUsage(*p, "ls")
        self.assertUsage(*p, "types", "a/b")
        self.assertUsage(*p, "check", "a/b", "c/d")
        self.assertUsage(*p, "stats", "a/b")
        self.assertUsage(*p, "stats", "--prometheus=1")
        self.assertUsage("copy", "--from", self.dir)
        self.assertUsage("copy", "--to", self.dir)
        self.assertUsage(*p, "copy", "--from", self.dir, "--to", self.dir + "2")
        self.assertUsage("copy", "--from", self.dir, "--to", self.dir, "--to-database", "x")
        self.assertUsage(*p, "--timeout-ms", "0", "types")
        self.assertUsage(*p, "--timeout-ms", "soon", "types")
        self.assertUsage(*p, "--timeout-ms", "1.5", "types")
        self.assertUsage(*p, "--timeout-ms", "86400001", "types")
        self.assertUsage(*p, "types", "--timeout-ms")
        self.assertUsage("copy", "--from", self.dir, "--to", self.dir, "--timeout-ms", "-1")
        err = self.assertUsage(*p, "release", "a/b", "/n/k")
        self.assertIn("release TYPE KEY OWNER", err)

    def test_help_on_every_command(self):
        code, out, err = run("--help")
        self.assertEqual(code, 0, err)
        commands = [line.split()[0] for line in
                    out.split("commands:\n")[1].split("\n\n")[0].splitlines()]
        self.assertIn("get", commands)
        self.assertIn("release", commands)
        self.assertIn("sweep", commands)
        self.assertIn("ls", commands)
        self.assertIn("check", commands)
        self.assertIn("types", commands)
        self.assertIn("copy", commands)
        self.assertIn("stats", commands)
        for name in commands:
            for args in ([name, "--help"], ["--help", name], [name, "-h"]):
                code, out, err = run(*args)
                self.assertEqual(code, 0, (args, err))
                self.assertTrue(out.startswith("usage: resv "), out)
                self.assertIn(" " + name, out.splitlines()[0])


class Options(unittest.TestCase):
    """--version, --timeout-ms and what --help says."""

    def test_version_is_the_rockspecs(self):
        [spec] = glob.glob(os.path.join(ROOT, "resv-*-*.rockspec"))
        with open(spec) as f:
            version = re.search(r'^version = "(.*)-\d+"$', f.read(), re.M).group(1)
        for args in (["--version"], ["get", "--version"], ["--path", "/nonexistent", "--version"]):
            self.assertEqual(run(*args), (0, "resv %s\n" % version, ""), args)

    def test_timeout_ms_is_each_calls_deadline(self):
        # Nothing listens on port 1: the call waits for a server until its
        # deadline, 300 ms here (the default is 5000 ms).
        start = time.monotonic()
        code, out, err = run("--uri", "mongodb://127.0.0.1:1", "--timeout-ms", "300",
                             "get", "a/b", "/n/k")
        elapsed = time.monotonic() - start
        self.assertEqual(code, 1, err)
        self.assertRegex(err, r"resv: (unavailable|timeout): ")
        self.assertLess(elapsed, 3.0)

    def test_help_shows_required_options_as_required(self):
        code, out, err = run("copy", "--help")
        self.assertEqual(code, 0, err)
        self.assertEqual(out.splitlines()[0],
                         "usage: resv [--json] [--timeout-ms MS] copy --from URI|DIR --to URI|DIR "
                         "[--from-database DB] [--to-database DB]")
        self.assertRegex(out, r"\n  --from URI\|DIR +\(required\) the store to read")
        self.assertRegex(out, r"\n  --to URI\|DIR +\(required\) the store to write")
        self.assertNotIn("--uri", out)
        code, out, err = run("get", "--help")
        self.assertEqual(out.splitlines()[0],
                         "usage: resv (--uri URI [--database DB] | --path DIR) [--json] "
                         "[--timeout-ms MS] get TYPE KEY")
        self.assertIn("store options (one of --uri and --path is required):", out)

    def test_help_has_the_exit_codes_table(self):
        for args in (["--help"], ["get", "--help"], ["copy", "--help"], ["check", "--help"]):
            code, out, err = run(*args)
            self.assertEqual(code, 0, err)
            table = out.split("\nexit codes:\n")[1]
            codes = [line.split()[0] for line in table.splitlines() if re.match(r"^  \d  ", line)]
            self.assertEqual(codes, ["0", "1", "2", "3"], args)


class Recover(unittest.TestCase):
    """resv recover: a file store with sync = "process" left dirty by a
    crashed process, opened after a (faked: RESV_BOOT_ID) reboot; a
    data.mdb cut short."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="resv-cli-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def boot(self, boot, *args):
        env = dict(ENV, RESV_BOOT_ID=boot)
        p = subprocess.run([RESV, "--path", self.dir] + list(args), env=env, cwd=ROOT,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_recover_moves_a_store_an_os_crash_may_have_damaged_aside(self):
        script = ("local resv = require 'resv'\n"
                  "local store = assert(resv.open { path = %s, sync = 'process' })\n"
                  "local t = assert(store:type('shop', 'user'))\n"
                  "assert(t:reserve({ namespace = 'email', key = 'ann' }, { id = 'u1' }, 'a1',"
                  " 3600000).status == 'reserved')\n"
                  "os.exit(0)\n" % json.dumps(self.dir))  # no close: the process crashes
        subprocess.run(["luajit", "-e", script], env=dict(ENV, RESV_BOOT_ID="boot-1"),
                       cwd=ROOT, check=True, timeout=60)
        code, out, err = self.boot("boot-2", "get", "shop/user", "/email/ann")
        self.assertEqual(code, 1)
        self.assertIn("resv: format: %s may be damaged by a crash of the OS" % self.dir, err)
        self.assertIn("run resv recover --path %s" % self.dir, err)
        code, out, err = self.boot("boot-2", "--json", "recover")
        self.assertEqual(code, 0, err)
        doc = json.loads(out)
        self.addCleanup(shutil.rmtree, doc["kept"], ignore_errors=True)
        self.assertTrue(doc["moved"])
        self.assertTrue(doc["kept"].startswith(self.dir + ".crashed-"), doc)
        self.assertTrue(os.path.exists(os.path.join(doc["kept"], "data.mdb")))
        self.assertTrue(os.path.exists(os.path.join(doc["kept"], "resv.state")))
        # The directory is left empty, and a command that reads makes no store.
        code, out, err = self.boot("boot-2", "get", "shop/user", "/email/ann")
        self.assertEqual(code, 1, err)
        self.assertIn("no file store in %s" % self.dir, err)
        code, out, err = self.boot("boot-2", "recover")
        self.assertEqual((code, out), (0, "recover: nothing to recover: %s opens as it is\n"
                                       % self.dir), err)

    def test_recover_moves_a_cut_store_aside_as_the_error_says(self):
        # What a newcomer meets: a data.mdb cut short (a full disk, a bad
        # copy) is refused naming resv recover, which moves it aside.
        script = ("local resv = require 'resv'\n"
                  "local store = assert(resv.open { path = %s })\n"
                  "local t = assert(store:type('shop', 'user'))\n"
                  "for i = 1, 2000 do assert(t:reserve({ namespace = 'email', key = 'k' .. i },"
                  " { id = 'u1' }, 'a1', 3600000).status == 'reserved') end\n"
                  "store:close()\n" % json.dumps(self.dir))
        subprocess.run(["luajit", "-e", script], env=ENV, cwd=ROOT, check=True, timeout=60)
        data = os.path.join(self.dir, "data.mdb")
        os.truncate(data, 3 * 4096)
        code, out, err = self.boot("boot-1", "get", "shop/user", "/email/k1")
        self.assertEqual(code, 1, err)
        self.assertIn("is damaged", err)
        self.assertIn("run resv recover --path %s to move it aside" % self.dir, err)
        code, out, err = self.boot("boot-1", "--json", "recover")
        self.assertEqual(code, 0, err)
        doc = json.loads(out)
        self.addCleanup(shutil.rmtree, doc["kept"], ignore_errors=True)
        self.assertTrue(doc["moved"], doc)
        self.assertTrue(os.path.exists(os.path.join(doc["kept"], "data.mdb")))
        code, out, err = self.boot("boot-1", "recover")
        self.assertEqual((code, out), (0, "recover: nothing to recover: %s opens as it is\n"
                                       % self.dir), err)

    def test_recover_is_for_a_file_store(self):
        code, out, err = run("--uri", "mongodb://127.0.0.1:1/x", "recover")
        self.assertEqual(code, 2)
        self.assertIn("recover is for a file store", err)


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    print("test-cli: %d passed, %d failed, %d skipped"
          % (result.testsRun - failed - skipped, failed, skipped))
    sys.exit(1 if failed or not result.wasSuccessful() else 0)
