"""The data: databases of collections of documents, and the single-document
write semantics on them.

Each collection keeps its documents in insertion order, keyed by an
order-sensitive form of ``_id`` (ordered.id_key): that key is the unique
``_id`` index. Matching is mongomock's ``filter_applies`` over SON
documents, so embedded documents compare in field order and queries keep
MongoDB's type bracketing. One lock guards all data: every insert, update,
delete and findAndModify runs whole under it, which makes each one atomic
like MongoDB's single-document writes (connections still run concurrently;
only the data step is serialized).

A member of a replica set (replset.py) gives its store a journal: every
change is first offered to it as an oplog entry (``('put', db, coll, key,
doc)``, ``('del', db, coll, key)``, ``('indexes', db, coll, specs)``,
``('create', db, coll, options)``, ``('drop', db, coll)``,
``('dropdb', db)``), which records it or refuses it (a member that
is no longer primary), and the other members replay the entries with
Store.apply.
"""

import copy
import threading

from bson.son import SON
from mongomock import OperationFailure
from mongomock.filtering import filter_applies, resolve_sort_key

from . import collation, indexes, updates
from .errors import CommandError, duplicate_key
from .ordered import id_key, to_son
from .pipeline import apply_pipeline


class Collection:
    """One collection's documents: id_key(_id) -> SON document."""

    def __init__(self, database, name, store=None, options=None):
        self.database = database
        self.name = name
        self.documents = {}
        self.store = store
        # create's options, as listCollections shows them (collation.py);
        # a default collation folds the strings of _id keys and queries.
        self.options = SON(options or {})
        self.collation = self.options.get('collation')
        self._fold = collation.folder(self.collation)
        id_index = SON(indexes.ID_INDEX)
        if self.collation is not None:
            id_index['collation'] = self.collation
        self.indexes = [id_index]  # specifications, as listIndexes shows them

    def key(self, id_value):
        """The _id index's key for id_value, under the collection's collation."""
        if self._fold is not None:
            id_value = collation.fold_value(id_value, self._fold)
        return id_key(id_value)

    def _journal(self, *entry):
        if self.store is not None and self.store.journal is not None:
            self.store.journal(entry)

    @property
    def namespace(self):
        return '%s.%s' % (self.database, self.name)

    def matching(self, query, spec=None):
        """Documents matching query, in natural order (a plain _id equality
        is looked up in the _id index first). spec: the command's collation,
        which replaces the collection's default one (MongoDB manual,
        "Collation": an operation's collation, else the collection's); the
        _id index, built with the default one, then serves only when the two
        compare strings alike."""
        query, fold, indexed = query or {}, self._fold, True
        if spec is not None:
            full = collation.full_collation(spec)
            fold = collation.folder(full)
            indexed = full == self.collation or (fold is None and self._fold is None)
        if not indexed:
            candidates = list(self.documents.values())
        elif '_id' in query and updates.is_equality(query['_id']):
            doc = self.documents.get(self.key(query['_id']))
            candidates = [doc] if doc is not None else []
        elif '_id' in query and isinstance(query['_id'], dict) and \
                list(query['_id']) == ['$in'] and isinstance(query['_id']['$in'], list) and \
                all(updates.is_equality(v) for v in query['_id']['$in']):
            # _id: {$in: [...]} is a lookup per value in the _id index too.
            keys = []
            for value in query['_id']['$in']:
                if self.key(value) not in keys:
                    keys.append(self.key(value))
            candidates = [self.documents[key] for key in keys if key in self.documents]
        else:
            candidates = list(self.documents.values())
        try:
            if fold is not None:
                folded = collation.fold_query(query, fold)
                return [doc for doc in candidates
                        if filter_applies(folded, collation.fold_value(doc, fold))]
            return [doc for doc in candidates if filter_applies(query, doc)]
        except OperationFailure as error:
            raise CommandError(error.code or 2, str(error))
        except NotImplementedError as error:
            raise CommandError(2, str(error))

    def applies(self, query, doc, spec=None):
        """Whether doc matches query, under spec or the default collation."""
        fold = self._fold if spec is None else collation.folder(collation.full_collation(spec))
        try:
            if fold is not None:
                return filter_applies(collation.fold_query(query or {}, fold),
                                      collation.fold_value(doc, fold))
            return filter_applies(query or {}, doc)
        except OperationFailure as error:
            raise CommandError(error.code or 2, str(error))
        except NotImplementedError as error:
            raise CommandError(2, str(error))

    def insert(self, doc):
        """Insert a document (gaining an _id if it has none); raises
        DuplicateKey when its _id is taken."""
        doc = updates.with_id_first(to_son(doc))
        if isinstance(doc['_id'], list):
            raise CommandError(53, "can't use an array for _id")
        key = self.key(doc['_id'])
        if key in self.documents:
            raise duplicate_key(self.namespace, doc['_id'])
        self._journal('put', self.database, self.name, key, doc)
        self.documents[key] = doc
        return doc

    def replace(self, old, new):
        """Store new in place of old (same _id)."""
        key = self.key(old['_id'])
        self._journal('put', self.database, self.name, key, new)
        self.documents[key] = new

    def set_indexes(self, specs):
        self._journal('indexes', self.database, self.name, list(specs))
        self.indexes = list(specs)

    def remove(self, doc):
        key = self.key(doc['_id'])
        self._journal('del', self.database, self.name, key)
        del self.documents[key]


