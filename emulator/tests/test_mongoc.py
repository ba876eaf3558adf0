"""The real mongo-c-driver 1.23 against the emulator (the resv store's
client): a pooled client with many threads, the legacy handshake, pipeline
findAndModify upserts, NamespaceExists, E11000 as MONGOC_ERROR_SERVER/11000
with error API 2, and a retryable write after closeConnection; and against
the replica set, discovery from the seed list and retryable writes carried
over a step-down and a killed primary (mongoc_replset.c). Skipped when
libmongoc's development files are not installed."""

import os
import shutil
import subprocess
import tempfile
import unittest

from emulator.replset import ReplicaSet

from .support import emulator

HERE = os.path.dirname(os.path.abspath(__file__))


def _build(name):
    if not shutil.which('cc') or not shutil.which('pkg-config'):
        return None
    try:
        flags = subprocess.run(['pkg-config', '--cflags', '--libs', 'libmongoc-1.0'],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    directory = tempfile.mkdtemp(prefix='resv-emulator-')
    binary = os.path.join(directory, name)
    subprocess.run(['cc', '-std=gnu11', '-Wall', '-Wextra', '-Werror', '-O0', '-o', binary,
                    os.path.join(HERE, name + '.c')] + flags + ['-lpthread'], check=True)
    return binary


class MongocTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.binary = _build('mongoc_smoke')
        if cls.binary is None:
            raise unittest.SkipTest('libmongoc-1.0 development files not installed')
        cls.replset_binary = _build('mongoc_replset')

    @classmethod
    def tearDownClass(cls):
        for binary in (cls.binary, cls.replset_binary):
            shutil.rmtree(os.path.dirname(binary), ignore_errors=True)

    def run_smoke(self, mongos):
        result = subprocess.run([self.binary, emulator(mongos).uri, 'mongos' if mongos else 'rs'],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout), (0, 'ok\n'), result.stderr)

    def test_mongoc_against_replica_set_primary(self):
        self.run_smoke(mongos=False)

    def test_mongoc_against_mongos(self):
        self.run_smoke(mongos=True)

    def test_mongoc_follows_step_down_and_killed_primary(self):
        rs = ReplicaSet(election_timeout_ms=200).start()
        self.addCleanup(rs.stop)
        result = subprocess.run([self.replset_binary, rs.uri], capture_output=True, text=True,
                                timeout=120)
        self.assertEqual((result.returncode, result.stdout), (0, 'ok\n'), result.stderr)


if __name__ == '__main__':
    unittest.main()
