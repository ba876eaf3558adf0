"""TLS, with a certificate made by openssl when the test runs.

MongoDB's documentation followed: "Configure mongod and mongos for
TLS/SSL", https://www.mongodb.com/docs/manual/tutorial/configure-ssl/ ,
and the connection string's TLS options,
https://www.mongodb.com/docs/manual/reference/connection-string-options/ :
with net.tls.mode requireTLS the server accepts TLS connections only; a
client connects with tls=true and trusts the server's certificate through
tlsCAFile, and checks that the certificate names the host it dialled.
The real mongoc runs its smoke test over TLS (mongoc_smoke.c).
"""

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import unittest

import pymongo

from emulator.replset import ReplicaSet
from emulator.server import Emulator
from emulator.tls import make_certificates

from .test_mongoc import _build


class TLSTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not shutil.which('openssl'):
            raise unittest.SkipTest('openssl not installed')
        cls.directory = tempfile.mkdtemp(prefix='resv-tls-test-')
        cls.tls = make_certificates(cls.directory)
        cls.server = Emulator(tls=cls.tls).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.directory, ignore_errors=True)

    def test_uri_names_tls_and_the_ca(self):
        self.assertEqual(self.server.uri, 'mongodb://%s/?tls=true&tlsCAFile=%s'
                         % (self.server.address, self.tls[0]))

    def test_driver_connects_with_the_ca(self):
        client = pymongo.MongoClient(self.server.uri, serverSelectionTimeoutMS=3000)
        self.addCleanup(client.close)
        client.app.res.insert_one({'_id': 1})
        self.assertEqual(client.app.res.find_one(), {'_id': 1})

    def test_certificate_names_the_host_and_is_checked(self):
        context = ssl.create_default_context(cafile=self.tls[0])
        with socket.create_connection(('127.0.0.1', self.server.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname='127.0.0.1') as sock:
                self.assertGreaterEqual(sock.version(), 'TLSv1.2')
        untrusted = ssl.create_default_context()  # the system's CAs only
        with socket.create_connection(('127.0.0.1', self.server.port), timeout=5) as raw:
            with self.assertRaises(ssl.SSLCertVerificationError):
                untrusted.wrap_socket(raw, server_hostname='127.0.0.1')

    def test_plain_connection_is_refused(self):
        client = pymongo.MongoClient('mongodb://%s/' % self.server.address,
                                     serverSelectionTimeoutMS=500)
        self.addCleanup(client.close)
        with self.assertRaises(pymongo.errors.ServerSelectionTimeoutError):
            client.admin.command('ping')

    def test_replica_set_over_tls(self):
        rs = ReplicaSet(tls=self.tls).start()
        self.addCleanup(rs.stop)
        self.assertTrue(rs.uri.endswith('&tls=true&tlsCAFile=' + self.tls[0]))
        client = pymongo.MongoClient(rs.uri, serverSelectionTimeoutMS=5000)
        self.addCleanup(client.close)
        client.app.res.insert_one({'_id': 1})
        self.assertEqual(client.address, ('127.0.0.1', rs.primary.port))

    def test_mongoc_over_tls(self):
        binary = _build('mongoc_smoke')
        if binary is None:
            self.skipTest('libmongoc-1.0 development files not installed')
        self.addCleanup(shutil.rmtree, os.path.dirname(binary), True)
        result = subprocess.run([binary, self.server.uri, 'rs'], capture_output=True,
                                text=True, timeout=60)
        self.assertEqual((result.returncode, result.stdout), (0, 'ok\n'), result.stderr)
