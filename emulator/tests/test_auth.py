"""Authentication (SCRAM) and roles.

MongoDB's documentation followed:
- SCRAM, https://www.mongodb.com/docs/manual/core/security-scram/ :
  SCRAM-SHA-256 (RFC 7677) and SCRAM-SHA-1 (RFC 5802) through saslStart and
  saslContinue, the first step possibly in the handshake's hello
  (speculativeAuthenticate, "Authentication" in the MongoDB handshake
  specification, MongoDB 4.4+); hello with saslSupportedMechs: "<db>.<user>" lists the
  user's mechanisms (https://www.mongodb.com/docs/manual/reference/command/hello/);
  a wrong password or an unknown user fails with AuthenticationFailed (18);
- built-in roles, https://www.mongodb.com/docs/manual/reference/built-in-roles/ :
  readWrite on a database reads and writes its collections (not
  dropDatabase); config and admin commands such as shardCollection need
  other roles (clusterManager, root); anything unauthorized answers
  Unauthorized (13) ("not authorized on <db> to execute command ...");
  before authenticating, a client runs only the handshake commands.
The real mongoc negotiates and authenticates too (mongoc_auth.c).
"""

import os
import shutil
import subprocess
import unittest

import pymongo
from bson.binary import Binary
from bson.son import SON

from emulator.auth import User
from emulator.server import Emulator

from .support import raw_command
from .test_mongoc import _build

USERS = ['app:s3cret:readWrite@resv', 'boss:pw:root', 'ops:pw:clusterManager@admin']


class AuthTest(unittest.TestCase):
    mongos = False

    @classmethod
    def setUpClass(cls):
        cls.server = Emulator(mongos=cls.mongos, users=[User.parse(u) for u in USERS]).start()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def connect(self, credentials, mechanism=None, database='resv'):
        uri = 'mongodb://%s@%s/%s?authSource=admin' % (credentials, self.server.address, database)
        if mechanism:
            uri += '&authMechanism=' + mechanism
        client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=3000)
        self.addCleanup(client.close)
        return client

    def assert_code(self, code, function, *args, **kwargs):
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            function(*args, **kwargs)
        self.assertEqual(caught.exception.code, code, caught.exception)
        return caught.exception

    def test_both_scram_mechanisms(self):
        for mechanism in ('SCRAM-SHA-256', 'SCRAM-SHA-1'):
            client = self.connect('app:s3cret', mechanism)
            client.resv.auth.replace_one({'_id': mechanism}, {'m': 1}, upsert=True)
            self.assertEqual(client.resv.auth.find_one({'_id': mechanism})['m'], 1)

    def test_hello_lists_the_users_mechanisms(self):
        reply = raw_command(self.server.address, 'admin',
                            {'hello': 1, 'saslSupportedMechs': 'admin.app'})
        self.assertEqual(reply['saslSupportedMechs'], ['SCRAM-SHA-1', 'SCRAM-SHA-256'])
        reply = raw_command(self.server.address, 'admin',
                            {'hello': 1, 'saslSupportedMechs': 'admin.nobody'})
        self.assertNotIn('saslSupportedMechs', reply)

    def test_speculative_authentication_in_the_handshake(self):
        first = 'n,,n=app,r=clientnonce'
        reply = raw_command(self.server.address, 'admin', SON([
            ('hello', 1), ('speculativeAuthenticate', SON([
                ('saslStart', 1), ('mechanism', 'SCRAM-SHA-256'),
                ('payload', Binary(first.encode())), ('db', 'admin')]))]))
        step = reply['speculativeAuthenticate']
        self.assertIs(step['done'], False)
        self.assertTrue(bytes(step['payload']).startswith(b'r=clientnonce'))
        self.assertIn(b',i=4096', bytes(step['payload']))
        reply = raw_command(self.server.address, 'admin', SON([
            ('hello', 1), ('speculativeAuthenticate', SON([
                ('saslStart', 1), ('mechanism', 'SCRAM-SHA-256'),
                ('payload', Binary(b'n,,n=nobody,r=x')), ('db', 'admin')]))]))
        self.assertNotIn('speculativeAuthenticate', reply)

    def test_wrong_password_and_unknown_user_fail_with_18(self):
        for credentials in ('app:wrong', 'nobody:s3cret'):
            error = self.assert_code(18, self.connect(credentials).resv.auth.find_one)
            self.assertEqual(error.details['codeName'], 'AuthenticationFailed')

    def test_unauthenticated_runs_only_the_handshake(self):
        self.assertEqual(raw_command(self.server.address, 'admin', {'ping': 1})['ok'], 1)
        reply = raw_command(self.server.address, 'resv', {'find': 'auth'})
        self.assertEqual((reply['ok'], reply['code'], reply['codeName']), (0, 13, 'Unauthorized'))

    def test_read_write_on_one_database_only(self):
        client = self.connect('app:s3cret')
        client.resv.auth.insert_one({})
        client.resv.auth.create_index('x')
        self.assertGreaterEqual(client.resv.auth.count_documents({}), 1)
        error = self.assert_code(13, client.config.collections.find_one)
        self.assertIn('not authorized on config to execute command', str(error))
        self.assert_code(13, client.other.auth.insert_one, {})
        self.assert_code(13, client.drop_database, 'resv')
        self.assert_code(13, client.admin.command, 'replSetGetStatus')
        self.assert_code(13, client.admin.command, SON([
            ('configureFailPoint', 'failCommand'), ('mode', 'off')]))

    def test_root_runs_everything(self):
        client = self.connect('boss:pw', database='admin')
        client.other.auth.insert_one({})
        client.config.collections.find_one()
        client.drop_database('other')


class MongosAuthTest(AuthTest):
    mongos = True

    def test_shard_collection_needs_cluster_manager(self):
        command = SON([('shardCollection', 'resv.sharded'), ('key', {'_id': 1})])
        self.assert_code(13, self.connect('app:s3cret').admin.command, command)
        self.assertEqual(self.connect('ops:pw', database='admin').admin.command(command)['ok'], 1)

    def test_mongoc(self):
        binary = _build('mongoc_auth')
        if binary is None:
            self.skipTest('libmongoc-1.0 development files not installed')
        self.addCleanup(shutil.rmtree, os.path.dirname(binary), True)
        plain = Emulator(users=[User.parse(u) for u in USERS]).start()
        self.addCleanup(plain.stop)
        for mongos, server in ((False, plain), (True, self.server)):
            for mechanism in ('', '&authMechanism=SCRAM-SHA-256', '&authMechanism=SCRAM-SHA-1'):
                result = subprocess.run(
                    [binary, 'mongodb://app:s3cret@%s/resv?authSource=admin%s'
                     % (server.address, mechanism),
                     'mongodb://app:wrong@%s/resv?authSource=admin' % server.address,
                     'mongos' if mongos else 'rs'], capture_output=True, text=True, timeout=60)
                self.assertEqual((result.returncode, result.stdout), (0, 'ok\n'),
                                 (mechanism, result.stderr))
