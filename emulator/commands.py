"""The database commands the emulator answers, one function each.

Each handler takes a Request (the command as SON, its database, the
emulator and the connection) and returns the reply fields; a CommandError
becomes ``{ok: 0, errmsg, code, codeName}``. Write commands report
per-statement failures in ``writeErrors`` as the server does. Data access
goes through store.py under its lock, so each write is atomic. An unknown
command answers CommandNotFound (59).
"""

import datetime
import itertools
import threading
import time

from bson.int64 import Int64
from bson.objectid import ObjectId
from bson.son import SON
from mongomock.aggregate import process_pipeline
from mongomock.filtering import filter_applies

from . import collation, indexes, sharding, updates
from .errors import CommandError
from .ordered import to_son
from .pipeline import UPDATE_STAGES, run_stage

MAX_WIRE_VERSION = 17  # MongoDB 6.0
SERVER_VERSION = '6.0.0'


class Request:
    """One command on one connection."""

    def __init__(self, emulator, connection, database, command, store=None, deadline=None):
        self.emulator = emulator
        self.deadline = deadline  # maxTimeMS's end (monotonic), or None
        self.connection = connection
        self.database = database
        self.command = command
        self.name = next(iter(command))
        self._store = store  # a majority read's snapshot (replset.py)

    @property
    def store(self):
        return self._store or self.emulator.store

    @property
    def mongos(self):
        return self.emulator.mongos

    def collection_name(self):
        name = self.command[self.name]
        if not isinstance(name, str) or not name:
            raise CommandError(73, 'Invalid namespace specified \'%s.%s\''
                               % (self.database, name))
        return name

    def shard_key(self, name):
        if not self.mongos:
            return None
        return sharding.shard_key(self.store, '%s.%s' % (self.database, name))


def _write_error(index, error):
    entry = SON([('index', index), ('code', error.code)])
    entry.update(error.extra)
    entry['errmsg'] = error.errmsg
    return entry


# -- handshake and server information ---------------------------------------

def hello(request):
    emulator, command = request.emulator, request.command
    address = emulator.address
    client = command.get('client')
    if isinstance(client, dict):
        request.connection.app_name = (client.get('application') or {}).get('name')
    primary_field = 'isWritablePrimary' if request.name == 'hello' else 'ismaster'
    reply = SON()
    if command.get('helloOk') or request.name == 'hello':
        reply['helloOk'] = True
    rs = emulator.replset
    if rs is not None:
        version = command.get('topologyVersion')
        if isinstance(version, dict) and command.get('maxAwaitTimeMS') is not None:
            rs.await_hello(emulator, version, int(command['maxAwaitTimeMS']))
        fields = rs.hello_fields(emulator)
        reply[primary_field] = 'electionId' in fields
        reply.update(fields)
    else:
        reply[primary_field] = True
    if emulator.mongos:
        reply['msg'] = 'isdbgrid'
    elif rs is None:
        reply.update([('hosts', [address]), ('setName', 'rs0'), ('setVersion', 1),
                      ('secondary', False), ('primary', address), ('me', address),
                      ('electionId', ObjectId('7fffffff0000000000000001'))])
    mechanisms = emulator.auth.supported_mechanisms(command.get('saslSupportedMechs'))
    if mechanisms is not None:
        reply['saslSupportedMechs'] = mechanisms
    speculative = command.get('speculativeAuthenticate')
    if isinstance(speculative, dict) and 'saslStart' in speculative:
        # The handshake carries the first SCRAM step (MongoDB 4.4+); when it
        # cannot start, the field is left out and the driver authenticates
        # the long way, to fail there.
        try:
            reply['speculativeAuthenticate'] = emulator.auth.sasl_start(
                request.connection, speculative.get('db') or 'admin', speculative)
        except CommandError:
            pass
    reply.update([
        ('maxBsonObjectSize', 16 * 1024 * 1024), ('maxMessageSizeBytes', 48000000),
        ('maxWriteBatchSize', 100000), ('localTime', _local_time(emulator)),
        ('logicalSessionTimeoutMinutes', 30), ('connectionId', request.connection.id),
        ('minWireVersion', 0), ('maxWireVersion', MAX_WIRE_VERSION), ('readOnly', False)])
    return reply


