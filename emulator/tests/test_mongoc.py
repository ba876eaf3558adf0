"""The real mongo-c-driver 1.23 against the emulator (the resv store's
client): a pooled client with many threads, the legacy handshake, pipeline
findAndModify upserts, NamespaceExists, E11000 as MONGOC_ERROR_SERVER/11000
with error API 2, and a retryable write after closeConnection. Skipped when
libmongoc's development files are not installed."""

import os
import shutil
import subprocess
import tempfile
import unittest

from .support import emulator

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'mongoc_smoke.c')


def _build():
    if not shutil.which('cc') or not shutil.which('pkg-config'):
        return None
    try:
        flags = subprocess.run(['pkg-config', '--cflags', '--libs', 'libmongoc-1.0'],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return None
    directory = tempfile.mkdtemp(prefix='resv-emulator-')
    binary = os.path.join(directory, 'mongoc_smoke')
    subprocess.run(['cc', '-std=gnu99', '-Wall', '-Wextra', '-Werror', '-O0', '-o', binary, SOURCE] + flags + ['-lpthread'],
                   check=True)
    return binary


class MongocTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.binary = _build()
        if cls.binary is None:
            raise unittest.SkipTest('libmongoc-1.0 development files not installed')

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(os.path.dirname(cls.binary), ignore_errors=True)

    def run_smoke(self, mongos):
        result = subprocess.run([self.binary, emulator(mongos).uri, 'mongos' if mongos else 'rs'],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout), (0, 'ok\n'), result.stderr)

    def test_mongoc_against_replica_set_primary(self):
        self.run_smoke(mongos=False)

    def test_mongoc_against_mongos(self):
        self.run_smoke(mongos=True)


if __name__ == '__main__':
    unittest.main()
