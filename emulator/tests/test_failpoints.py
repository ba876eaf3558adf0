"""The failCommand fail point.

MongoDB server wiki, "The failCommand fail point": configureFailPoint on
admin with mode "alwaysOn", "off", {times: N} or {skip: N}; data.failCommands
lists the only commands it affects; errorCode makes them answer
{ok: 0, code} without running; closeConnection closes the connection
without a reply; blockConnection with blockTimeMS delays the command, then
runs it (other connections are not blocked); writeConcernError runs the
command and attaches the error; appName restricts it to one client. The
server adds the RetryableWriteError label to a retryable error code on a
retryable write (retryable-writes spec).

onPrimaryTransactionalWrite (the server's fail point of the retryable-writes
specification tests; retryable writes,
https://www.mongodb.com/docs/manual/core/retryable-writes/ : a retried
write with the same lsid and txnNumber is not applied again, the server
answers it from its transaction record): a retryable write is committed,
then its connection closed (closeConnection, true by default);
failBeforeCommitExceptionCode stops the write before it commits (the
command answers that code, as a write error for insert, update and
delete), or closes the connection with nothing applied.
"""

import threading
import time
import unittest

import pymongo
from bson.int64 import Int64
from bson.son import SON

from .support import EmulatorTest, client, emulator, raw_command