def _local_time(emulator):
    """This server's wall clock, its test offset included (a naive UTC
    datetime, as BSON dates decode)."""
    return datetime.datetime.utcnow() + datetime.timedelta(
        milliseconds=emulator.clock_offset_ms)


def ping(request):
    return SON()


def build_info(request):
    return SON([('version', SERVER_VERSION), ('gitVersion', 'resv-emulator'),
                ('versionArray', [6, 0, 0, 0]), ('bits', 64),
                ('maxBsonObjectSize', 16 * 1024 * 1024)])


def end_sessions(request):
    return SON()


def sasl_start(request):
    return request.emulator.auth.sasl_start(request.connection, request.database,
                                            request.command)


def sasl_continue(request):
    return request.emulator.auth.sasl_continue(request.connection, request.database,
                                               request.command)


def logout(request):
    request.connection.user = None
    return SON()


def configure_fail_point(request):
    if request.database != 'admin':
        raise CommandError(13, 'configureFailPoint may only be run against the admin database.')
    return SON([('count', request.emulator.failpoints.configure(request.command))])


def repl_set_step_down(request):
    """replSetStepDown: seconds (default 60) the node may not be re-elected;
    secondaryCatchUpPeriodSecs is met at once (the secondary is caught up),
    force steps down with no electable secondary."""
    rs = request.emulator.replset
    if rs is None:
        raise CommandError(76, 'not running with --replSet')
    if request.database != 'admin':
        raise CommandError(13, 'replSetStepDown may only be run against the admin database.')
    seconds = request.command[request.name]
    seconds = 60 if seconds is True else float(seconds)
    rs.step_down(request.emulator, seconds, bool(request.command.get('force')))
    return SON()


def set_default_rw_concern(request):
    """setDefaultRWConcern (MongoDB 4.4+): the cluster-wide default write
    concern, used by writes that name none; on the replica set only."""
    rs = request.emulator.replset
    if rs is None:
        return command_not_found(request)
    if request.database != 'admin':
        raise CommandError(13, 'setDefaultRWConcern may only be run against the admin database.')
    if request.emulator is not rs.primary:
        raise CommandError(10107, 'not primary')
    concern = request.command.get('defaultWriteConcern')
    if concern is not None:
        if not isinstance(concern, dict) or concern.get('w') in (0, None):
            raise CommandError(2, 'Default write concern must have a non-zero w')
        rs.default_write_concern = SON(concern)
    return get_default_rw_concern(request)


def get_default_rw_concern(request):
    rs = request.emulator.replset
    if rs is None:
        return command_not_found(request)
    reply = SON()
    if rs.default_write_concern is not None:
        reply['defaultWriteConcern'] = rs.default_write_concern
    reply['defaultWriteConcernSource'] = 'global' if rs.default_write_concern else 'implicit'
    return reply


def repl_set_get_status(request):
    rs = request.emulator.replset
    if rs is None:
        raise CommandError(76, 'not running with --replSet')
    status = rs.status()
    status['myState'] = 1 if request.emulator.state == 'PRIMARY' else 2
    return status


