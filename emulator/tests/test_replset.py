"""The replica set (replset.py): three members on three ports, each test on
a fresh set.

MongoDB's documentation followed:
- hello, https://www.mongodb.com/docs/manual/reference/command/hello/ :
  a member reports setName, hosts, primary, me, isWritablePrimary,
  secondary, setVersion, electionId (primary only) and topologyVersion;
- replSetStepDown,
  https://www.mongodb.com/docs/manual/reference/command/replSetStepDown/ :
  only valid on the primary (an error elsewhere), waits for an electable
  secondary to catch up, and the old primary may not be re-elected for the
  given seconds;
- elections, https://www.mongodb.com/docs/manual/core/replica-set-elections/ :
  when the primary is unreachable past the election timeout the secondaries
  elect a new one, with a new term;
- error codes, https://www.mongodb.com/docs/manual/reference/error-codes/ :
  a write on a secondary fails with NotWritablePrimary (10107), labelled
  RetryableWriteError on a retryable write; a read without secondaryOk with
  NotPrimaryNoSecondaryOk (13435);
- read preference, https://www.mongodb.com/docs/manual/core/read-preference/ :
  a read with a non-primary mode may run on a secondary;
- retryable writes (server spec "Retryable Writes"): a write retried on
  the new primary after a failover is answered from the transaction record
  that was replicated with it, not applied twice;
- SDAM's streaming protocol ("awaitable hello"): a hello carrying the
  client's topologyVersion and maxAwaitTimeMS is answered when the
  server's topologyVersion changes, or when the time is up;
- SDAM's error handling: a 4.4+ member's "not primary" and "shutting
  down" errors carry its topologyVersion, so a driver that knows that
  version takes a failCommand error as stale and retries on the same
  primary at once (the retryable-writes spec tests need it).
"""

import socket
import time
import unittest

import pymongo
from bson.int64 import Int64
from bson.son import SON

from emulator.replset import ReplicaSet

from .support import SON_OPTIONS, raw_command


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError('condition not met in %.1f s' % timeout)


class ReplicaSetTest(unittest.TestCase):
    lag_ms = 0

    def setUp(self):
        self.rs = ReplicaSet(lag_ms=self.lag_ms, election_timeout_ms=100).start()
        self.addCleanup(self.rs.stop)
        self.client = pymongo.MongoClient(self.rs.uri, serverSelectionTimeoutMS=10000,
                                          document_class=SON)
        self.addCleanup(self.client.close)
        self.coll = self.client.get_database('app', codec_options=SON_OPTIONS).res

    def hello(self, member):
        return raw_command(member.address, 'admin', {'hello': 1})

    def primary(self):
        return wait_for(lambda: self.rs.primary)


class HelloTest(ReplicaSetTest):

    def test_primary_and_secondary_hello(self):
        hosts = self.rs.hosts
        primary, secondary = self.rs.members[0], self.rs.members[1]
        reply = self.hello(primary)
        self.assertEqual((reply['setName'], reply['hosts'], reply['primary'], reply['me']),
                         ('rs0', hosts, hosts[0], hosts[0]))
        self.assertIs(reply['isWritablePrimary'], True)
        self.assertIs(reply['secondary'], False)
        self.assertEqual(reply['setVersion'], 1)
        self.assertIn('electionId', reply)
        self.assertEqual(set(reply['topologyVersion']), {'processId', 'counter'})
        reply = self.hello(secondary)
        self.assertEqual((reply['primary'], reply['me']), (hosts[0], hosts[1]))
        self.assertIs(reply['isWritablePrimary'], False)
        self.assertIs(reply['secondary'], True)
        self.assertNotIn('electionId', reply)
        legacy = raw_command(secondary.address, 'admin', {'isMaster': 1}, op_query=True)
        self.assertIs(legacy['ismaster'], False)

    def test_driver_discovers_the_set_from_one_seed(self):
        seed = 'mongodb://%s/?replicaSet=rs0' % self.rs.members[2].address
        client = pymongo.MongoClient(seed, serverSelectionTimeoutMS=5000)
        self.addCleanup(client.close)
        client.app.res.insert_one({'_id': 1})
        self.assertEqual(client.address, ('127.0.0.1', self.rs.members[0].port))
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_awaitable_hello_answers_on_a_change_or_at_the_deadline(self):
        secondary = self.rs.members[1]
        version = self.hello(secondary)['topologyVersion']
        started = time.monotonic()
        reply = raw_command(secondary.address, 'admin',
                            {'hello': 1, 'topologyVersion': version, 'maxAwaitTimeMS': 200})
        self.assertGreaterEqual(time.monotonic() - started, 0.19)
        self.assertEqual(reply['topologyVersion'], version)
        import threading
        threading.Timer(0.2, lambda: self.client.admin.command('replSetStepDown', 30)).start()
        started = time.monotonic()
        reply = raw_command(secondary.address, 'admin',
                            {'hello': 1, 'topologyVersion': version, 'maxAwaitTimeMS': 5000})
        self.assertLess(time.monotonic() - started, 4)
        self.assertGreater(reply['topologyVersion']['counter'], version['counter'])


