"""Replication lag, write concern and rollback in the replica set (the
model in emulator/README.md, "Replica set").

MongoDB's documentation followed:
- write concern, https://www.mongodb.com/docs/manual/reference/write-concern/ :
  w: N asks that the write reached N members, "majority" a majority of the
  data-bearing voting members; wtimeout bounds the wait and its expiry is a
  write concern error (WriteConcernFailed, 64, errInfo.wtimeout) although
  the write itself is not undone; w greater than the members fails
  (UnsatisfiableWriteConcern, 100);
- defaults, https://www.mongodb.com/docs/manual/reference/mongodb-defaults/ :
  since 5.0 the implicit default write concern is majority on a set without
  arbiters; setDefaultRWConcern
  (https://www.mongodb.com/docs/manual/reference/command/setDefaultRWConcern/)
  sets a cluster-wide default for writes that name none;
- read concern "majority",
  https://www.mongodb.com/docs/manual/reference/read-concern-majority/ :
  the read returns data acknowledged by a majority of the members, so not
  a w: 1 write that has not reached a secondary yet; "local" returns it;
- rollbacks, https://www.mongodb.com/docs/manual/core/replica-set-rollbacks/ :
  a write the primary accepted but had not replicated when it failed is
  rolled back when it rejoins; a write replicated to a member that stays
  with the majority is not.
"""

import threading
import time

from bson.int64 import Int64
from bson.son import SON

from .support import raw_command
from .test_replset import ReplicaSetTest, wait_for


class WritesTest(ReplicaSetTest):
    """Helpers for the tests below (no tests of its own)."""

    def write(self, doc, concern=None, member=None):
        command = SON([('insert', 'res'), ('documents', [doc])])
        if concern is not None:
            command['writeConcern'] = concern
        started = time.monotonic()
        reply = raw_command((member or self.rs.primary).address, 'app', command)
        return reply, time.monotonic() - started

    def secondary_ids(self, member):
        reply = raw_command(member.address, 'app',
                            {'find': 'res', '$readPreference': {'mode': 'secondary'}})
        return [d['_id'] for d in reply['cursor']['firstBatch']]


class LagTest(WritesTest):
    lag_ms = 800  # "at once" is under 0.6 s, "after the lag" at least 0.75 s

    def test_w1_reaches_secondaries_only_after_the_lag(self):
        reply, took = self.write({'_id': 1}, {'w': 1})
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertLess(took, 0.6)
        secondary = self.rs.members[1]
        self.assertEqual(self.secondary_ids(secondary), [])
        wait_for(lambda: self.secondary_ids(secondary) == [1])

    def test_majority_read_sees_only_what_a_majority_has(self):
        def ids(level):
            reply = raw_command(self.rs.primary.address, 'app', {
                'find': 'res', 'readConcern': {'level': level}})
            return [d['_id'] for d in reply['cursor']['firstBatch']]
        self.write({'_id': 1}, {'w': 'majority'})
        self.write({'_id': 2}, {'w': 1})
        self.assertEqual(ids('local'), [1, 2])
        self.assertEqual(ids('majority'), [1])
        wait_for(lambda: ids('majority') == [1, 2])

    def test_majority_and_the_default_wait_for_a_secondary(self):
        for concern in ({'w': 'majority'}, None):
            reply, took = self.write({'_id': concern is None}, concern)
            self.assertEqual(reply['ok'], 1)
            self.assertNotIn('writeConcernError', reply)
            self.assertGreaterEqual(took, 0.75)
            self.assertTrue(any(m.applied == self.rs.primary.applied
                                for m in self.rs.members if m is not self.rs.primary))

    def test_cluster_default_write_concern(self):
        self.assertEqual(self.client.admin.command('getDefaultRWConcern')
                         ['defaultWriteConcernSource'], 'implicit')
        reply = self.client.admin.command('setDefaultRWConcern',
                                          defaultWriteConcern={'w': 1})
        self.assertEqual(reply['defaultWriteConcern'], {'w': 1})
        _, took = self.write({'_id': 1})  # names none: w 1 now
        self.assertLess(took, 0.6)
        _, took = self.write({'_id': 2}, {'w': 'majority'})
        self.assertGreaterEqual(took, 0.75)

    def test_w_all_and_too_many(self):
        reply, took = self.write({'_id': 1}, {'w': 3})
        self.assertGreaterEqual(took, 0.75)
        self.assertTrue(all(m.applied == self.rs.primary.applied for m in self.rs.members))
        reply, _ = self.write({'_id': 2}, {'w': 4})
        self.assertEqual((reply['ok'], reply['writeConcernError']['code']), (1, 100))

    def test_wtimeout_is_a_write_concern_error_and_the_write_stays(self):
        reply, took = self.write({'_id': 1}, {'w': 'majority', 'wtimeout': 50})
        error = reply['writeConcernError']
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertEqual((error['code'], error['codeName']), (64, 'WriteConcernFailed'))
        self.assertIs(error['errInfo']['wtimeout'], True)
        self.assertLess(took, 0.6)
        self.assertEqual(self.coll.find_one({'_id': 1}), {'_id': 1})


