"""MongoDB's own specification tests (the unified test format) against the
emulator, with Debian's pymongo 3.11 as the driver.

    /usr/bin/python3 emulator/spectests/run.py [--replset] [-v] [FILE.json ...]

Runs every JSON file under this folder (or those named) against a fresh
emulator of this process (plain mode; --replset: a three-member set), and
prints each skipped case with its reason, each failure with what differed,
a tally of the skips by reason, and last "spec tests (MODE): N passed,
N failed, N skipped in S s". A case known to fail for a reason outside
what the store sends is listed in KNOWN (file, description: reason): it
counts as skipped with that reason while it fails, and as a failure once
it passes, so the list stays true. Exits non-zero on a failure.

The runner covers the part of the format these files use: client, database
and collection entities; initialData; the operations the store's commands
correspond to (insertOne, insertMany, updateOne/Many, replaceOne,
deleteOne/Many, bulkWrite, findOneAndUpdate/Replace/Delete, find, findOne),
aggregate and runCommand, and the testRunner's failPoint and
createEntities; expectResult, expectError, expectEvents (command started,
succeeded and failed events) and outcome, with the operators $$exists,
$$type and $$unsetOrMatches of the format's "Evaluating Matches" rules.
Anything else is a skip naming what is missing.
"""

import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

import pymongo  # noqa: E402
from bson import json_util  # noqa: E402
from bson.errors import InvalidDocument  # noqa: E402
from bson.son import SON  # noqa: E402
from pymongo import monitoring  # noqa: E402
from pymongo.collection import ReturnDocument  # noqa: E402
from pymongo.errors import BulkWriteError, OperationFailure, PyMongoError  # noqa: E402
from pymongo.read_concern import ReadConcern  # noqa: E402
from pymongo.write_concern import WriteConcern  # noqa: E402

from emulator.commands import MAX_WIRE_VERSION  # noqa: E402,F401
from emulator.replset import ReplicaSet  # noqa: E402
from emulator.server import Emulator  # noqa: E402
from emulator.spectests.known import KNOWN, driver_refusal  # noqa: E402
from emulator.spectests.matching import (  # noqa: E402
    _UNSET, Mismatch, Skip, match, match_result)

# A retry after a network error waits for the driver's monitor to find the
# server again, at most once per MIN_HEARTBEAT_INTERVAL (half a second in
# pymongo); pymongo's own test suite shortens it the same way (client_knobs).
pymongo.common.MIN_HEARTBEAT_INTERVAL = 0.01
HEARTBEAT_MS = 100

SERVER_VERSION = (6, 0, 0)  # what the emulator's buildInfo says

# Commands the format says a runner never reports as events.
UNOBSERVED = {'hello', 'ismaster', 'isMaster', 'saslStart', 'saslContinue', 'authenticate',
              'getnonce', 'configureFailPoint', 'endSessions', 'killCursors', 'buildInfo',
              'buildinfo', 'ping'}


class Missing(Exception):
    """Something a case needs that the emulator refuses (a fail point)."""


class DriverLimit(Exception):
    """pymongo 3.11 refused, on the client, what the case sends to the server."""


# -- entities and operations ---------------------------------------------------

class Listener(monitoring.CommandListener):
    def __init__(self, observe, ignore):
        self.observe, self.ignore, self.events = set(observe), set(ignore), []

    def _keep(self, kind, event):
        if kind in self.observe and event.command_name not in UNOBSERVED | self.ignore:
            self.events.append((kind, event))

    def started(self, event):
        self._keep('commandStartedEvent', event)

    def succeeded(self, event):
        self._keep('commandSucceededEvent', event)

    def failed(self, event):
        self._keep('commandFailedEvent', event)


def write_concern(spec):
    return WriteConcern(**spec) if spec is not None else None


