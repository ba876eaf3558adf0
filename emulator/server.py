"""The emulator's server: wire protocol, connections and command dispatch.

mockupdb provides the socket handling and the wire protocol: it accepts
connections, reads OP_MSG and the legacy OP_QUERY commands (the handshake
older drivers and mongoc send first) and encodes OP_MSG and OP_REPLY
answers. MockupDB itself serializes all connections behind one lock and
queues requests for a test script; Emulator replaces that loop with one
thread per connection that answers each command at once, so a connection
blocked by a fail point never blocks the others.

Usage::

    from emulator.server import Emulator
    emulator = Emulator(mongos=False).start()
    client = pymongo.MongoClient(emulator.uri)
    ...
    emulator.stop()
"""

import collections
import itertools
import select
import socket
import struct
import sys
import threading
import time
import traceback

from bson.son import SON
from mockupdb import (OP_MSG, OP_MSG_FLAGS, OPCODES, Command, MockupDB, OpMsg, OpMsgReply,
                      OpReply, bind_tcp_socket, mock_server_receive)

from .auth import Authenticator
from .commands import Request, handler_for
from .errors import RETRYABLE_CODES, CommandError
from .failpoints import WRITE_COMMANDS, FailPoints, retryable_write
from .ordered import id_key, to_son
from .store import Store
from .tls import server_context

# execute() returns this when a fail point says to drop the connection.
CLOSE_CONNECTION = object()

_RETRY_MEMORY = 10000  # answers of retryable writes kept for a retry

# What a secondary refuses (NotWritablePrimary) and what it serves only with
# secondaryOk (NotPrimaryNoSecondaryOk); writes wait for their write concern.
REPLICATED_WRITES = WRITE_COMMANDS | {'create', 'drop', 'dropDatabase', 'createIndexes',
                                      'dropIndexes'}
READ_COMMANDS = {'find', 'count', 'aggregate', 'distinct', 'listCollections',
                 'listIndexes', 'listDatabases'}
# Read concern levels answered from the majority-committed data.
MAJORITY_READS = {'majority', 'snapshot', 'linearizable'}


class Connection:
    """What the server knows about one client connection."""

    def __init__(self, connection_id):
        self.id = connection_id
        self.app_name = None
        self.user = None  # the authenticated auth.User
        self.after_reply = []  # called once the reply is sent (e.g. a kill)


