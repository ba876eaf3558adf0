#!/usr/bin/env python3
"""The `resv` command (bin/resv, SPEC section 13) run as an operator would.

Every subcommand runs against a file store (a fresh directory) and against
MongoDB (RESV_TEST_URI: the emulator that scripts/with-mongo starts, or a
real server); the reservations it looks at are made through the Lua API
(luajit -e). Bad arguments must be answered with a usage line and exit
code 2. Run: make test-cli (RESV_BUILD names the build folder).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
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

    def test_a_store_error_exits_1_with_its_code(self):
        code, out, err = self.resv("get", "shop/us.er", "/email/x")
        self.assertEqual(code, 1)
        self.assertRegex(err, r"^resv: invalid: ")


class FileStore(CommandTests, unittest.TestCase):
    kind = "file"


@unittest.skipUnless(URI, "RESV_TEST_URI is not set (run under scripts/with-mongo)")
class MongoStore(CommandTests, unittest.TestCase):
    kind = "mongo"


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
        for name in commands:
            for args in ([name, "--help"], ["--help", name], [name, "-h"]):
                code, out, err = run(*args)
                self.assertEqual(code, 0, (args, err))
                self.assertTrue(out.startswith("usage: resv "), out)
                self.assertIn(" " + name, out.splitlines()[0])


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=2).result
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    print("test-cli: %d passed, %d failed, %d skipped"
          % (result.testsRun - failed - skipped, failed, skipped))
    sys.exit(1 if failed or not result.wasSuccessful() else 0)