class FailPointTest(EmulatorTest):

    def configure(self, mode, **data):
        return self.client.admin.command(SON([('configureFailPoint', 'failCommand'),
                                              ('mode', mode), ('data', data)]))

    def setUp(self):
        super().setUp()
        self.addCleanup(self.configure, 'off')

    def test_error_code_applies_to_listed_commands_only(self):
        self.configure('alwaysOn', failCommands=['find'], errorCode=2)
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.coll.find_one()
        self.assertEqual(caught.exception.code, 2)
        self.assertEqual(caught.exception.details['codeName'], 'BadValue')
        self.coll.insert_one({'_id': 1})          # not listed
        self.client.admin.command('ping')          # not listed
        self.client.admin.command('hello')         # not listed
        self.configure('off')
        self.assertEqual(self.coll.find_one(), {'_id': 1})

    def test_times_then_off(self):
        self.configure({'times': 2}, failCommands=['count'], errorCode=2)
        for _ in range(2):
            with self.assertRaises(pymongo.errors.OperationFailure):
                self.db.command('count', 'reservations')
        self.assertEqual(self.db.command('count', 'reservations')['n'], 0)

    def test_retryable_write_error_label(self):
        self.configure('alwaysOn', failCommands=['insert'], errorCode=91)
        command = SON([('insert', 'reservations'), ('documents', [{'_id': 1}]),
                       ('lsid', {'id': 'session-1'}), ('txnNumber', Int64(1))])
        reply = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((reply['ok'], reply['code'], reply['codeName']),
                         (0, 91, 'ShutdownInProgress'))
        self.assertEqual(reply['errorLabels'], ['RetryableWriteError'])
        del command['txnNumber']
        self.assertNotIn('errorLabels', raw_command(emulator().address, self.db.name, command))

    def test_close_connection(self):
        self.configure({'times': 1}, failCommands=['find'], closeConnection=True)
        c = client(retryReads=False)
        self.addCleanup(c.close)
        with self.assertRaises(pymongo.errors.AutoReconnect):
            c.get_database(self.db.name).reservations.find_one()
        self.assertIsNone(c.get_database(self.db.name).reservations.find_one())

    def test_retryable_write_survives_close_connection(self):
        self.configure({'times': 1}, failCommands=['insert'], closeConnection=True)
        self.coll.insert_one({'_id': 1})  # pymongo retries once on another connection
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_block_connection_delays_only_that_connection(self):
        self.configure({'times': 1}, failCommands=['find'], blockConnection=True, blockTimeMS=800)
        self.coll.insert_one({'_id': 1})
        blocked = {}

        def slow_find():
            start = time.monotonic()
            blocked['doc'] = self.coll.find_one()
            blocked['seconds'] = time.monotonic() - start

        thread = threading.Thread(target=slow_find)
        thread.start()
        time.sleep(0.1)
        other = client()
        self.addCleanup(other.close)
        start = time.monotonic()
        other.admin.command('ping')
        other.get_database(self.db.name).reservations.count_documents({})
        self.assertLess(time.monotonic() - start, 0.5)
        thread.join()
        self.assertEqual(blocked['doc'], {'_id': 1})
        self.assertGreaterEqual(blocked['seconds'], 0.7)

    def test_write_concern_error(self):
        self.configure({'times': 1}, failCommands=['insert'],
                       writeConcernError={'code': 64, 'errmsg': 'waiting for replication timed out'})
        with self.assertRaises(pymongo.errors.WriteConcernError):
            self.coll.insert_one({'_id': 1})
        self.assertEqual(self.coll.count_documents({}), 1)  # the insert ran

    def test_retryable_write_concern_error_is_retried_and_answered_from_memory(self):
        # retryable-writes spec tests ("InsertOne succeeds after
        # WriteConcernError ShutdownInProgress"): the write runs, the reply
        # carries the writeConcernError and the errorLabels of the fail
        # point; the driver retries with the same txnNumber and the server
        # answers from its memory of the executed write, without the error
        # (the fail point is spent), so the document is there once.
        self.configure({'times': 1}, failCommands=['insert'],
                       errorLabels=['RetryableWriteError'],
                       writeConcernError={'code': 91, 'errmsg': 'Replication is being shut down'})
        command = SON([('insert', 'reservations'), ('documents', [{'_id': 1}]),
                       ('lsid', {'id': 'session-wce'}), ('txnNumber', Int64(1))])
        first = raw_command(emulator().address, self.db.name, command)
        self.assertEqual(first['writeConcernError']['code'], 91)
        self.assertEqual(first['errorLabels'], ['RetryableWriteError'])
        retry = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((retry['ok'], retry['n']), (1, 1))
        self.assertNotIn('writeConcernError', retry)
        self.assertNotIn('errorLabels', retry)
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_retryable_write_concern_error_gets_the_label_by_itself(self):
        # Without errorLabels in the fail point, the server labels a
        # retryable writeConcernError code on a retryable write, as it
        # labels a retryable errorCode.
        self.configure('alwaysOn', failCommands=['insert'],
                       writeConcernError={'code': 91, 'errmsg': 'Replication is being shut down'})
        command = SON([('insert', 'reservations'), ('documents', [{'_id': 2}]),
                       ('lsid', {'id': 'session-wce-label'}), ('txnNumber', Int64(1))])
        reply = raw_command(emulator().address, self.db.name, command)
        self.assertEqual(reply['errorLabels'], ['RetryableWriteError'])
        del command['txnNumber']
        command['documents'] = [{'_id': 3}]
        reply = raw_command(emulator().address, self.db.name, command)
        self.assertEqual(reply['writeConcernError']['code'], 91)
        self.assertNotIn('errorLabels', reply)

    def test_app_name(self):
        self.configure('alwaysOn', failCommands=['ping'], errorCode=2, appName='victim')
        self.client.admin.command('ping')
        victim = client(appname='victim')
        self.addCleanup(victim.close)
        with self.assertRaises(pymongo.errors.OperationFailure):
            victim.admin.command('ping')