def emulator_control(request):
    """The tests' hand on a replica set (not a MongoDB command):
    {emulatorControl: "kill" | "restart", member: index | "host:port" |
    "primary"}, {emulatorControl: "lag", ms: N}, {emulatorControl: "status"},
    {emulatorControl: "partition", member: ..., noticeMS: N} (cut the
    member off from the others; a primary steps down after noticeMS,
    default 10000), {emulatorControl: "heal"} (every partition), and on
    any emulator {emulatorControl: "cost", perDocumentMS: N} (what each
    document a delete removes costs against its maxTimeMS; 0: nothing).
    A member killed by its own connection dies once the reply is sent.
    {emulatorControl: "clock", ms: N} (also without a replica set) puts
    every member's clock N ms ahead of the host's (negative: behind), as
    its hello's localTime shows."""
    rs = request.emulator.replset
    action = request.command[request.name]
    if action == 'cost' and request.database == 'admin':
        ms = request.command.get('perDocumentMS', 0)
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms < 0:
            raise CommandError(2, 'perDocumentMS must be a number >= 0')
        for member in rs.members if rs is not None else [request.emulator]:
            member.document_cost = ms / 1000.0
        return SON()
    if rs is None and action != 'clock':
        return command_not_found(request)
    if request.database != 'admin':
        raise CommandError(13, 'emulatorControl may only be run against the admin database.')
    if action == 'clock':
        offset = request.command.get('ms', 0)
        if isinstance(offset, bool) or not isinstance(offset, (int, float)):
            raise CommandError(2, 'emulatorControl clock: ms must be a number')
        for member in rs.members if rs is not None else [request.emulator]:
            member.clock_offset_ms = float(offset)
        return SON([('ms', offset)])
    if action == 'kill':
        member = rs.member(request.command.get('member', 'primary'))
        if member is None:
            raise CommandError(2, 'no primary to kill')
        if member is request.emulator:
            request.connection.after_reply.append(lambda: rs.kill(member))
        else:
            rs.kill(member)
        return SON([('killed', member.address)])
    if action == 'restart':
        member = rs.member(request.command.get('member'))
        rs.restart(member)
        return SON([('restarted', member.address)])
    if action == 'lag':
        rs.set_lag(float(request.command.get('ms', 0)))
        return SON()
    if action == 'partition':
        member = rs.member(request.command.get('member', 'primary'))
        if member is None:
            raise CommandError(2, 'no primary to partition')
        rs.partition(member, float(request.command.get('noticeMS', 10000)))
        return SON([('partitioned', member.address)])
    if action == 'heal':
        healed = [m for m in rs.members if m.partitioned]
        for member in healed:
            rs.heal(member)
        return SON([('healed', [m.address for m in healed])])
    if action == 'status':
        return rs.status()
    raise CommandError(2, 'emulatorControl: unknown action %r' % (action,))


# -- collections --------------------------------------------------------------

def create(request):
    name = request.collection_name()
    options = collation.create_options(request.command)
    with request.store.lock:
        if request.store.collection(request.database, name) is not None:
            if request.mongos:
                return SON()
            raise CommandError(48, 'Collection %s.%s already exists.' % (request.database, name))
        request.store.collection(request.database, name, create=True, options=options)
    return SON()


def drop(request):
    name = request.collection_name()
    with request.store.lock:
        collection = request.store.collection(request.database, name)
        if collection is None or not request.store.drop(request.database, name):
            raise CommandError(26, 'ns not found')
        config = request.store.collection(sharding.CONFIG_DB, sharding.CONFIG_COLLECTIONS)
        if config is not None:
            for doc in config.matching({'_id': '%s.%s' % (request.database, name)}):
                config.remove(doc)
    return SON([('nIndexesWas', len(collection.indexes)),
                ('ns', '%s.%s' % (request.database, name))])


def drop_database(request):
    with request.store.lock:
        request.store.drop_database(request.database)
    return SON([('dropped', request.database)])


def list_collections(request):
    with request.store.lock:
        collections = list(request.store.databases.get(request.database, {}).values())
    infos = [_collection_info(c) for c in collections]
    query = request.command.get('filter') or {}
    infos = [info for info in infos if filter_applies(query, info)]
    if request.command.get('nameOnly'):
        infos = [SON([('name', i['name']), ('type', 'collection')]) for i in infos]
    return _cursor_reply(request, '%s.$cmd.listCollections' % request.database, infos,
                         request.command.get('cursor') or {})


def _collection_info(collection):
    """A collection as listCollections describes it: its create options,
    and the _id index (with the collation) but for views and time series."""
    kind = collation.collection_type(collection.options)
    info = SON([('name', collection.name), ('type', kind),
                ('options', SON(collection.options)),
                ('info', SON([('readOnly', kind == 'view')]))])
    if kind == 'collection':
        info['idIndex'] = SON(collection.indexes[0])
    return info


