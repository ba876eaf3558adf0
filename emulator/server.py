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
import socket
import sys
import threading
import traceback

from bson.son import SON
from mockupdb import (OP_MSG_FLAGS, Command, MockupDB, OpMsg, OpMsgReply, OpReply,
                      mock_server_receive_request)

from .commands import Request, handler_for
from .errors import CommandError
from .failpoints import WRITE_COMMANDS, FailPoints
from .ordered import id_key, to_son
from .store import Store

# execute() returns this when a fail point says to drop the connection.
CLOSE_CONNECTION = object()

_RETRY_MEMORY = 10000  # answers of retryable writes kept for a retry


class Connection:
    """What the server knows about one client connection."""

    def __init__(self, connection_id):
        self.id = connection_id
        self.app_name = None


class Emulator(MockupDB):
    """A MongoDB 6.0 replica-set primary ("rs0") or, with mongos=True, a
    mongos, listening on 127.0.0.1."""

    def __init__(self, port=0, mongos=False, verbose=False):
        super().__init__(port=port or None, verbose=False, request_timeout=int(1e6))
        self._address = ('127.0.0.1', port or 0)
        self.mongos = mongos
        self.log_errors = verbose
        self.store = Store()
        self.failpoints = FailPoints()
        self.cursors = {}
        self._connection_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._retries = collections.OrderedDict()
        self._retries_lock = threading.Lock()

    # -- life cycle -----------------------------------------------------------

    def start(self):
        """Start listening; returns self."""
        self.run()
        return self

    def stop(self):
        """Stop listening and close every connection."""
        self._stopping.set()
        super().stop()

    @property
    def address(self):
        return '127.0.0.1:%d' % self.port

    @property
    def uri(self):
        return 'mongodb://%s/' % self.address

    # -- connections ------------------------------------------------------------

    def _server_loop(self, client, client_addr):
        """Serve one connection: read a command, answer it, repeat."""
        connection = Connection(next(self._connection_ids))
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self._stopped and not self._stopping.is_set():
                try:
                    request = mock_server_receive_request(client, self)
                except Exception:  # the client hung up, or sent what we cannot read
                    break
                if not isinstance(request, (OpMsg, Command)):
                    break  # legacy find/insert/... opcodes: not supported
                reply = self.execute(request.namespace, request.doc, connection)
                if reply is CLOSE_CONNECTION:
                    break
                if isinstance(request, OpMsg):
                    if request.flags & OP_MSG_FLAGS['moreToCome']:
                        continue  # unacknowledged write: no reply
                    data = OpMsgReply(reply).reply_bytes(request)
                else:
                    data = OpReply(reply).reply_bytes(request)
                client.sendall(data)
        except OSError:
            pass
        finally:
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            client.close()

    # -- commands ----------------------------------------------------------------

    def execute(self, database, command, connection):
        """Run one command and return its reply document (or
        CLOSE_CONNECTION)."""
        command = to_son(command)
        if next(iter(command), None) == '$query':  # OP_QUERY with read preference
            command = command['$query']
        if not command:
            return _error_reply(CommandError(59, 'no such command: \'\''))
        name = next(iter(command))
        action = self.failpoints.check(name, command, connection.app_name)
        if action is not None:
            if action.block_ms:
                self._stopping.wait(action.block_ms / 1000.0)
            if action.close:
                return CLOSE_CONNECTION
            failure = action.error_reply(name, command)
            if failure is not None:
                return SON(failure)

        retry_key = None
        if name in WRITE_COMMANDS and 'txnNumber' in command and 'lsid' in command:
            retry_key = (id_key(command['lsid']), int(command['txnNumber']), name)
            with self._retries_lock:
                if retry_key in self._retries:
                    return self._retries[retry_key]

        try:
            reply = handler_for(name)(Request(self, connection, database, command))
            reply['ok'] = 1.0
        except CommandError as error:
            reply = _error_reply(error)
        except Exception as error:  # a bug or something unsupported: say so
            if self.log_errors:
                traceback.print_exc(file=sys.stderr)
            reply = _error_reply(CommandError(1, '%s: %s' % (type(error).__name__, error)))

        if retry_key is not None and reply.get('ok'):
            # Remember the write's own outcome: a retry of it is answered
            # from here, and a fault attached below (a writeConcernError)
            # belongs to this reply only, as on MongoDB, where the retry
            # waits for the write concern afresh.
            with self._retries_lock:
                self._retries[retry_key] = SON(reply)
                if len(self._retries) > _RETRY_MEMORY:
                    self._retries.popitem(last=False)
        if action is not None and action.write_concern_error:
            action.attach_write_concern_error(reply, name, command)
        return reply


def _error_reply(error):
    reply = SON([('ok', 0.0), ('errmsg', error.errmsg), ('code', error.code),
                 ('codeName', error.code_name)])
    reply.update(error.extra)
    return reply
