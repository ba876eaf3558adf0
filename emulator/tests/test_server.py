"""The server itself: wire protocol, commands in general, the command line.

MongoDB wire protocol: drivers open with a legacy OP_QUERY isMaster on
admin.$cmd (answered with OP_REPLY), then use OP_MSG; an OP_MSG with the
moreToCome flag gets no reply. An unknown command fails with
CommandNotFound (59). Session fields (lsid, txnNumber, $clusterTime,
readConcern, writeConcern, $readPreference, apiVersion) are accepted; a
retryable write retried with the same lsid and txnNumber gets the first
answer again (retryable-writes spec).
"""

import os
import signal
import subprocess
import sys
import threading
import unittest

import pymongo
from bson.int64 import Int64
from bson.son import SON

from .support import EmulatorTest, client, emulator, raw_command

RUN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'run.py')


class WireTest(EmulatorTest):

    def test_legacy_op_query_handshake(self):
        reply = raw_command(emulator().address, 'admin', {'isMaster': 1, 'helloOk': True},
                            op_query=True)
        self.assertIs(reply['ismaster'], True)
        self.assertIs(reply['helloOk'], True)
        self.assertEqual(reply['setName'], 'rs0')

    def test_more_to_come_gets_no_reply(self):
        self.assertIsNone(raw_command(emulator().address, self.db.name,
                                      {'insert': 'reservations', 'documents': [{'_id': 1}]},
                                      more_to_come=True))
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_unknown_command(self):
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.db.command('noSuchThing')
        self.assertEqual(caught.exception.code, 59)
        self.assertEqual(caught.exception.details['codeName'], 'CommandNotFound')

    def test_session_fields_accepted_and_retry_answered_once(self):
        command = SON([('findAndModify', 'reservations'), ('query', {'_id': 1}),
                       ('update', [{'$set': {'n': {'$add': [{'$ifNull': ['$n', 0]}, 1]}}}]),
                       ('upsert', True), ('new', True),
                       ('lsid', {'id': 'abc'}), ('txnNumber', Int64(5)),
                       ('$clusterTime', {'clusterTime': 0}), ('writeConcern', {'w': 'majority'}),
                       ('readConcern', {'level': 'local'}), ('apiVersion', '1'),
                       ('$readPreference', {'mode': 'primary'})])
        first = raw_command(emulator().address, self.db.name, command)
        again = raw_command(emulator().address, self.db.name, command)
        self.assertEqual(first['value']['n'], 1)
        self.assertEqual(again, first)
        self.assertEqual(self.coll.find_one()['n'], 1)

    def test_create_existing_is_namespace_exists(self):
        self.db.command('create', 'reservations')
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.db.command('create', 'reservations')
        self.assertEqual(caught.exception.code, 48)
        self.assertEqual(self.db.list_collection_names(filter={'name': 'reservations'}),
                         ['reservations'])

    def test_find_options_and_get_more(self):
        self.coll.insert_many([{'_id': i, 'v': i % 3} for i in range(10)])
        docs = list(self.coll.find({'v': 1}, {'v': 0}).sort('_id', -1).limit(2))
        self.assertEqual(docs, [{'_id': 7}, {'_id': 4}])
        self.assertEqual(len(list(self.coll.find().batch_size(3))), 10)
        self.assertEqual(self.coll.count_documents({'v': {'$gte': 1}}), 6)
        self.assertEqual(list(self.coll.aggregate([{'$match': {'v': 2}}, {'$count': 'n'}])),
                         [{'n': 3}])

    def test_many_concurrent_clients(self):
        errors = []

        def work(i):
            c = client(maxPoolSize=4)
            try:
                coll = c.get_database(self.db.name).reservations
                for j in range(20):
                    coll.find_one_and_update({'_id': '%d-%d' % (i, j)}, {'$inc': {'n': 1}}, upsert=True)
            except Exception as error:  # reported below
                errors.append(error)
            finally:
                c.close()

        threads = [threading.Thread(target=work, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(self.coll.count_documents({'n': 1}), 240)


class CommandLineTest(unittest.TestCase):

    def start(self, *args):
        process = subprocess.Popen([sys.executable, RUN] + list(args), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: process.poll() is None and process.kill())
        line = process.stdout.readline()
        self.assertRegex(line, r'^mongodb://127\.0\.0\.1:\d+/\n$')
        return process, line.strip()

    def test_prints_uri_serves_and_stops_on_stdin_eof(self):
        process, uri = self.start('--mongos')
        c = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000)
        self.assertEqual(c.admin.command('hello')['msg'], 'isdbgrid')
        c.close()
        process.stdin.close()
        self.assertEqual(process.wait(timeout=10), 0)
        self.assertEqual(process.stdout.read(), '')  # exactly one line

    def test_stops_on_sigterm(self):
        process, uri = self.start()
        process.send_signal(signal.SIGTERM)
        self.assertEqual(process.wait(timeout=10), 0)


if __name__ == '__main__':
    unittest.main()