def list_indexes(request):
    name = request.collection_name()
    collection = request.store.collection(request.database, name)
    if collection is None:
        raise CommandError(26, 'ns does not exist: %s.%s' % (request.database, name))
    return _cursor_reply(request, '%s.%s' % (request.database, name),
                         [SON(index) for index in collection.indexes],
                         request.command.get('cursor') or {})


def create_indexes(request):
    name = request.collection_name()
    specs = request.command.get('indexes')
    if not isinstance(specs, list) or not specs:
        raise CommandError(2, 'Must specify at least one index to create')
    with request.store.lock:
        collection = request.store.collection(request.database, name)
        created = collection is None
        before = collection.indexes if collection is not None else [indexes.ID_INDEX]
        after = indexes.add(before, specs)  # checks all before changing anything
        if collection is None:
            collection = request.store.collection(request.database, name, create=True)
        if len(after) != len(before):
            collection.set_indexes(after)
    reply = SON([('numIndexesBefore', len(before)), ('numIndexesAfter', len(after))])
    if created:
        reply['createdCollectionAutomatically'] = True
    if len(after) == len(before):
        reply['note'] = 'all indexes already exist'
    return reply


def drop_indexes(request):
    name = request.collection_name()
    with request.store.lock:
        collection = request.store.collection(request.database, name)
        if collection is None:
            raise CommandError(26, 'ns not found %s.%s' % (request.database, name))
        before = collection.indexes
        collection.set_indexes(indexes.remove(before, request.command.get('index')))
    return SON([('nIndexesWas', len(before))])


def list_databases(request):
    with request.store.lock:
        names = [n for n, c in request.store.databases.items() if c]
    return SON([('databases', [SON([('name', n), ('sizeOnDisk', 0), ('empty', False)])
                               for n in names]), ('totalSize', 0)])


# -- cursors ------------------------------------------------------------------

_cursor_ids = itertools.count(1000)


def _cursor_reply(request, namespace, docs, options, first='firstBatch'):
    batch_size = options.get('batchSize') if isinstance(options, dict) else None
    cursor_id = 0
    if batch_size and len(docs) > batch_size:
        cursor_id = next(_cursor_ids)
        request.emulator.cursors[cursor_id] = (namespace, docs[batch_size:])
        docs = docs[:batch_size]
    return SON([('cursor', SON([(first, docs), ('id', Int64(cursor_id)),
                                ('ns', namespace)]))])


def get_more(request):
    cursor_id = int(request.command['getMore'])
    entry = request.emulator.cursors.pop(cursor_id, None)
    if entry is None:
        raise CommandError(43, 'cursor id %d not found' % cursor_id)
    namespace, docs = entry
    batch = request.command.get('batchSize') or len(docs)
    next_id = 0
    if len(docs) > batch:
        request.emulator.cursors[cursor_id] = (namespace, docs[batch:])
        next_id = cursor_id
    return SON([('cursor', SON([('nextBatch', docs[:batch]), ('id', Int64(next_id)),
                                ('ns', namespace)]))])


def kill_cursors(request):
    ids = [int(i) for i in request.command.get('cursors', [])]
    killed = [Int64(i) for i in ids if request.emulator.cursors.pop(i, None) is not None]
    return SON([('cursorsKilled', killed),
                ('cursorsNotFound', [Int64(i) for i in ids if Int64(i) not in killed]),
                ('cursorsAlive', []), ('cursorsUnknown', [])])


# -- reads --------------------------------------------------------------------

def find(request):
    name = request.collection_name()
    command = request.command
    with request.store.lock:
        docs = request.store.find(request.database, name, command.get('filter'),
                                  command.get('sort'), command.get('collation'))
        skip = command.get('skip') or 0
        limit = abs(command.get('limit') or 0)
        docs = docs[skip:skip + limit] if limit else docs[skip:]
        docs = [updates.project(doc, command.get('projection')) for doc in docs]
    options = {'batchSize': command.get('batchSize')}
    if command.get('singleBatch'):
        options = {}
    return _cursor_reply(request, '%s.%s' % (request.database, name), docs, options)


