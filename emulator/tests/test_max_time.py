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
import threading
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


class DocumentCostTest(EmulatorTest):
    """maxTimeMS against the work a command does: with a cost per deleted
    document ({emulatorControl: "cost", perDocumentMS: N}), a delete of
    many documents runs out of time part-way.

    MongoDB followed: maxTimeMS bounds the operation's processing time and
    the server checks it at interrupt points as it works, so a long
    multi-document delete stops where the limit passes
    (https://www.mongodb.com/docs/manual/reference/method/cursor.maxTimeMS/ ,
    the delete command's maxTimeMS,
    https://www.mongodb.com/docs/manual/reference/command/delete/ ); an
    interruption (MaxTimeMSExpired is one) fails the whole write command,
    {ok: 0, code: 50} with no count, rather than a writeError (the server's
    write_ops_exec.cpp, handleError: "These have always failed the whole
    batch"); a delete outside a transaction is not undone, so the documents
    deleted before the limit stay deleted."""

    def cost(self, ms):
        self.client.admin.command(SON([('emulatorControl', 'cost'), ('perDocumentMS', ms)]))

    def delete_all(self, max_time_ms):
        return raw_command(emulator().address, self.db.name, SON([
            ('delete', 'reservations'), ('deletes', [{'q': {}, 'limit': 0}]),
            ('maxTimeMS', max_time_ms)]))

    def test_large_delete_expires_part_way_having_deleted_some(self):
        self.coll.insert_many([{'_id': i} for i in range(100)])
        self.addCleanup(self.cost, 0)
        self.cost(10)
        started = time.monotonic()
        reply = self.delete_all(200)
        took = time.monotonic() - started
        self.assertEqual((reply['ok'], reply['code'], reply['codeName']),
                         (0, 50, 'MaxTimeMSExpired'))
        self.assertNotIn('n', reply)
        self.assertGreaterEqual(took, 0.19)
        self.assertLess(took, 1.0)
        left = self.coll.count_documents({})
        self.assertGreater(left, 0)
        self.assertLess(left, 100)
        # The connection and the server go on; without a limit it finishes.
        reply = self.delete_all(0)
        self.assertEqual((reply['ok'], reply['n']), (1, left))

    def test_cost_within_the_limit_deletes_all(self):
        self.coll.insert_many([{'_id': i} for i in range(10)])
        self.addCleanup(self.cost, 0)
        self.cost(5)
        reply = self.delete_all(5000)
        self.assertEqual((reply['ok'], reply['n']), (1, 10))

    def test_other_connections_go_on_while_a_costly_delete_runs(self):
        self.coll.insert_many([{'_id': i} for i in range(50)])
        self.addCleanup(self.cost, 0)
        self.cost(20)
        done = []
        thread = threading.Thread(target=lambda: done.append(self.delete_all(0)))
        thread.start()
        time.sleep(0.1)
        started = time.monotonic()
        self.assertEqual(self.client.admin.command('ping')['ok'], 1)
        self.coll.insert_one({'_id': 'new'})
        self.assertLess(time.monotonic() - started, 0.5)
        thread.join(10)
        self.assertEqual(done[0]['ok'], 1)