class Case:
    """One test of a file: its entities, run on the emulator at uri."""

    def __init__(self, uri, topology):
        self.uri, self.topology = uri, topology
        self.entities, self.listeners, self.clients = {}, {}, []

    def close(self):
        for client in self.clients:
            client.close()

    def create(self, entities):
        for entry in entities:
            (kind, spec), = entry.items()
            if kind == 'client':
                unknown = set(spec) - {'id', 'observeEvents', 'uriOptions', 'useMultipleMongoses',
                                       'ignoreCommandMonitoringEvents'}
                if unknown:
                    raise Skip('client entity with %s' % sorted(unknown))
                listener = Listener(spec.get('observeEvents', []),
                                    spec.get('ignoreCommandMonitoringEvents', []))
                options = dict(spec.get('uriOptions', {}))
                # The format's "Executing a Test" lets a runner shorten the
                # heartbeat of a client that does not set its own, so that a
                # failure the monitor must see again (a state-change error)
                # is recovered from in well under serverSelectionTimeoutMS.
                options.setdefault('heartbeatFrequencyMS', HEARTBEAT_MS)
                client = pymongo.MongoClient(self.uri, event_listeners=[listener],
                                             serverSelectionTimeoutMS=5000,
                                             document_class=SON, **options)
                self.clients.append(client)
                self.entities[spec['id']] = client
                self.listeners[spec['id']] = listener
            elif kind == 'database':
                opts = spec.get('databaseOptions', {})
                self.entities[spec['id']] = self.entities[spec['client']].get_database(
                    spec['databaseName'], **options_of(opts))
            elif kind == 'collection':
                opts = spec.get('collectionOptions', {})
                self.entities[spec['id']] = self.entities[spec['database']].get_collection(
                    spec['collectionName'], **options_of(opts))
            else:
                raise Skip('%s entities' % kind)


def options_of(opts):
    out = {}
    for key, value in opts.items():
        if key == 'writeConcern':
            out['write_concern'] = write_concern(value)
        elif key == 'readConcern':
            out['read_concern'] = ReadConcern(**value)
        else:
            raise Skip('entity option %s' % key)
    return out


# pymongo 3.11's names for the format's arguments, per operation.
COMMON = {'filter': 'filter', 'hint': 'hint', 'collation': 'collation'}
ARGUMENTS = {
    'insertOne': {'document': 'document'},
    'updateOne': dict(COMMON, update='update', upsert='upsert', arrayFilters='array_filters'),
    'updateMany': dict(COMMON, update='update', upsert='upsert', arrayFilters='array_filters'),
    'deleteOne': dict(COMMON),
    'deleteMany': dict(COMMON),
    'findOneAndUpdate': dict(COMMON, update='update', upsert='upsert', sort='sort',
                             projection='projection', returnDocument='return_document',
                             arrayFilters='array_filters'),
    'findOneAndReplace': dict(COMMON, replacement='replacement', upsert='upsert', sort='sort',
                              projection='projection', returnDocument='return_document'),
    'findOneAndDelete': dict(COMMON, sort='sort', projection='projection'),
    'find': dict(COMMON, sort='sort', projection='projection', skip='skip', limit='limit',
                 batchSize='batch_size', comment='comment', maxTimeMS='max_time_ms'),
    'findOne': dict(COMMON, sort='sort', projection='projection', skip='skip',
                    comment='comment', maxTimeMS='max_time_ms'),
    'aggregate': {'pipeline': 'pipeline', 'batchSize': 'batchSize', 'hint': 'hint',
                  'collation': 'collation', 'maxTimeMS': 'maxTimeMS'},
    'runCommand': {'command': 'command', 'commandName': None},
    'replaceOne': dict(COMMON, replacement='replacement', upsert='upsert'),
    'insertMany': {'documents': 'documents', 'ordered': 'ordered'},
    'bulkWrite': {'requests': 'requests', 'ordered': 'ordered'},
}

# bulkWrite's requests: pymongo 3.11's class and its names for their fields.
REQUESTS = {
    'insertOne': (pymongo.InsertOne, {'document': 'document'}),
    'updateOne': (pymongo.UpdateOne, dict(COMMON, update='update', upsert='upsert',
                                          arrayFilters='array_filters')),
    'updateMany': (pymongo.UpdateMany, dict(COMMON, update='update', upsert='upsert',
                                            arrayFilters='array_filters')),
    'replaceOne': (pymongo.ReplaceOne, dict(COMMON, replacement='replacement',
                                            upsert='upsert')),
    'deleteOne': (pymongo.DeleteOne, dict(COMMON)),
    'deleteMany': (pymongo.DeleteMany, dict(COMMON)),
}