def count(request):
    name = request.collection_name()
    with request.store.lock:
        docs = request.store.find(request.database, name, request.command.get('query'),
                                  spec=request.command.get('collation'))
    skip = request.command.get('skip') or 0
    limit = request.command.get('limit') or 0
    docs = docs[skip:skip + limit] if limit else docs[skip:]
    return SON([('n', len(docs))])


# Aggregation stages that write to another collection: not emulated.
UNSUPPORTED_STAGES = {'$out', '$merge'}


def aggregate(request):
    """A simple aggregate on a collection: update stages are run here,
    other stages by mongomock."""
    name = request.command[request.name]
    if not isinstance(name, str):
        raise CommandError(2, 'aggregate on a database is not supported by the emulator')
    with request.store.lock:
        docs = request.store.find(request.database, name, {})
    for stage in request.command.get('pipeline', []):
        (stage_name, spec), = stage.items()
        if stage_name in UNSUPPORTED_STAGES:
            # The stages that write: answered as MongoDB answers a stage
            # name it does not know, before anything runs.
            raise CommandError(40324, "Unrecognized pipeline stage name: '%s'" % stage_name)
    for stage in request.command.get('pipeline', []):
        (stage_name, spec), = stage.items()
        if stage_name in UPDATE_STAGES:
            docs = [run_stage(doc, stage_name, spec) for doc in docs]
        elif stage_name == '$match':
            docs = [doc for doc in docs if filter_applies(spec, doc)]
        else:
            try:
                docs = list(process_pipeline(docs, None, [stage], None))
            except NotImplementedError as error:
                raise CommandError(168, str(error))
    return _cursor_reply(request, '%s.%s' % (request.database, name),
                         [to_son(d) for d in docs], request.command.get('cursor') or {})


# -- writes -------------------------------------------------------------------

def insert(request):
    name = request.collection_name()
    errors, inserted = [], 0
    with request.store.lock:
        collection = request.store.collection(request.database, name, create=True)
        for index, doc in enumerate(request.command.get('documents', [])):
            try:
                collection.insert(doc)
                inserted += 1
            except CommandError as error:
                errors.append(_write_error(index, error))
                if request.command.get('ordered', True):
                    break
    reply = SON([('n', inserted)])
    if errors:
        reply['writeErrors'] = errors
    return reply


def update(request):
    name = request.collection_name()
    key = request.shard_key(name)
    n = modified = 0
    upserted, errors = [], []
    for index, statement in enumerate(request.command.get('updates', [])):
        try:
            if key is not None:
                sharding.check_update(key, statement)
            query, change = statement.get('q', {}), statement.get('u', {})
            filters = updates.array_filters(statement.get('arrayFilters'), change)
            with request.store.lock:
                if statement.get('multi'):
                    if not isinstance(change, list) and not updates.is_operator_update(change):
                        raise CommandError(9, 'multi update is not supported for '
                                           'replacement-style update')
                    matched, changed = request.store.update_many(
                        request.database, name, query, change, filters,
                        statement.get('collation'))
                    n, modified = n + matched, modified + changed
                    if matched or not statement.get('upsert'):
                        continue
                    # An upsert matching nothing inserts one document, multi
                    # or not (MongoDB's update command).
                before, after, inserted = request.store.update_one(
                    request.database, name, query, change, bool(statement.get('upsert')),
                    filters=filters, spec=statement.get('collation'))
            if inserted:
                n += 1
                upserted.append(SON([('index', index), ('_id', after['_id'])]))
            elif after is not None:
                n += 1
                modified += after != before
        except CommandError as error:
            errors.append(_write_error(index, error))
            if request.command.get('ordered', True):
                break
    reply = SON([('n', n), ('nModified', modified)])
    if upserted:
        reply['upserted'] = upserted
    if errors:
        reply['writeErrors'] = errors
    return reply