class TransactionalWriteFailPointTest(EmulatorTest):

    def configure(self, mode, **data):
        return self.client.admin.command(SON([
            ('configureFailPoint', 'onPrimaryTransactionalWrite'), ('mode', mode),
            ('data', data)]))

    def setUp(self):
        super().setUp()
        self.addCleanup(self.configure, 'off')

    def commit_then_close(self, command):
        """Send a retryable write under the fail point (its connection is
        closed), then its retry; returns the retry's reply."""
        self.configure({'times': 1})
        command = SON(command)
        command.update([('lsid', {'id': 'txn-%s' % next(iter(command))}),
                        ('txnNumber', Int64(7))])
        with self.assertRaises(ConnectionError):
            raw_command(emulator().address, self.db.name, command)
        return raw_command(emulator().address, self.db.name, command)

    def test_insert_is_committed_and_answered_once(self):
        retry = self.commit_then_close({'insert': 'reservations', 'documents': [{'_id': 1}]})
        self.assertEqual((retry['ok'], retry['n']), (1, 1))
        self.assertNotIn('writeErrors', retry)  # not a duplicate key: not applied again
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_find_and_modify_is_applied_once(self):
        self.coll.insert_one({'_id': 'k', 'n': 0})
        retry = self.commit_then_close({
            'findAndModify': 'reservations', 'query': {'_id': 'k'},
            'update': {'$inc': {'n': 1}}, 'new': True})
        self.assertEqual(retry['value'], {'_id': 'k', 'n': 1})
        self.assertEqual(self.coll.find_one(), {'_id': 'k', 'n': 1})

    def test_update_and_delete_are_applied_once(self):
        self.coll.insert_many([{'_id': 1, 'n': 0}, {'_id': 2}])
        retry = self.commit_then_close({'update': 'reservations', 'updates': [
            {'q': {'_id': 1}, 'u': {'$inc': {'n': 1}}}]})
        self.assertEqual((retry['n'], retry['nModified']), (1, 1))
        self.assertEqual(self.coll.find_one({'_id': 1}), {'_id': 1, 'n': 1})
        self.coll.insert_one({'_id': 3})
        retry = self.commit_then_close({'delete': 'reservations', 'deletes': [
            {'q': {}, 'limit': 1}]})
        self.assertEqual(retry['n'], 1)
        self.assertEqual(sorted(d['_id'] for d in self.coll.find()), [2, 3])

    def test_driver_retry_is_answered_from_the_record(self):
        self.coll.insert_one({'_id': 'k', 'n': 0})
        self.configure({'times': 1})
        doc = self.coll.find_one_and_update({'_id': 'k'}, {'$inc': {'n': 1}},
                                            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc, {'_id': 'k', 'n': 1})
        self.assertEqual(self.coll.find_one(), {'_id': 'k', 'n': 1})

    def test_plain_writes_are_not_affected(self):
        self.configure('alwaysOn')
        reply = raw_command(emulator().address, self.db.name,
                            {'insert': 'reservations', 'documents': [{'_id': 1}]})
        self.assertEqual((reply['ok'], reply['n']), (1, 1))

    def test_fail_before_commit_applies_nothing(self):
        self.configure({'times': 1}, closeConnection=False, failBeforeCommitExceptionCode=91)
        command = SON([('insert', 'reservations'), ('documents', [{'_id': 1}]),
                       ('lsid', {'id': 'txn-before'}), ('txnNumber', Int64(1))])
        reply = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((reply['ok'], reply['n'], reply['writeErrors'][0]['code']), (1, 0, 91))
        self.assertEqual(self.coll.count_documents({}), 0)
        retry = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((retry['ok'], retry['n']), (1, 1))
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_fail_before_commit_of_find_and_modify_is_its_error(self):
        self.configure({'times': 1}, closeConnection=False, failBeforeCommitExceptionCode=91)
        command = SON([('findAndModify', 'reservations'), ('query', {'_id': 1}),
                       ('update', {'$inc': {'n': 1}}), ('upsert', True),
                       ('lsid', {'id': 'txn-before-fam'}), ('txnNumber', Int64(1))])
        reply = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((reply['ok'], reply['code']), (0, 91))
        self.assertEqual(reply['errorLabels'], ['RetryableWriteError'])
        self.assertEqual(self.coll.count_documents({}), 0)

    def test_fail_before_commit_with_close_closes_and_applies_nothing(self):
        self.configure({'times': 1}, failBeforeCommitExceptionCode=1)
        command = SON([('insert', 'reservations'), ('documents', [{'_id': 1}]),
                       ('lsid', {'id': 'txn-before-close'}), ('txnNumber', Int64(1))])
        with self.assertRaises(ConnectionError):
            raw_command(emulator().address, self.db.name, command)
        self.assertEqual(self.coll.count_documents({}), 0)
        retry = raw_command(emulator().address, self.db.name, command)
        self.assertEqual((retry['ok'], retry['n']), (1, 1))
        self.assertEqual(self.coll.count_documents({}), 1)


if __name__ == '__main__':
    unittest.main()