def bulk_request(request):
    (kind, args), = request.items()
    if kind not in REQUESTS:
        raise Skip('bulkWrite request %s' % kind)
    cls, names = REQUESTS[kind]
    kwargs = {}
    for key, value in args.items():
        if key not in names:
            raise Skip('bulkWrite %s argument %s (not in pymongo 3.11 or this runner)'
                       % (kind, key))
        if key == 'hint' and isinstance(value, dict):
            value = list(value.items())
        kwargs[names[key]] = value
    return cls(**kwargs)


def update_result(r):
    if not r.acknowledged:
        return _UNSET
    out = SON([('matchedCount', r.matched_count), ('modifiedCount', r.modified_count),
               ('upsertedCount', 1 if r.upserted_id is not None else 0)])
    if r.upserted_id is not None:
        out['upsertedId'] = r.upserted_id
    return out


def run_write(obj, name, kwargs):
    """replaceOne, insertMany and bulkWrite, with their results in the
    format's shape (insertedIds and upsertedIds keyed by index; pymongo 3.11's
    BulkWriteResult has no insertedIds, left unset as $$unsetOrMatches
    allows)."""
    if name == 'replaceOne':
        return update_result(obj.replace_one(kwargs.pop('filter'),
                                             kwargs.pop('replacement'), **kwargs))
    if name == 'insertMany':
        r = obj.insert_many(kwargs.pop('documents'), **kwargs)
        if not r.acknowledged:
            return _UNSET
        return SON([('insertedIds', SON((str(i), v) for i, v in enumerate(r.inserted_ids)))])
    r = obj.bulk_write([bulk_request(q) for q in kwargs.pop('requests')], **kwargs)
    if not r.acknowledged:
        return _UNSET
    return SON([('deletedCount', r.deleted_count), ('insertedCount', r.inserted_count),
                ('matchedCount', r.matched_count), ('modifiedCount', r.modified_count),
                ('upsertedCount', r.upserted_count),
                ('upsertedIds', SON((str(i), v) for i, v in sorted(r.upserted_ids.items())))])


def arguments(name, args):
    names = ARGUMENTS[name]
    out = {}
    for key, value in args.items():
        if key not in names:
            raise Skip('%s argument %s (not in pymongo 3.11 or this runner)' % (name, key))
        if names[key] is None:
            continue
        if key == 'sort' or key == 'hint' and isinstance(value, dict):
            value = list(value.items())
        if key == 'returnDocument':
            value = ReturnDocument.AFTER if value == 'After' else ReturnDocument.BEFORE
        out[names[key]] = value
    return out