def delete(request):
    name = request.collection_name()
    key = request.shard_key(name)
    n, errors = 0, []
    for index, statement in enumerate(request.command.get('deletes', [])):
        try:
            if key is not None:
                sharding.check_delete(key, statement)
            with request.store.lock:
                n += len(request.store.delete(request.database, name, statement.get('q', {}),
                                              statement.get('limit', 0),
                                              work=_document_work(request),
                                              spec=statement.get('collation')))
        except CommandError as error:
            if error.code == 50:
                raise  # an interruption fails the whole command, as on MongoDB
            errors.append(_write_error(index, error))
            if request.command.get('ordered', True):
                break
    reply = SON([('n', n)])
    if errors:
        reply['writeErrors'] = errors
    return reply


def _document_work(request):
    """What deleting one document costs (emulatorControl "cost"): the time
    it takes, counted against the command's maxTimeMS; None when free.
    While it waits the data lock is released, as MongoDB yields its locks
    during a long write. Past the deadline: MaxTimeMSExpired (50)."""
    cost = request.emulator.document_cost
    if not cost:
        return None
    lock = request.store.lock

    def work():
        deadline = request.deadline
        pause = cost if deadline is None else min(cost, deadline - time.monotonic())
        if pause > 0:
            threading.Condition(lock).wait(pause)  # releases the lock meanwhile
        if deadline is not None and time.monotonic() >= deadline:
            raise CommandError(50, 'operation exceeded time limit')
    return work


def find_and_modify(request):
    name = request.collection_name()
    command = request.command
    query = command.get('query') or {}
    key = request.shard_key(name)
    if key is not None:
        sharding.check_find_and_modify(key, query)
    remove = bool(command.get('remove'))
    change = command.get('update')
    if remove == (change is not None):
        raise CommandError(9, 'Either an update or remove=true must be specified')
    filters = None if remove else updates.array_filters(command.get('arrayFilters'), change)
    last_error = SON()
    with request.store.lock:
        if remove:
            deleted = request.store.delete(request.database, name, query, 1,
                                           command.get('sort'), spec=command.get('collation'))
            value = deleted[0] if deleted else None
            last_error['n'] = len(deleted)
        else:
            before, after, inserted = request.store.update_one(
                request.database, name, query, change, bool(command.get('upsert')),
                command.get('sort'), filters, command.get('collation'))
            value = after if command.get('new') else before
            last_error['n'] = 1 if after is not None else 0
            last_error['updatedExisting'] = before is not None
            if inserted:
                last_error['upserted'] = after['_id']
        value = updates.project(value, command.get('fields'))
    return SON([('lastErrorObject', last_error), ('value', value)])


def shard_collection(request):
    if not request.mongos:
        return command_not_found(request)
    if request.database != 'admin':
        raise CommandError(13, 'shardCollection may only be run against the admin database.')
    with request.store.lock:
        return sharding.shard_collection(request.store, request.command)


def enable_sharding(request):
    if not request.mongos:
        return command_not_found(request)
    return SON()


def command_not_found(request):
    raise CommandError(59, "no such command: '%s'" % request.name)


HANDLERS = {
    'hello': hello, 'isMaster': hello, 'ismaster': hello,
    'ping': ping, 'buildInfo': build_info, 'buildinfo': build_info,
    'endSessions': end_sessions, 'configureFailPoint': configure_fail_point,
    'replSetStepDown': repl_set_step_down, 'replSetGetStatus': repl_set_get_status,
    'emulatorControl': emulator_control, 'setDefaultRWConcern': set_default_rw_concern,
    'getDefaultRWConcern': get_default_rw_concern,
    'saslStart': sasl_start, 'saslContinue': sasl_continue, 'logout': logout,
    'create': create, 'drop': drop, 'dropDatabase': drop_database,
    'listCollections': list_collections, 'listIndexes': list_indexes,
    'createIndexes': create_indexes, 'dropIndexes': drop_indexes,
    'listDatabases': list_databases,
    'find': find, 'count': count, 'aggregate': aggregate,
    'getMore': get_more, 'killCursors': kill_cursors,
    'insert': insert, 'update': update, 'delete': delete,
    'findAndModify': find_and_modify, 'findandmodify': find_and_modify,
    'shardCollection': shard_collection, 'shardcollection': shard_collection,
    'enableSharding': enable_sharding, 'enablesharding': enable_sharding,
}


def handler_for(name):
    return HANDLERS.get(name, command_not_found)
