"""Prints a collection's documents as another implementation would read them.

    /usr/bin/python3 csrc/test/layout_check.py URI COLLECTION

The layout test of test_mongo_store.c writes reservations through the C
store, then reads them back here with pymongo, an independent client, so
the check does not trust the store's own reading code. Each document is
printed on one line as canonical extended JSON, which keeps field order
and names every number's type (an int64 is {"$numberLong": ...}, an int32
{"$numberInt": ...}). The format record comes first, then the others in
order of their JSON text. The database is the URI's, else "resv", the
store's rule.
"""

import sys

from bson import json_util
from bson.codec_options import CodecOptions
from bson.son import SON
from pymongo import MongoClient
from pymongo.uri_parser import parse_uri


def main(uri, collection):
    database = parse_uri(uri).get('database') or 'resv'
    client = MongoClient(uri, serverSelectionTimeoutMS=5000)
    try:
        coll = client[database].get_collection(
            collection, codec_options=CodecOptions(document_class=SON))
        docs = list(coll.find({}))
    finally:
        client.close()
    options = json_util.CANONICAL_JSON_OPTIONS
    lines = [json_util.dumps(doc, json_options=options) for doc in docs]
    formats = [line for doc, line in zip(docs, lines) if doc.get('_id') == 'format']
    others = sorted(line for doc, line in zip(docs, lines) if doc.get('_id') != 'format')
    for line in formats + others:
        print(line)
    return 0


if __name__ == '__main__':
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
