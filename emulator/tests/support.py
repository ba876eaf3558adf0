"""Shared test fixtures: emulators started once per run, pymongo clients
that decode documents as SON (so tests see and compare field order), and a
raw wire-protocol client for what pymongo hides (txnNumber, OP_QUERY)."""

import atexit
import os
import socket
import struct
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import bson  # noqa: E402
import pymongo  # noqa: E402
from bson.codec_options import CodecOptions  # noqa: E402
from bson.son import SON  # noqa: E402

from emulator.server import Emulator  # noqa: E402

SON_OPTIONS = CodecOptions(document_class=SON)
_emulators = {}


def emulator(mongos=False):
    """The shared emulator of this kind, started on first use."""
    if mongos not in _emulators:
        _emulators[mongos] = Emulator(mongos=mongos).start()
        atexit.register(_emulators[mongos].stop)
    return _emulators[mongos]


def client(mongos=False, **options):
    options.setdefault('serverSelectionTimeoutMS', 5000)
    return pymongo.MongoClient(emulator(mongos).uri, document_class=SON, **options)


class EmulatorTest(unittest.TestCase):
    """A test with a fresh database `db` on the replica-set emulator."""
    mongos = False

    def setUp(self):
        self.client = client(self.mongos)
        self.addCleanup(self.client.close)
        name = 'test_' + self.id().rsplit('.', 1)[-1][:40]
        self.client.drop_database(name)
        self.db = self.client.get_database(name, codec_options=SON_OPTIONS)
        self.coll = self.db.reservations


def raw_command(address, database, command, op_query=False, more_to_come=False,
                secondary_ok=False):
    """Send one command on a new socket, as OP_MSG (or legacy OP_QUERY,
    optionally with the secondaryOk flag) and return the decoded reply
    (None when moreToCome asks for none)."""
    host, port = address.split(':')
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(encode_command(database, command, op_query, more_to_come, secondary_ok))
        if more_to_come:
            sock.sendall(encode_command('admin', {'ping': 1}))
            return None if read_reply(sock).get('ok') == 1 else 'failed'
        return read_reply(sock)


def encode_command(database, command, op_query=False, more_to_come=False,
                   secondary_ok=False):
    command = SON(command)
    if op_query:
        body = struct.pack('<i', 4 if secondary_ok else 0) + (database + '.$cmd').encode() + b'\0'
        body += struct.pack('<ii', 0, -1) + bson.BSON.encode(command)
        opcode = 2004
    else:
        command['$db'] = database
        body = struct.pack('<I', 2 if more_to_come else 0) + b'\0' + bson.BSON.encode(command)
        opcode = 2013
    return struct.pack('<iiii', 16 + len(body), 7, 0, opcode) + body


def read_reply(sock):
    header = _read(sock, 16)
    length, _, _, opcode = struct.unpack('<iiii', header)
    body = _read(sock, length - 16)
    if opcode == 1:  # OP_REPLY
        return bson.BSON(body[20:]).decode(SON_OPTIONS)
    return bson.BSON(body[5:]).decode(SON_OPTIONS)


def _read(sock, n):
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError('closed')
        data += chunk
    return data