class Emulator(MockupDB):
    """A MongoDB 6.0 replica-set primary ("rs0"), with mongos=True a mongos,
    or, made by replset.ReplicaSet, a member of a three-member set,
    listening on 127.0.0.1."""

    def __init__(self, port=0, mongos=False, verbose=False, replset=None, users=None,
                 tls=None):
        super().__init__(port=port or None, verbose=False, request_timeout=int(1e6))
        self._address = ('127.0.0.1', port or 0)
        self.mongos = mongos
        self.replset = replset
        self.log_errors = verbose
        self.store = Store()
        self.auth = Authenticator(users or [])
        # tls: (ca file, certificate file, key file); connections then
        # start with a TLS handshake and uri names the CA file.
        self.tls = tls
        self._tls_context = server_context(tls[1], tls[2]) if tls else None
        self.failpoints = FailPoints()
        self.document_cost = 0.0  # seconds each deleted document takes
        self.cursors = {}
        self._connection_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._retries = collections.OrderedDict()
        self._retries_lock = threading.Lock()
        self._clients = set()
        self._clients_lock = threading.Lock()
        self._listener = None
        # Added to the clock its hello's localTime reads (a host whose clock
        # is off); emulatorControl "clock" sets it.
        self.clock_offset_ms = 0.0

    # -- life cycle -----------------------------------------------------------

    def start(self):
        """Start listening; returns self."""
        self.listen()
        return self

    def stop(self):
        """Stop listening and close every connection."""
        self._stopping.set()
        self._stopped = True
        self.unlisten()

    def listen(self):
        """Bind the port (the same one again after unlisten) and accept."""
        sock, self._address = bind_tcp_socket(self._address)
        self._listener = sock
        threading.Thread(target=self._accept_loop, args=(sock,), daemon=True,
                         name='accept %d' % self.port).start()

    def unlisten(self):
        """Close the port and every connection, as a dying process does."""
        sock, self._listener = self._listener, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # stops listening at once (Linux)
            except OSError:
                pass
            sock.close()
        with self._clients_lock:
            clients, self._clients = self._clients, set()
        for client in clients:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def reset_process_state(self):
        """A restarted process: no cursors, no fail points."""
        self.cursors = {}
        self.failpoints = FailPoints()

    @property
    def address(self):
        return '127.0.0.1:%d' % self.port

    @property
    def uri(self):
        if self.replset is not None:
            return self.replset.uri
        return 'mongodb://%s/%s' % (self.address, tls_options(self.tls, '?'))

    # -- connections ------------------------------------------------------------

    def _accept_loop(self, listener):
        while self._listener is listener:
            try:
                ready, _, _ = select.select([listener], [], [], 0.2)
                if not ready or self._listener is not listener:
                    continue
                client, client_addr = listener.accept()
            except (OSError, ValueError):
                break
            client.setblocking(True)
            with self._clients_lock:
                self._clients.add(client)
            threading.Thread(target=self._server_loop, args=(client, client_addr),
                             daemon=True).start()

    def _server_loop(self, client, client_addr):
        """Serve one connection: read a command, answer it, repeat."""
        connection = Connection(next(self._connection_ids))
        listener = self._listener
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls_context is not None:
                raw = client
                client.settimeout(10)
                try:
                    client = self._tls_context.wrap_socket(client, server_side=True)
                except (OSError, ValueError):  # not TLS, or a failed handshake
                    return
                finally:
                    with self._clients_lock:
                        self._clients.discard(raw)
                        if listener is self._listener:
                            self._clients.add(client)
                client.settimeout(None)
            while not self._stopping.is_set() and self._listener is listener:
                try:
                    request = _receive_request(client, self)
                except Exception:  # the client hung up, or sent what we cannot read
                    break
                if not isinstance(request, (OpMsg, Command)):
                    break  # legacy find/insert/... opcodes: not supported
                secondary_ok = bool(getattr(request, 'flags', 0) & 4) \
                    if isinstance(request, Command) else False
                reply = self.execute(request.namespace, request.doc, connection, secondary_ok)
                if reply is CLOSE_CONNECTION:
                    break
                if isinstance(request, OpMsg):
                    if request.flags & OP_MSG_FLAGS['moreToCome']:
                        continue  # unacknowledged write: no reply
                    data = OpMsgReply(reply).reply_bytes(request)
                else:
                    data = OpReply(reply).reply_bytes(request)
                client.sendall(data)
                while connection.after_reply:
                    connection.after_reply.pop(0)()
        except OSError:
            pass
        finally:
            with self._clients_lock:
                self._clients.discard(client)
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()

    # -- retryable writes -------------------------------------------------------

    def remember_retry(self, key, reply):
        with self._retries_lock:
            self._retries[key] = SON(reply)
            if len(self._retries) > _RETRY_MEMORY:
                self._retries.popitem(last=False)

    def clear_retries(self):
        with self._retries_lock:
            self._retries.clear()

    # -- commands ----------------------------------------------------------------

    def execute(self, database, command, connection, secondary_ok=False):
        """Run one command and return its reply document (or
        CLOSE_CONNECTION)."""
        command = to_son(command)
        if next(iter(command), None) == '$query':  # OP_QUERY with read preference
            secondary_ok |= _secondary_ok(command.get('$readPreference'))
            command = command['$query']
        secondary_ok |= _secondary_ok(command.get('$readPreference'))
        if not command:
            return _error_reply(CommandError(59, 'no such command: \'\''))
        name = next(iter(command))
        try:
            self.auth.check(connection, name, database, command)
            deadline = _deadline(command)
        except CommandError as error:
            return _error_reply(error)
        action = self.failpoints.check(name, command, connection.app_name)
        if action is not None:
            if action.block_ms:
                # The block is the server sleeping inside the operation, so
                # maxTimeMS interrupts it, as mongod's failCommand does.
                block = action.block_ms / 1000.0
                if deadline is not None and deadline - time.monotonic() < block:
                    self._stopping.wait(max(0.0, deadline - time.monotonic()))
                    return _error_reply(_time_limit())
                self._stopping.wait(block)
            if action.close:
                return CLOSE_CONNECTION
            failure = action.error_reply(name, command)
            if failure is not None:
                return self._topology_versioned(SON(failure))

        retry_key = None
        if name in WRITE_COMMANDS and 'txnNumber' in command and 'lsid' in command:
            retry_key = (id_key(command['lsid']), int(command['txnNumber']), name)

        rs = self.replset
        if rs is None:
            failure, close = self._transactional_write(name, command, retry_key)
            if failure is not None:
                return failure
            reply = self._run(name, database, command, connection, retry_key, deadline)
            if close and reply.get('ok'):
                return CLOSE_CONNECTION
        else:
            # A write runs whole under the set's lock, so no election or
            # kill falls between its data change and its retry record.
            with rs.lock:
                failure = self._member_refuses(name, command, secondary_ok)
                if failure is None:
                    failure, close = self._transactional_write(name, command, retry_key)
                if failure is not None:
                    return self._topology_versioned(failure)
                reply = self._run(name, database, command, connection, retry_key, deadline)
                if close and reply.get('ok'):
                    return CLOSE_CONNECTION  # committed; the write concern never waited
                if name in REPLICATED_WRITES and reply.get('ok'):
                    concern = rs.wait_for_write_concern(self, command.get('writeConcern'),
                                                        deadline)
                    if concern == 'closed':
                        return CLOSE_CONNECTION
                    if concern is not None:
                        reply = SON(reply)
                        reply['writeConcernError'] = concern
                        if concern.get('code') in RETRYABLE_CODES and \
                                retryable_write(name, command):
                            # 4.4+ servers label a retryable write whose
                            # write concern failed with a retryable code.
                            reply['errorLabels'] = ['RetryableWriteError']
        if action is not None and action.write_concern_error:
            action.attach_write_concern_error(reply, name, command)
        return reply

    def _transactional_write(self, name, command, retry_key):
        """The onPrimaryTransactionalWrite fail point for a retryable write
        about to be applied (not one answered from its retry record):
        (the reply instead of running it, or CLOSE_CONNECTION, or None;
        close the connection once committed)."""
        if retry_key is None:
            return None, False
        with self._retries_lock:
            if retry_key in self._retries:
                return None, False
        fired = self.failpoints.check_transactional_write(name, command)
        if fired is None:
            return None, False
        close, code = fired
        if code is None:
            return None, close
        if close:
            return CLOSE_CONNECTION, False  # not committed, and no reply
        error = CommandError(code, "Failing write via 'onPrimaryTransactionalWrite' failpoint")
        if name in ('insert', 'update', 'delete'):
            failure = SON([('n', 0), ('writeErrors', [SON([
                ('index', 0), ('code', code), ('errmsg', error.errmsg)])]), ('ok', 1.0)])
            if name == 'update':
                failure['nModified'] = 0
            return failure, False
        failure = _error_reply(error)
        if code in RETRYABLE_CODES:
            failure['errorLabels'] = ['RetryableWriteError']
        return failure, False

    def _topology_versioned(self, reply):
        """A replica-set member's "not primary" or "shutting down" error
        carries its topologyVersion, as MongoDB 4.4+ replies do: a driver
        whose view of the member is as new ignores the error as stale (SDAM,
        "Error Handling") instead of forgetting the primary."""
        if (self.replset is not None and isinstance(reply, dict)
                and reply.get('code') in STATE_CHANGE_CODES):
            reply['topologyVersion'] = self.replset.hello_fields(self)['topologyVersion']
        return reply

    def _run(self, name, database, command, connection, retry_key, deadline=None):
        if retry_key is not None:
            with self._retries_lock:
                if retry_key in self._retries:
                    return SON(self._retries[retry_key])
        try:
            store = None
            if self.replset is not None and name in READ_COMMANDS and \
                    _read_concern_level(command) in MAJORITY_READS:
                store = self.replset.majority_store(self)
            reply = handler_for(name)(Request(self, connection, database, command, store,
                                              deadline))
            reply['ok'] = 1.0
        except CommandError as error:
            reply = _error_reply(error)
        except Exception as error:  # a bug or something unsupported: say so
            if self.log_errors:
                traceback.print_exc(file=sys.stderr)
            reply = _error_reply(CommandError(1, '%s: %s' % (type(error).__name__, error)))

        if retry_key is not None and reply.get('ok'):
            # Remember the write's own outcome: a retry of it is answered
            # from here, and a fault attached later (a writeConcernError)
            # belongs to this reply only, as on MongoDB, where the retry
            # waits for the write concern afresh. A replica set replicates
            # it with the data (config.transactions).
            if self.replset is not None:
                self.replset.record_retry(self, retry_key, reply)
            else:
                self.remember_retry(retry_key, reply)
        return reply

    def _member_refuses(self, name, command, secondary_ok):
        """A secondary's answer to a write, or to a read without
        secondaryOk (lock held); None when the command may run."""
        if self.state == 'PRIMARY':  # the set's, or a cut-off one still acting
            return None
        if name in REPLICATED_WRITES:
            error = _error_reply(CommandError(10107, 'not primary'))
            if name in WRITE_COMMANDS and 'txnNumber' in command:
                error['errorLabels'] = ['RetryableWriteError']
            return error
        if name in READ_COMMANDS and not secondary_ok:
            return _error_reply(CommandError(13435, 'not primary and secondaryOk=false'))
        return None


