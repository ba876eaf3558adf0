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