class SecondaryTest(ReplicaSetTest):

    def test_secondary_refuses_writes_with_not_writable_primary(self):
        secondary = self.rs.members[1]
        reply = raw_command(secondary.address, 'app', {'insert': 'res', 'documents': [{'_id': 1}]})
        self.assertEqual((reply['ok'], reply['code'], reply['codeName']),
                         (0, 10107, 'NotWritablePrimary'))
        self.assertNotIn('errorLabels', reply)
        reply = raw_command(secondary.address, 'app', SON([
            ('findAndModify', 'res'), ('query', {'_id': 1}), ('update', {'$set': {'a': 1}}),
            ('upsert', True), ('lsid', {'id': 'x'}), ('txnNumber', Int64(1))]))
        self.assertEqual((reply['code'], reply['errorLabels']), (10107, ['RetryableWriteError']))
        reply = raw_command(secondary.address, 'app', {'create': 'other'})
        self.assertEqual(reply['code'], 10107)
        self.assertEqual(self.coll.count_documents({}), 0)

    def test_state_change_errors_carry_the_topology_version(self):
        primary, secondary = self.primary(), self.rs.members[1]
        reply = raw_command(secondary.address, 'app', {'insert': 'res', 'documents': [{'_id': 1}]})
        self.assertEqual(reply['topologyVersion'], self.hello(secondary)['topologyVersion'])
        raw_command(primary.address, 'admin', SON([
            ('configureFailPoint', 'failCommand'), ('mode', {'times': 1}),
            ('data', {'failCommands': ['insert'], 'errorCode': 189})]))
        reply = raw_command(primary.address, 'app', {'insert': 'res', 'documents': [{'_id': 1}]})
        self.assertEqual(reply['code'], 189)
        self.assertEqual(reply['topologyVersion'], self.hello(primary)['topologyVersion'])
        raw_command(primary.address, 'admin', SON([
            ('configureFailPoint', 'failCommand'), ('mode', {'times': 1}),
            ('data', {'failCommands': ['insert'], 'errorCode': 2})]))
        reply = raw_command(primary.address, 'app', {'insert': 'res', 'documents': [{'_id': 1}]})
        self.assertEqual(reply['code'], 2)
        self.assertNotIn('topologyVersion', reply)
        # The driver keeps the primary: a retried write succeeds.
        raw_command(primary.address, 'admin', SON([
            ('configureFailPoint', 'failCommand'), ('mode', {'times': 1}),
            ('data', {'failCommands': ['insert'], 'errorCode': 189,
                      'errorLabels': ['RetryableWriteError']})]))
        client = pymongo.MongoClient(self.rs.uri, serverSelectionTimeoutMS=2000)
        self.addCleanup(client.close)
        client.app.res.insert_one({'_id': 2})
        self.assertEqual(self.coll.count_documents({'_id': 2}), 1)

    def test_secondary_reads_need_secondary_ok(self):
        self.coll.insert_one({'_id': 1})
        secondary = self.rs.members[1]
        reply = raw_command(secondary.address, 'app', {'find': 'res'})
        self.assertEqual((reply['ok'], reply['code']), (0, 13435))
        reply = raw_command(secondary.address, 'app',
                            {'find': 'res', '$readPreference': {'mode': 'secondaryPreferred'}})
        self.assertEqual(reply['cursor']['firstBatch'], [{'_id': 1}])
        reply = raw_command(secondary.address, 'app', {'find': 'res'}, op_query=True,
                            secondary_ok=True)
        self.assertEqual(reply['cursor']['firstBatch'], [{'_id': 1}])