# NotWritablePrimary, LegacyNotPrimary, NotPrimaryNoSecondaryOk,
# NotPrimaryOrSecondary, InterruptedDueToReplStateChange, PrimarySteppedDown,
# ShutdownInProgress, InterruptedAtShutdown (SDAM's state change errors).
STATE_CHANGE_CODES = {10107, 10058, 13435, 13436, 11602, 189, 91, 11600}

_EXHAUST_ALLOWED = 1 << 16  # OP_MSG flag of awaitable hello; mockupdb rejects it


def _receive_request(client, server):
    """mockupdb's mock_server_receive_request, but an OP_MSG's exhaustAllowed
    flag is dropped first: the emulator never streams (no moreToCome), which
    the streaming protocol allows, so the driver sends its next hello."""
    header = mock_server_receive(client, 16)
    length, request_id, _, opcode = struct.unpack('<iiii', header)
    body = mock_server_receive(client, length - 16)
    if opcode not in OPCODES:
        raise NotImplementedError('opcode %d' % opcode)
    if opcode == OP_MSG:
        flags, = struct.unpack('<I', body[:4])
        body = struct.pack('<I', flags & ~_EXHAUST_ALLOWED) + body[4:]
    return OPCODES[opcode].unpack(body, client, server, request_id)


def tls_options(tls, separator):
    """The URI options that make a driver use TLS and trust tls's CA."""
    if not tls:
        return ''
    return '%stls=true&tlsCAFile=%s' % (separator, tls[0])


def _deadline(command):
    """When the command's maxTimeMS runs out (monotonic), or None."""
    limit = command.get('maxTimeMS')
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit != int(limit):
        raise CommandError(2, 'maxTimeMS must be a number')
    if limit < 0 or limit > 2 ** 31 - 1:
        raise CommandError(2, '%s value for maxTimeMS is out of range [0, 2147483647]'
                           % int(limit))
    return time.monotonic() + limit / 1000.0 if limit else None


def _time_limit():
    return CommandError(50, 'operation exceeded time limit')


def _read_concern_level(command):
    concern = command.get('readConcern')
    return concern.get('level') if isinstance(concern, dict) else None


def _secondary_ok(read_preference):
    return isinstance(read_preference, dict) and \
        read_preference.get('mode', 'primary') != 'primary'


def _error_reply(error):
    reply = SON([('ok', 0.0), ('errmsg', error.errmsg), ('code', error.code),
                 ('codeName', error.code_name)])
    reply.update(error.extra)
    return reply