def run_operation(case, op):
    name, target = op['name'], op['object']
    args = dict(op.get('arguments', {}))
    if target == 'testRunner' and name == 'createEntities':
        case.create(args['entities'])
        return None
    if target == 'testRunner':
        if name != 'failPoint':
            raise Skip('testRunner operation %s' % name)
        point = SON(args['failPoint'])
        try:
            case.entities[args['client']].admin.command(point)
        except OperationFailure as refused:
            raise Missing('the emulator has no fail point %s (%s %s)' % (
                point.get('configureFailPoint'), (refused.details or {}).get('codeName'),
                refused.code))
        case.fail_points.append((args['client'], point['configureFailPoint']))
        return None
    if name not in ARGUMENTS:
        raise Skip('operation %s' % name)
    obj = case.entities[target]
    if 'session' in args:
        raise Skip('sessions')
    kwargs = arguments(name, args)
    if name == 'insertOne':
        r = obj.insert_one(kwargs.pop('document'), **kwargs)
        return SON([('insertedId', r.inserted_id)]) if r.acknowledged else _UNSET
    if name in ('updateOne', 'updateMany'):
        return update_result(getattr(obj, 'update_one' if name == 'updateOne' else
                                     'update_many')(kwargs.pop('filter'), kwargs.pop('update'),
                                                    **kwargs))
    if name in ('replaceOne', 'insertMany', 'bulkWrite'):
        return run_write(obj, name, kwargs)
    if name in ('deleteOne', 'deleteMany'):
        r = getattr(obj, 'delete_one' if name == 'deleteOne' else 'delete_many')(
            kwargs.pop('filter'), **kwargs)
        return SON([('deletedCount', r.deleted_count)]) if r.acknowledged else _UNSET
    if name == 'findOneAndUpdate':
        return obj.find_one_and_update(kwargs.pop('filter'), kwargs.pop('update'), **kwargs)
    if name == 'findOneAndReplace':
        return obj.find_one_and_replace(kwargs.pop('filter'), kwargs.pop('replacement'), **kwargs)
    if name == 'findOneAndDelete':
        return obj.find_one_and_delete(kwargs.pop('filter'), **kwargs)
    if name == 'find':
        return list(obj.find(kwargs.pop('filter', {}), **kwargs))
    if name == 'findOne':
        return obj.find_one(kwargs.pop('filter', {}), **kwargs)
    if name == 'aggregate':
        return list(obj.aggregate(kwargs.pop('pipeline'), **kwargs))
    if name == 'runCommand':
        return obj.command(SON(kwargs['command']))
    raise Skip('operation %s' % name)



def check_error(case, expected, error):
    if error is None:
        raise Mismatch('expected an error, the operation succeeded')
    server = isinstance(error, OperationFailure)
    if expected.get('isClientError') and (server or not isinstance(error, (PyMongoError,
                                                                           TypeError, ValueError))):
        raise Mismatch('expected a client error, got %r' % error)
    if expected.get('isClientError') is False and not server:
        raise Mismatch('expected a server error, got %r' % error)
    for key in ('writeErrors', 'writeConcernErrors', 'isTimeoutError'):
        if key in expected:
            raise Skip('expectError.%s' % key)
    details = error.details if server else {}
    if 'errorResponse' in expected:
        match(expected['errorResponse'], details, 'errorResponse')
    if 'errorCode' in expected and (not server or error.code != expected['errorCode']):
        raise Mismatch('expected error code %s, got %r' % (expected['errorCode'], error))
    if 'errorCodeName' in expected and (details or {}).get('codeName') != expected['errorCodeName']:
        raise Mismatch('expected code name %s, got %r' % (expected['errorCodeName'], details))
    if 'errorContains' in expected and expected['errorContains'].lower() not in str(error).lower():
        raise Mismatch('expected an error containing %r, got %r' % (expected['errorContains'],
                                                                     str(error)))
    labelled = getattr(error, 'has_error_label', lambda label: False)
    for label in expected.get('errorLabelsContain', []):
        if not labelled(label):
            raise Mismatch('expected label %s on %r (%r)' % (label, error, details))
    for label in expected.get('errorLabelsOmit', []):
        if labelled(label):
            raise Mismatch('unexpected label %s on %r' % (label, error))
    if 'expectResult' not in expected:
        return
    if not isinstance(error, BulkWriteError):
        # The rest of the case still runs; it ends as a skip naming this.
        case.unchecked.append('pymongo 3.11 gives no partial result with %s, the rest of '
                              'the case passed' % type(error).__name__)
        return
    match(expected['expectResult'], partial_result(error), 'expectError.expectResult')


def partial_result(error):
    """What a failed bulk write had done, in the format's shape: pymongo
    3.11 has it on a BulkWriteError only, without insertedIds."""
    d = error.details
    return SON([('deletedCount', d.get('nRemoved', 0)),
                ('insertedCount', d.get('nInserted', 0)),
                ('matchedCount', d.get('nMatched', 0)),
                ('modifiedCount', d.get('nModified', 0)),
                ('upsertedCount', d.get('nUpserted', 0)),
                ('upsertedIds', SON((str(u['index']), u['_id'])
                                    for u in d.get('upserted', [])))])


