"""Authentication (SCRAM-SHA-256 and SCRAM-SHA-1) and role-based access.

Users are given when the emulator starts (``--user NAME:PASSWORD:ROLE@DB
[,ROLE@DB...]``, the user's own database being ``admin``; or
``users=[auth.User(...)]``); with any user, authentication is on and every
connection must authenticate before running more than the handshake.

SCRAM follows RFC 5802 (SHA-1) and RFC 7677 (SHA-256) as MongoDB does:
``saslStart`` carries the client-first message and gets the server-first
(nonce, salt, iteration count), ``saslContinue`` carries the proof and gets
the server signature; MongoDB's SCRAM-SHA-1 hashes the password first as
``hex(md5(user + ":mongo:" + password))``. A wrong password or an unknown
user fails with AuthenticationFailed (18). ``hello`` with
``saslSupportedMechs: "db.user"`` lists the user's mechanisms.
A ``speculativeAuthenticate`` in the handshake's hello runs saslStart
there (MongoDB 4.4+), answered in the reply's ``speculativeAuthenticate``,
so the driver goes on with saslContinue; when it cannot start (an unknown
user) the field is left out and the driver authenticates the long way.

Roles, with the privileges of MongoDB's built-in roles the store needs:
``read``/``readWrite`` on one database (its collections' reads, and for
readWrite its writes, createIndexes, dropIndexes, drop, create; not
dropDatabase), ``readAnyDatabase``/``readWriteAnyDatabase`` (every database
but ``local`` and ``config``), ``clusterManager`` (shardCollection,
enableSharding, replSetGetStatus, and reads of ``config``), ``root``
(everything). Any other command is refused with Unauthorized (13),
"not authorized on DB to execute command ...".
"""

import base64
import hashlib
import hmac
import os
import threading
import unicodedata

from bson.binary import Binary
from bson.son import SON

from .errors import CommandError, describe

# RFC 7677's minimum, which drivers accept; MongoDB's defaults (10000 and
# 15000) would only make every connection's authentication slower (a lot
# under valgrind).
ITERATIONS = {'SCRAM-SHA-1': 4096, 'SCRAM-SHA-256': 4096}
HASHES = {'SCRAM-SHA-1': hashlib.sha1, 'SCRAM-SHA-256': hashlib.sha256}
ROLES = {'read', 'readWrite', 'readAnyDatabase', 'readWriteAnyDatabase', 'clusterManager',
         'root'}

# Commands any connection may run, authenticated or not.
OPEN_COMMANDS = {'hello', 'isMaster', 'ismaster', 'saslStart', 'saslContinue', 'ping',
                 'buildInfo', 'buildinfo', 'endSessions', 'logout'}
READS = {'find', 'count', 'aggregate', 'distinct', 'listCollections', 'listIndexes',
         'getMore', 'killCursors'}
WRITES = {'insert', 'update', 'delete', 'findAndModify', 'findandmodify', 'create', 'drop',
          'createIndexes', 'dropIndexes'}
CLUSTER = {'shardCollection', 'shardcollection', 'enableSharding', 'enablesharding',
           'replSetGetStatus', 'getDefaultRWConcern'}
ANY_AUTHENTICATED = {'listDatabases'}


def _saslprep(password):
    """SASLprep (RFC 4013), enough for test passwords: NFKC normalisation."""
    return unicodedata.normalize('NFKC', password)


def _hmac(key, data, digest):
    return hmac.new(key, data, digest).digest()


class User:
    """A user, its roles [(role, database)] and its SCRAM credentials."""

    def __init__(self, name, password, roles, database='admin'):
        self.name, self.database = name, database
        self.roles = [(role, db) for role, db in roles]
        for role, _ in self.roles:
            if role not in ROLES:
                raise ValueError('unknown role %r (the emulator knows %s)'
                                 % (role, ', '.join(sorted(ROLES))))
        self.credentials = {}
        for mechanism, digest in HASHES.items():
            if mechanism == 'SCRAM-SHA-1':
                secret = hashlib.md5(('%s:mongo:%s' % (name, password)).encode()).hexdigest()
            else:
                secret = _saslprep(password)
            salt = os.urandom(digest().digest_size - 4)  # as MongoDB: 16, 28 bytes
            salted = hashlib.pbkdf2_hmac(digest().name, secret.encode(), salt,
                                         ITERATIONS[mechanism])
            stored = digest(_hmac(salted, b'Client Key', digest)).digest()
            server = _hmac(salted, b'Server Key', digest)
            self.credentials[mechanism] = (salt, ITERATIONS[mechanism], stored, server)

    @classmethod
    def parse(cls, text):
        """NAME:PASSWORD:ROLE@DB[,ROLE@DB...] (root needs no @DB)."""
        parts = text.split(':')
        if len(parts) != 3:
            raise ValueError('a user is NAME:PASSWORD:ROLE@DB[,ROLE@DB...]: %r' % text)
        name, password, roles = parts
        parsed = []
        for role in roles.split(','):
            role, _, database = role.partition('@')
            parsed.append((role, database or 'admin'))
        return cls(name, password, parsed)

    def may_run(self, name, database):
        for role, db in self.roles:
            if role == 'root':
                return True
            if role == 'clusterManager' and (name in CLUSTER or
                                             (database == 'config' and name in READS)):
                return True
            if database in ('local', 'config'):
                continue
            if role in ('readAnyDatabase', 'readWriteAnyDatabase') or db == database:
                if name in READS:
                    return True
                if name in WRITES and role in ('readWrite', 'readWriteAnyDatabase'):
                    return True
        return False


