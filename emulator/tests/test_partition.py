"""Network partitions in the replica set: a member cut off from the others
while clients still reach it (the model in emulator/README.md, "Replica
set", "Partitions").

MongoDB's documentation followed:
- elections, https://www.mongodb.com/docs/manual/core/replica-set-elections/
  ("Network Partition"): a primary that cannot see a majority of the voting
  members steps down and becomes a secondary; the members that form a
  majority elect a new primary once they have lost the primary for the
  election timeout (settings.electionTimeoutMillis, 10 seconds by default,
  https://www.mongodb.com/docs/manual/reference/replica-configuration/).
  Until the old primary notices, two members answer hello as primary, the
  new one with the larger term (electionId), which drivers prefer (SDAM);
- rollbacks, https://www.mongodb.com/docs/manual/core/replica-set-rollbacks/ :
  "A rollback reverts write operations on a former primary when the member
  rejoins its replica set after a failover", the writes it accepted that the
  others had not replicated; "it is often the result of a network
  partition"; there is none when the writes reached a member that stays
  with the majority;
- write concern, https://www.mongodb.com/docs/manual/reference/write-concern/ :
  w: 1 is acknowledged by the primary alone, so a cut-off primary
  acknowledges it; w: "majority" needs a majority of the members, which a
  cut-off member cannot reach, so it waits until wtimeout (a write concern
  error, WriteConcernFailed 64, errInfo.wtimeout) and the write itself is
  not undone by the timeout, only by the rollback; a primary that steps
  down wakes its waiters with PrimarySteppedDown (189, "Primary stepped
  down while waiting for replication", the server's
  replication_coordinator_impl.cpp), and then refuses writes with
  NotWritablePrimary (10107).
"""

import time

from bson.son import SON

from .support import raw_command
from .test_replset import ReplicaSetTest, wait_for


class PartitionTest(ReplicaSetTest):

    def write(self, member, _id, concern):
        return raw_command(member.address, 'app', SON([
            ('insert', 'res'), ('documents', [{'_id': _id}]), ('writeConcern', concern)]))

    def ids(self, member):
        reply = raw_command(member.address, 'app', {
            'find': 'res', '$readPreference': {'mode': 'primaryPreferred'}})
        return sorted(d['_id'] for d in reply['cursor']['firstBatch'])

    def control(self, **command):
        live = [m for m in self.rs.members if m.state != 'DOWN']
        return raw_command(live[0].address, 'admin',
                           SON([('emulatorControl', command.pop('action'))] +
                               list(command.items())))

    def cut_off_primary(self, notice_ms=10000):
        old = self.primary()
        self.write(old, 'before', {'w': 'majority'})
        reply = self.control(action='partition', member=old.address, noticeMS=notice_ms)
        self.assertEqual(reply['partitioned'], old.address)
        new = wait_for(lambda: self.rs.primary)
        self.assertIsNot(new, old)
        return old, new

    def test_cut_off_primary_keeps_answering_as_primary_until_it_notices(self):
        old, new = self.cut_off_primary(notice_ms=1500)
        hello_old, hello_new = self.hello(old), self.hello(new)
        self.assertTrue(hello_old['isWritablePrimary'])
        self.assertEqual(hello_old['primary'], old.address)
        self.assertTrue(hello_new['isWritablePrimary'])
        self.assertEqual(hello_new['primary'], new.address)
        self.assertGreater(hello_new['electionId'], hello_old['electionId'])
        # The third member follows the new primary.
        third = [m for m in self.rs.members if m not in (old, new)][0]
        self.assertEqual(self.hello(third)['primary'], new.address)
        # It notices it sees no majority and steps down.
        wait_for(lambda: self.hello(old)['secondary'])
        hello_old = self.hello(old)
        self.assertFalse(hello_old['isWritablePrimary'])
        self.assertNotIn('primary', hello_old)
        self.assertNotIn('electionId', hello_old)
        reply = self.write(old, 'late', {'w': 1})
        self.assertEqual((reply['ok'], reply['code']), (0, 10107))

    def test_w1_writes_on_the_cut_off_primary_are_rolled_back_at_heal(self):
        old, new = self.cut_off_primary()
        reply = self.write(old, 'minority', {'w': 1})
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertNotIn('writeConcernError', reply)
        reply = self.write(new, 'majority', {'w': 'majority'})
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertEqual(self.ids(old), ['before', 'minority'])
        self.assertEqual(self.ids(new), ['before', 'majority'])
        self.control(action='heal')
        wait_for(lambda: self.ids(old) == ['before', 'majority'])
        self.assertTrue(self.hello(old)['secondary'])
        self.assertEqual(self.hello(old)['primary'], new.address)
        self.assertEqual(self.ids(new), ['before', 'majority'])

    def test_majority_write_on_the_cut_off_primary_times_out(self):
        old, _ = self.cut_off_primary()
        started = time.monotonic()
        reply = self.write(old, 'never', {'w': 'majority', 'wtimeout': 300})
        self.assertGreaterEqual(time.monotonic() - started, 0.25)
        self.assertEqual((reply['ok'], reply['n']), (1, 1))
        self.assertEqual(reply['writeConcernError']['code'], 64)
        self.assertTrue(reply['writeConcernError']['errInfo']['wtimeout'])
        self.control(action='heal')
        wait_for(lambda: self.ids(old) == ['before'])

    def test_majority_write_waiting_when_the_primary_steps_down_fails(self):
        old, _ = self.cut_off_primary(notice_ms=800)
        reply = self.write(old, 'never', {'w': 'majority'})
        self.assertEqual(reply['writeConcernError']['code'], 189)
        self.assertTrue(self.hello(old)['secondary'])

    def test_partitioned_secondary_misses_writes_and_catches_up(self):
        primary = self.primary()
        secondary = self.rs.members[(primary.index + 1) % 3]
        self.control(action='partition', member=secondary.address)
        reply = self.write(primary, 'x', {'w': 'majority', 'wtimeout': 2000})
        self.assertNotIn('writeConcernError', reply)  # the third member has it
        self.assertIs(self.rs.primary, primary)
        time.sleep(0.2)
        self.assertEqual(self.ids(secondary), [])
        self.assertTrue(self.hello(secondary)['secondary'])
        self.control(action='heal')
        wait_for(lambda: self.ids(secondary) == ['x'])

    def test_no_election_during_the_partition_keeps_the_writes(self):
        # With the other two unable to elect (one is down), the cut-off
        # primary's history is the set's: healing rolls nothing back.
        primary = self.primary()
        others = [m for m in self.rs.members if m is not primary]
        self.control(action='kill', member=others[0].address)
        self.control(action='partition', member=primary.address)
        reply = self.write(primary, 'kept', {'w': 1})
        self.assertEqual(reply['ok'], 1)
        self.control(action='heal')
        self.control(action='restart', member=others[0].address)
        new = wait_for(lambda: self.rs.primary)
        wait_for(lambda: self.ids(new) == ['kept'])