class StepDownTest(ReplicaSetTest):

    def test_step_down_elects_a_caught_up_secondary(self):
        self.coll.insert_one({'_id': 1})
        old = self.rs.primary
        before = self.hello(old)['electionId']
        self.client.admin.command('replSetStepDown', 30)
        new = self.primary()
        self.assertIsNot(new, old)
        self.assertGreater(self.hello(new)['electionId'], before)
        reply = self.hello(old)
        self.assertEqual((reply['isWritablePrimary'], reply['secondary'], reply['primary']),
                         (False, True, new.address))
        self.coll.insert_one({'_id': 2})  # the driver follows the new primary
        self.assertEqual([d['_id'] for d in self.coll.find()], [1, 2])
        reply = raw_command(old.address, 'admin', {'replSetStepDown': 30})
        self.assertEqual(reply['code'], 10107)
        reply = raw_command(new.address, 'app', {'replSetStepDown': 30})
        self.assertEqual(reply['code'], 13)

    def test_stepped_down_member_is_not_re_elected_for_its_seconds(self):
        first = self.rs.primary
        self.client.admin.command('replSetStepDown', 60)
        second = self.primary()
        raw_command(second.address, 'admin', {'replSetStepDown': 60})
        third = self.primary()
        self.assertEqual(len({first.index, second.index, third.index}), 3)
        reply = raw_command(third.address, 'admin', {'replSetStepDown': 60})
        self.assertEqual(reply['code'], 262)  # no electable secondary
        self.assertIs(self.rs.primary, third)

    def test_retried_write_is_answered_by_the_new_primary(self):
        command = SON([('findAndModify', 'res'), ('query', {'_id': 1}),
                       ('update', [{'$set': {'n': {'$add': [{'$ifNull': ['$n', 0]}, 1]}}}]),
                       ('upsert', True), ('new', True),
                       ('lsid', {'id': 'retry'}), ('txnNumber', Int64(7))])
        first = raw_command(self.rs.primary.address, 'app', command)
        self.client.admin.command('replSetStepDown', 30)
        again = raw_command(self.primary().address, 'app', command)
        self.assertEqual(again['value'], first['value'])
        self.assertEqual(self.coll.find_one({'_id': 1})['n'], 1)


class KillTest(ReplicaSetTest):

    def test_killed_primary_is_replaced_and_restarts_as_secondary(self):
        self.coll.insert_one({'_id': 1})
        old = self.rs.primary
        old_process = self.hello(old)['topologyVersion']['processId']
        self.client.admin.command('emulatorControl', 'kill', member='primary')
        wait_for(lambda: old.state == 'DOWN')  # once the reply was sent
        with self.assertRaises(OSError):
            socket.create_connection(('127.0.0.1', old.port), timeout=2).close()
        new = self.primary()
        self.assertIsNot(new, old)
        self.coll.insert_one({'_id': 2})  # a retryable write after the election
        status = self.client.admin.command('emulatorControl', 'status')
        self.assertEqual([m['stateStr'] for m in status['members']].count('DOWN'), 1)
        self.client.admin.command('emulatorControl', 'restart', member=old.address)
        reply = self.hello(old)
        self.assertIs(reply['secondary'], True)
        self.assertNotEqual(reply['topologyVersion']['processId'], old_process)
        wait_for(lambda: old.applied == new.applied)
        reply = raw_command(old.address, 'app', {'find': 'res', 'sort': {'_id': 1},
                                                 '$readPreference': {'mode': 'secondary'}})
        self.assertEqual(reply['cursor']['firstBatch'], [{'_id': 1}, {'_id': 2}])

    def test_no_election_without_a_majority(self):
        self.client.admin.command('emulatorControl', 'kill', member=1)
        self.client.admin.command('emulatorControl', 'kill', member=2)
        wait_for(lambda: self.rs.primary is None)  # it cannot see a majority
        reply = self.hello(self.rs.members[0])
        self.assertEqual((reply['isWritablePrimary'], reply['secondary']), (False, True))
        time.sleep(0.3)
        self.assertIsNone(self.rs.primary)
        raw_command(self.rs.members[0].address, 'admin',
                    {'emulatorControl': 'restart', 'member': 2})
        self.primary()


if __name__ == '__main__':
    unittest.main()