class RollbackTest(WritesTest):
    lag_ms = 2000

    def kill_primary(self):
        old = self.rs.primary
        raw_command(self.rs.members[2].address, 'admin',
                    {'emulatorControl': 'kill', 'member': old.address})
        new = wait_for(lambda: self.rs.primary)
        self.assertIsNot(new, old)
        return old, new

    def test_w1_write_not_replicated_is_rolled_back(self):
        reply, _ = self.write({'_id': 'lost'}, {'w': 1})
        self.assertEqual(reply['n'], 1)
        old, new = self.kill_primary()
        self.assertIsNone(self.coll.find_one({'_id': 'lost'}))
        raw_command(new.address, 'admin', {'emulatorControl': 'restart', 'member': old.index})
        self.assertEqual(self.secondary_ids(old), [])  # its copy rolled back too
        self.coll.insert_one({'_id': 'after'})
        self.assertEqual([d['_id'] for d in self.coll.find()], ['after'])

    def test_majority_write_survives_the_failover(self):
        self.rs.set_lag(100)
        reply, _ = self.write({'_id': 'kept'}, {'w': 'majority'})
        self.assertNotIn('writeConcernError', reply)
        self.rs.set_lag(2000)
        self.kill_primary()
        self.assertEqual(self.coll.find_one({'_id': 'kept'}), {'_id': 'kept'})

    def test_step_down_loses_nothing(self):
        reply, _ = self.write({'_id': 'w1'}, {'w': 1})
        self.client.admin.command('replSetStepDown', 30)
        self.assertEqual(self.coll.find_one({'_id': 'w1'}), {'_id': 'w1'})


class WriteConcernLabelTest(WritesTest):
    """Retryable writes, https://www.mongodb.com/docs/manual/core/retryable-writes/
    and the retryable-writes specification ("Determining Retryable Errors"):
    a 4.4+ server adds the RetryableWriteError label to the top-level
    errorLabels of a retryable write whose writeConcernError has a
    retryable code (here InterruptedDueToReplStateChange, 11602, when the
    primary steps down for want of a majority while the write waits)."""
    lag_ms = 2000

    def write_losing_both_secondaries(self, retryable):
        command = SON([('insert', 'res'), ('documents', [{'_id': retryable}]),
                       ('writeConcern', {'w': 'majority'})])
        if retryable:
            command.update([('lsid', {'id': 'label-session'}), ('txnNumber', Int64(1))])
        primary = self.rs.primary
        killer = threading.Timer(0.3, lambda: [self.rs.kill(m) for m in self.rs.members
                                               if m is not primary])
        killer.start()
        self.addCleanup(killer.cancel)
        return raw_command(primary.address, 'app', command)

    def test_retryable_write_concern_error_is_labelled(self):
        reply = self.write_losing_both_secondaries(True)
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertEqual(reply['writeConcernError']['code'], 11602)
        self.assertEqual(reply['errorLabels'], ['RetryableWriteError'])

    def test_plain_write_concern_error_has_no_label(self):
        reply = self.write_losing_both_secondaries(False)
        self.assertEqual(reply['writeConcernError']['code'], 11602)
        self.assertNotIn('errorLabels', reply)

    def test_write_concern_timeout_has_no_label(self):
        command = SON([('insert', 'res'), ('documents', [{'_id': 1}]),
                       ('writeConcern', {'w': 'majority', 'wtimeout': 50}),
                       ('lsid', {'id': 'label-timeout'}), ('txnNumber', Int64(1))])
        reply = raw_command(self.rs.primary.address, 'app', command)
        self.assertEqual(reply['writeConcernError']['code'], 64)
        self.assertNotIn('errorLabels', reply)