class Authenticator:
    """The users of one server, and the SCRAM conversations on its
    connections."""

    def __init__(self, users):
        self.users = {(u.database, u.name): u for u in users}
        self.enabled = bool(self.users)
        self._conversations = {}
        self._lock = threading.Lock()
        self._ids = iter(range(1, 1 << 62))

    def supported_mechanisms(self, qualified):
        if not isinstance(qualified, str) or '.' not in qualified:
            return None
        database, name = qualified.split('.', 1)
        user = self.users.get((database, name))
        return sorted(user.credentials) if user else None

    def check(self, connection, name, database, command):
        """Raise Unauthorized (13) unless the connection may run the command."""
        if not self.enabled or name in OPEN_COMMANDS:
            return
        user = connection.user
        if user is None:
            raise CommandError(13, 'command %s requires authentication' % name)
        if name in ANY_AUTHENTICATED or user.may_run(name, database):
            return
        shown = SON((k, v) for k, v in command.items() if not k.startswith('$') and
                    k not in ('lsid', 'txnNumber'))
        raise CommandError(13, 'not authorized on %s to execute command %s'
                           % (database, describe(shown)))

    # -- SCRAM ------------------------------------------------------------------

    def sasl_start(self, connection, database, command):
        mechanism = command.get('mechanism')
        if mechanism not in HASHES:
            raise CommandError(334, 'Received authentication for mechanism %s which is not '
                               'enabled' % (mechanism,))
        message = bytes(command.get('payload') or b'').decode('utf-8', 'replace')
        if not message.startswith(('n,', 'y,')):
            raise CommandError(17, 'Incorrect SCRAM client message prefix: %s' % message[:2])
        bare = message.split(',', 2)[2] if message.count(',') >= 2 else ''
        fields = dict(f.split('=', 1) for f in bare.split(',') if '=' in f)
        name = fields.get('n', '').replace('=2C', ',').replace('=3D', '=')
        client_nonce = fields.get('r', '')
        user = self.users.get((database, name))
        if user is None or not client_nonce:
            raise _auth_failed()
        salt, iterations, _, _ = user.credentials[mechanism]
        nonce = client_nonce + base64.b64encode(os.urandom(24)).decode()
        server_first = 'r=%s,s=%s,i=%d' % (nonce, base64.b64encode(salt).decode(), iterations)
        skip_empty = bool((command.get('options') or {}).get('skipEmptyExchange'))
        with self._lock:
            conversation = next(self._ids)
            self._conversations[(connection.id, conversation)] = \
                (user, mechanism, bare, server_first, nonce, skip_empty, False)
        return SON([('conversationId', conversation), ('done', False),
                    ('payload', Binary(server_first.encode()))])

    def sasl_continue(self, connection, database, command):
        key = (connection.id, command.get('conversationId'))
        with self._lock:
            state = self._conversations.pop(key, None)
        if state is None:
            raise CommandError(17, 'No SASL session state found')
        user, mechanism, bare, server_first, nonce, skip_empty, verified = state
        if verified:  # the client's empty last step
            connection.user = user
            return SON([('conversationId', key[1]), ('done', True), ('payload', Binary(b''))])
        message = bytes(command.get('payload') or b'').decode('utf-8', 'replace')
        without_proof, _, proof = message.rpartition(',p=')
        fields = dict(f.split('=', 1) for f in without_proof.split(',') if '=' in f)
        if fields.get('r') != nonce or not proof:
            raise _auth_failed()
        digest = HASHES[mechanism]
        _, _, stored, server_key = user.credentials[mechanism]
        auth_message = ('%s,%s,%s' % (bare, server_first, without_proof)).encode()
        signature = _hmac(stored, auth_message, digest)
        try:
            client_key = bytes(a ^ b for a, b in zip(base64.b64decode(proof), signature))
        except ValueError:
            raise _auth_failed()
        if len(client_key) != len(signature) or \
                not hmac.compare_digest(digest(client_key).digest(), stored):
            raise _auth_failed()
        server_final = 'v=' + base64.b64encode(_hmac(server_key, auth_message, digest)).decode()
        if skip_empty:
            connection.user = user
        else:
            with self._lock:
                self._conversations[key] = (user, mechanism, bare, server_first, nonce,
                                            skip_empty, True)
        return SON([('conversationId', key[1]), ('done', skip_empty),
                    ('payload', Binary(server_final.encode()))])


def _auth_failed():
    return CommandError(18, 'Authentication failed.')
