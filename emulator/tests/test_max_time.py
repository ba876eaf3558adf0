"""maxTimeMS on commands.

MongoDB's documentation followed:
- cursor.maxTimeMS(),
  https://www.mongodb.com/docs/manual/reference/method/cursor.maxTimeMS/ ,
  and the maxTimeMS field of each command (e.g. findAndModify,
  https://www.mongodb.com/docs/manual/reference/command/findAndModify/ ):
  an operation past its limit is terminated and answers "operation exceeded
  time limit", code 50 (MaxTimeMSExpired, error codes page); 0 means no
  limit; a negative value is refused (BadValue, 2); the connection stays
  usable;
- the failCommand fail point (server wiki): blockConnection makes the
  server sleep inside the operation, an interruptible wait, so the
  command's deadline ends it (the client-side-operations-timeout spec tests
  rely on this);
- write concern, https://www.mongodb.com/docs/manual/reference/write-concern/ :
  a write whose wait for its write concern outlasts maxTimeMS reports the
  expiry as a writeConcernError, the write itself being applied.
"""

import socket
import time

from bson.son import SON

from emulator.replset import ReplicaSet

from .support import EmulatorTest, emulator, encode_command, raw_command, read_reply


class MaxTimeTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.addCleanup(self.client.admin.command, 'configureFailPoint', 'failCommand',
                        mode='off')

    def block(self, ms):
        self.client.admin.command(SON([
            ('configureFailPoint', 'failCommand'), ('mode', 'alwaysOn'),
            ('data', {'failCommands': ['findAndModify'], 'blockConnection': True,
                      'blockTimeMS': ms})]))

    def find_and_modify(self, max_time_ms):
        return SON([('findAndModify', 'reservations'), ('query', {'_id': 1}),
                    ('update', {'$set': {'a': 1}}), ('upsert', True),
                    ('maxTimeMS', max_time_ms)])

    def test_blocked_command_expires_at_its_deadline_and_the_connection_stays(self):
        self.block(2000)
        host, port = emulator().address.split(':')
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            started = time.monotonic()
            sock.sendall(encode_command(self.db.name, self.find_and_modify(150)))
            reply = read_reply(sock)
            took = time.monotonic() - started
            self.assertEqual((reply['ok'], reply['code'], reply['codeName'], reply['errmsg']),
                             (0, 50, 'MaxTimeMSExpired', 'operation exceeded time limit'))
            self.assertGreaterEqual(took, 0.14)
            self.assertLess(took, 1.5)
            sock.sendall(encode_command('admin', {'ping': 1}))
            self.assertEqual(read_reply(sock)['ok'], 1)
        self.assertIsNone(self.coll.find_one({'_id': 1}))  # it never ran

    def test_block_shorter_than_the_limit_runs_the_command(self):
        self.block(50)
        reply = raw_command(emulator().address, self.db.name, self.find_and_modify(2000))
        self.assertEqual(reply['ok'], 1)
        self.assertEqual(self.coll.find_one({'_id': 1}), {'_id': 1, 'a': 1})

    def test_zero_is_no_limit_and_negative_is_refused(self):
        self.block(50)
        self.assertEqual(raw_command(emulator().address, self.db.name,
                                     self.find_and_modify(0))['ok'], 1)
        reply = raw_command(emulator().address, self.db.name, self.find_and_modify(-1))
        self.assertEqual((reply['ok'], reply['code']), (0, 2))


class MaxTimeWriteConcernTest(EmulatorTest):

    def test_write_concern_wait_past_max_time(self):
        rs = ReplicaSet(lag_ms=2000).start()
        self.addCleanup(rs.stop)
        started = time.monotonic()
        reply = raw_command(rs.primary.address, 'app', SON([
            ('insert', 'res'), ('documents', [{'_id': 1}]),
            ('writeConcern', {'w': 'majority'}), ('maxTimeMS', 100)]))
        self.assertLess(time.monotonic() - started, 1.5)
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertEqual(reply['writeConcernError']['code'], 50)