def check_events(case, expected_list):
    for expected in expected_list:
        if expected.get('eventType', 'command') != 'command':
            raise Skip('%s events' % expected['eventType'])
        actual = case.listeners[expected['client']].events
        wanted = expected['events']
        if expected.get('ignoreExtraEvents'):
            actual = actual[:len(wanted)]
        if len(actual) != len(wanted):
            raise Mismatch('expected %d events, got %d: %s' % (
                len(wanted), len(actual), [(k, e.command_name) for k, e in actual]))
        for i, (want, (kind, event)) in enumerate(zip(wanted, actual)):
            (want_kind, fields), = want.items()
            if want_kind != kind:
                raise Mismatch('event %d: expected %s, got %s of %s' % (
                    i, want_kind, kind, event.command_name))
            if 'command' in fields:
                match(fields['command'], event.command, 'event %d command' % i)
            if 'commandName' in fields and fields['commandName'] != event.command_name:
                raise Mismatch('event %d: command %s' % (i, event.command_name))
            if 'databaseName' in fields and fields['databaseName'] != event.database_name:
                raise Mismatch('event %d: database %s' % (i, event.database_name))
            if 'reply' in fields:
                match(fields['reply'], event.reply, 'event %d reply' % i)
            unknown = set(fields) - {'command', 'commandName', 'databaseName', 'reply'}
            if unknown:
                raise Skip('event fields %s' % sorted(unknown))


# -- files and cases -----------------------------------------------------------

def version_tuple(text):
    return tuple(int(p) for p in (text.split('.') + ['0', '0'])[:3])


def requirements_met(requirements, topology):
    """None when one of the requirements is met, else why not."""
    if not requirements:
        return None
    reasons = []
    for req in requirements:
        why = None
        if 'minServerVersion' in req and SERVER_VERSION < version_tuple(req['minServerVersion']):
            why = 'needs server %s' % req['minServerVersion']
        elif 'maxServerVersion' in req and SERVER_VERSION > version_tuple(
                req['maxServerVersion']) + (99,):
            why = 'needs server at most %s' % req['maxServerVersion']
        elif 'topologies' in req and topology not in req['topologies']:
            why = 'needs topology %s' % '/'.join(req['topologies'])
        elif req.get('serverless') == 'require':
            why = 'needs serverless'
        elif req.get('auth') is True:
            why = 'needs authentication'
        elif 'serverParameters' in req or 'csfle' in req:
            why = 'needs %s' % ('serverParameters' if 'serverParameters' in req else 'csfle')
        if why is None:
            return None
        reasons.append(why)
    return '; '.join(reasons)


_INTERNAL = {}


def internal_client(uri):
    """The runner's own client (the format's "internal MongoClient"), one
    per run, for initialData and outcome."""
    if uri not in _INTERNAL:
        _INTERNAL[uri] = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000,
                                             document_class=SON,
                                             heartbeatFrequencyMS=HEARTBEAT_MS)
    return _INTERNAL[uri]


def load_initial_data(uri, data):
    client = internal_client(uri)
    for entry in data or []:
        db = client.get_database(entry['databaseName'],
                                 write_concern=WriteConcern(w='majority'))
        db.drop_collection(entry['collectionName'])
        if entry['documents']:
            db[entry['collectionName']].insert_many(entry['documents'])
        else:
            db.create_collection(entry['collectionName'])


def check_outcome(uri, outcome):
    client = internal_client(uri)
    for entry in outcome:
        coll = client[entry['databaseName']].get_collection(
            entry['collectionName'], read_concern=ReadConcern('local'))
        actual = list(coll.find({}, sort=[('_id', 1)]))
        match(entry['documents'], actual, 'outcome %s' % entry['collectionName'])


