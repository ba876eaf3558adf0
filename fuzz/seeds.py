"""Writes the seed corpora of the fuzz targets (fuzz/corpus/*): stored
documents for fuzz_decode (format-1 reservations, pending and confirmed,
and near misses) and requests for fuzz_validate. Run with Debian's python
(bson from python3-pymongo): /usr/bin/python3 fuzz/seeds.py"""
import os
import struct

from bson import BSON
from bson.int64 import Int64
from bson.son import SON

here = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    path = os.path.join(here, 'corpus', target, name)
    with open(path, 'wb') as f:
        f.write(data)


def doc(*pairs):
    return BSON.encode(SON(pairs))


ID = SON([('t', ''), ('n', 'email'), ('k', 'ann@example.com')])
OWNER = SON([('tenant_id', 't1'), ('id', 'user-42')])
HEAD = [('_id', ID), ('tenant_id', ''), ('key', 'ann@example.com'), ('owner', OWNER)]

write('decode', 'pending', doc(*HEAD, ('expires_at', Int64(1700000060000)),
                               ('holds', ['a', 'b'])))
write('decode', 'pending-empty-holds', doc(*HEAD, ('expires_at', Int64(1)), ('holds', [])))
write('decode', 'confirmed', doc(*HEAD, ('expires_at', None), ('version', Int64(7))))
write('decode', 'format-record', doc(('_id', 'format'), ('format', 1)))
write('decode', 'int32-expiry', doc(*HEAD, ('expires_at', 5), ('holds', ['a'])))
write('decode', 'operators', doc(('_id', SON([('t', '$ne'), ('n', '$gt'), ('k', '$$ROOT')])),
                                 ('tenant_id', '$ne'), ('key', '$$ROOT'),
                                 ('owner', SON([('tenant_id', '$where'), ('id', '$x')])),
                                 ('expires_at', None), ('version', Int64(0))))


def request(op, ttl, version, *strings, max_byte=255):
    out = bytes([op, max_byte]) + struct.pack('>q', ttl) + struct.pack('>q', version)
    for s in strings:
        b = s.encode('utf-8', 'surrogatepass') if isinstance(s, str) else s
        out += bytes([len(b)]) + b
    return out


write('validate', 'reserve', request(1, 60000, 0, '', 'email', 'ann@example.com', 't1', 'user-42', 'a'))
write('validate', 'confirm', request(2, 0, 7, 't', 'n', 'k', '', 'o', ''))
write('validate', 'abandon-utf8', request(3, 0, 0, 'é', '名前', '😀', '', 'o', 'a'))
write('validate', 'get-bad', request(5, 0, 0, b'\xc0\xaf', b'n\x00', b'\xed\xa0\x80', b'', b'', b''))
write('validate', 'type-names', request(4, 0, 0, '', 'shop', 'user', '', 'o', '', max_byte=2))


def varint(n):
    out = b''
    while True:
        out += bytes([(n & 0x7f) | (0x80 if n > 0x7f else 0)])
        n >>= 7
        if not n:
            return out


def s(b):
    b = b.encode('utf-8') if isinstance(b, str) else b
    return varint(len(b)) + b


def write_record(name, key, value, folder='corpus'):
    """An input of fuzz_record: flags (bit 0: the harness appends the
    record's checksum), the key's length, the key, the record."""
    path = os.path.join(here, folder, 'record')
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), 'wb') as f:
        f.write(bytes([1, len(key)]) + key + value)


DKEY = b'\x01' + b'\x00'.join([b't1', b'email', b'ann@example.com'])
HKEY = b'\x02' + bytes(range(16)) + struct.pack('<I', 1)
LINK = struct.pack('<I', 0xdeadbeef)
OWN = s('t1') + s('user-42')
write_record('pending', DKEY, b'P' + LINK + OWN + struct.pack('<q', 1700000060000)
             + varint(2) + s('a') + s('b'))
write_record('confirmed', DKEY, b'C' + LINK + OWN + struct.pack('<q', 7))
write_record('pending-no-holds', DKEY, b'P' + LINK + OWN + struct.pack('<q', 1) + varint(0))
write_record('hashed', HKEY, b'p' + LINK + s('t1') + s('email') + s('x' * 600) + OWN
             + struct.pack('<q', 5) + varint(1) + s('é'))
write_record('format', b'\x00format', b'F' + struct.pack('<i', 2) + LINK)
# Found by fuzzing: each passed its checksum and was decoded before.
write_record('empty-owner-id', DKEY, b'C' + LINK + s('t1') + s('') + struct.pack('<q', 7),
             folder='regress')
write_record('varint-too-long', DKEY, b'C' + LINK + b'\x82\x00t1' + s('user-42')
             + struct.pack('<q', 7), folder='regress')