def sort_documents(docs, sort):
    """Sort by a sort specification, like find's sort."""
    for field, direction in reversed(list((sort or {}).items())):
        docs = sorted(docs, key=lambda d: resolve_sort_key(field, d),
                      reverse=direction < 0)
    return docs


def updated(doc, update, inserting, filters=None):
    """The document after an update: a pipeline (list), operators or a
    replacement (filters: updates.array_filters()'s table)."""
    if isinstance(update, list):
        try:
            return apply_pipeline(doc, update)
        except OperationFailure as error:  # an expression's own error code
            raise CommandError(error.code or 2, str(error))
    if updates.is_operator_update(update):
        return updates.apply_operators(doc, update, inserting, filters)
    return updates.replace(doc, update)


class Store:
    """All databases. Call the write methods with the lock held."""

    def __init__(self, lock=None, journal=None):
        self.lock = lock or threading.RLock()
        self.databases = {}  # name -> {collection name -> Collection}
        self.journal = journal  # called with each change before it is made

    def collection(self, database, name, create=False, options=None):
        """The collection, or None if it does not exist and create is false
        (options: create's, for a collection made here)."""
        collections = self.databases.get(database)
        if collections is None or name not in collections:
            if not create:
                return None
            if self.journal is not None:
                self.journal(('create', database, name, SON(options or {})))
            collections = self.databases.setdefault(database, {})
            collections[name] = Collection(database, name, self, options)
        return collections[name]

    def drop(self, database, name):
        if name not in self.databases.get(database, {}):
            return False
        if self.journal is not None:
            self.journal(('drop', database, name))
        del self.databases[database][name]
        return True

    def drop_database(self, database):
        if database in self.databases and self.journal is not None:
            self.journal(('dropdb', database))
        self.databases.pop(database, None)

    def apply(self, entry):
        """Replay one journal entry of another member (no journal call)."""
        kind, database = entry[0], entry[1]
        if kind == 'dropdb':
            self.databases.pop(database, None)
            return
        name = entry[2]
        collections = self.databases.setdefault(database, {})
        if kind == 'drop':
            collections.pop(name, None)
            return
        collection = collections.get(name)
        if collection is None:
            options = entry[3] if kind == 'create' else None
            collection = collections[name] = Collection(database, name, self, options)
        if kind == 'put':
            collection.documents[entry[3]] = entry[4]
        elif kind == 'del':
            collection.documents.pop(entry[3], None)
        elif kind == 'indexes':
            collection.indexes = list(entry[3])

    def find(self, database, name, query, sort=None, spec=None):
        """spec, here and in the writes: the command's collation."""
        collection = self.collection(database, name)
        if collection is None:
            return []
        return sort_documents(collection.matching(query, spec), sort)

    def update_one(self, database, name, query, update, upsert, sort=None, filters=None,
                   spec=None):
        """Update the first match, or upsert. Returns (before, after,
        upserted): before is None for an upsert, after None for no match.
        filters: updates.array_filters()'s table of the statement."""
        collection = self.collection(database, name, create=upsert)
        matches = sort_documents(collection.matching(query, spec), sort) if collection else []
        if matches:
            before = matches[0]
            after = updated(copy.deepcopy(before), update, inserting=False, filters=filters)
            collection.replace(before, after)
            return before, after, False
        if not upsert:
            return None, None, False
        seed = updates.seed_from_filter(query)
        if not isinstance(update, list) and not updates.is_operator_update(update):
            seed = updates.with_id_first(SON([('_id', seed['_id'])] + list(update.items())))
        else:
            seed = updated(seed, update, inserting=True, filters=filters)
        # The filter did not match; if a document has this _id anyway the
        # insert fails with E11000 and, as on the server, is not retried.
        return None, collection.insert(seed), True

    def update_many(self, database, name, query, update, filters=None, spec=None):
        collection = self.collection(database, name)
        changed = 0
        matches = collection.matching(query, spec) if collection else []
        for before in matches:
            after = updated(copy.deepcopy(before), update, inserting=False, filters=filters)
            collection.replace(before, after)
            changed += after != before
        return len(matches), changed

    def delete(self, database, name, query, limit, sort=None, work=None, spec=None):
        """Delete the first match (limit 1) or all; returns the deleted docs.
        work, when given, is called before each document is deleted: it may
        release the lock for a while (MongoDB's yields) or raise (the
        command's time is up), which leaves the documents deleted so far
        deleted. After a yield each document is looked up and matched again,
        as the server does, so one changed in between is left alone."""
        collection = self.collection(database, name)
        if collection is None:
            return []
        matches = sort_documents(collection.matching(query, spec), sort)
        if limit:
            matches = matches[:1]
        deleted = []
        for doc in matches:
            if work is not None:
                work()
                if self.collection(database, name) is not collection:
                    break  # dropped meanwhile
                doc = collection.documents.get(id_key(doc['_id']))
                if doc is None or not collection.applies(query, doc, spec):
                    continue
            collection.remove(doc)
            deleted.append(doc)
        return deleted