def run_case(uri, topology, document, test):
    case = Case(uri, topology)
    case.fail_points, case.unchecked = [], []
    try:
        case.create(document.get('createEntities', []))
        load_initial_data(uri, document.get('initialData'))
        for op in test['operations']:
            error, result = None, _UNSET
            try:
                result = run_operation(case, op)
            except (Skip, Mismatch, Missing):
                raise
            except (PyMongoError, InvalidDocument, TypeError, ValueError) as caught:
                error = caught
                why = driver_refusal(caught)
                if why and not op.get('expectError', {}).get('isClientError'):
                    raise DriverLimit(why)
            if 'expectError' in op:
                check_error(case, op['expectError'], error)
            elif error is not None:
                raise Mismatch('%s failed: %r' % (op['name'], error))
            elif 'expectResult' in op:
                match_result(op, result)
            if op.get('saveResultAsEntity'):
                raise Skip('saveResultAsEntity')
        if 'expectEvents' in test:
            check_events(case, test['expectEvents'])
        if 'outcome' in test:
            check_outcome(uri, test['outcome'])
        if case.unchecked:
            raise DriverLimit('; '.join(case.unchecked))
    finally:
        for name, point in case.fail_points:
            try:
                case.entities[name].admin.command(
                    SON([('configureFailPoint', point), ('mode', 'off')]))
            except PyMongoError:
                pass
        case.close()


def skipped(counts, label, why):
    counts['skipped'] += 1
    counts['reasons'][why] = counts['reasons'].get(why, 0) + 1
    print('skip %s (%s)' % (label, why))


def run_file(path, uri, topology, counts, verbose):
    with open(path) as f:
        document = json_util.loads(f.read(), json_options=json_util.JSONOptions(
            document_class=SON))
    name = os.path.relpath(path, HERE)
    why_file = requirements_met(document.get('runOnRequirements'), topology)
    for test in document['tests']:
        label = '%s: %s' % (name, test['description'])
        why = why_file or test.get('skipReason') or requirements_met(
            test.get('runOnRequirements'), topology)
        known = KNOWN.get((name, test['description']))
        if why:
            skipped(counts, label, why)
            continue
        try:
            run_case(uri, topology, document, test)
        except Skip as skip:
            skipped(counts, label, 'the runner has no %s' % skip)
            continue
        except (Missing, DriverLimit) as missing:
            skipped(counts, label, str(missing))
            continue
        except Exception as failure:  # a Mismatch, or the runner's own bug
            if known:
                skipped(counts, label, 'known: %s' % known)
                continue
            counts['failed'] += 1
            print('FAIL %s: %s' % (label, failure))
            if verbose and not isinstance(failure, Mismatch):
                traceback.print_exc()
            continue
        if known:
            counts['failed'] += 1
            print('FAIL %s: passes, but KNOWN lists it (%s): take it out' % (label, known))
            continue
        counts['passed'] += 1
        if verbose:
            print('ok   %s' % label)


def main(argv):
    replset = '--replset' in argv
    verbose = '-v' in argv
    files = [a for a in argv if a.endswith('.json')]
    if not files:
        for folder, _, names in sorted(os.walk(HERE)):
            files += [os.path.join(folder, n) for n in sorted(names) if n.endswith('.json')]
    if not files:
        print('spec tests: no JSON files under %s (README.md says how to put them there)'
              % os.path.relpath(HERE))
        return 1
    if replset:
        server = ReplicaSet().start()
        topology = 'replicaset'
    else:
        server = Emulator().start()
        topology = 'replicaset'  # a one-member set's primary, as the emulator answers hello
    started = time.monotonic()
    counts = {'passed': 0, 'failed': 0, 'skipped': 0, 'reasons': {}}
    try:
        for path in files:
            run_file(path, server.uri, topology, counts, verbose)
    finally:
        for client in _INTERNAL.values():
            client.close()
        server.stop()
    mode = 'replica set' if replset else 'plain'
    print('skipped, by reason:')
    for why, n in sorted(counts['reasons'].items(), key=lambda item: (-item[1], item[0])):
        print('%5d  %s' % (n, why))
    print('spec tests (%s): %d passed, %d failed, %d skipped in %.1f s' % (
        mode, counts['passed'], counts['failed'], counts['skipped'],
        time.monotonic() - started))
    return 1 if counts['failed'] else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
