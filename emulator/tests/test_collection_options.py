"""Collection options: what create keeps, listCollections reports, and
what a default collation does.

MongoDB's documentation followed:
- create, https://www.mongodb.com/docs/manual/reference/command/create/ :
  collation, validator (with validationLevel "strict" and validationAction
  "error" by default), capped (which needs size) and timeseries (which
  needs timeField; granularity "seconds" by default) are options of the
  new collection;
- listCollections,
  https://www.mongodb.com/docs/manual/reference/command/listCollections/ :
  each collection's name, type ("collection", "timeseries", "view"), its
  creation options in `options`, and its `idIndex`; the filter applies
  to those fields;
- collation, https://www.mongodb.com/docs/manual/reference/collation/ :
  the collection's default collation, filled in with its defaults, is
  the collation of its _id index and of every query on it that names
  none; strength 1 or 2 compares strings without regard to case
  (https://www.mongodb.com/docs/manual/core/index-case-insensitive/), so
  _ids "Ann" and "ann" are the same key (DuplicateKey, 11000) and a find
  by "ANN" matches "ann"; {locale: "simple"} is binary comparison.
"""

import unittest

import pymongo
from bson.son import SON

from .support import EmulatorTest

CASE_INSENSITIVE = {'locale': 'en', 'strength': 2}


class CreateOptionsTest(EmulatorTest):

    def info(self, name):
        infos = list(self.db.list_collections(filter={'name': name}))
        self.assertEqual(len(infos), 1)
        return infos[0]

    def test_collation_is_listed_with_its_defaults(self):
        self.db.command('create', 'ci', collation=CASE_INSENSITIVE)
        info = self.info('ci')
        collation = info['options']['collation']
        self.assertEqual((collation['locale'], collation['strength']), ('en', 2))
        self.assertEqual((collation['caseLevel'], collation['caseFirst'],
                          collation['alternate']), (False, 'off', 'non-ignorable'))
        self.assertEqual(info['idIndex']['collation'], collation)
        self.assertEqual(self.coll.database.ci.index_information()['_id_']['collation'],
                         collation)

    def test_simple_collation_is_no_collation(self):
        self.db.command('create', 'plain', collation={'locale': 'simple'})
        self.assertEqual(self.info('plain')['options'], {})

    def test_validator_capped_and_timeseries_are_listed(self):
        self.db.command('create', 'valid', validator={'key': {'$exists': True}})
        self.assertEqual(self.info('valid')['options'], SON([
            ('validator', {'key': {'$exists': True}}), ('validationLevel', 'strict'),
            ('validationAction', 'error')]))
        self.db.command('create', 'ring', capped=True, size=4096)
        options = self.info('ring')['options']
        self.assertEqual((options['capped'], options['size']), (True, 4096))
        self.db.command('create', 'series', timeseries={'timeField': 't'})
        info = self.info('series')
        self.assertEqual(info['type'], 'timeseries')
        self.assertEqual(info['options']['timeseries'],
                         {'timeField': 't', 'granularity': 'seconds',
                          'bucketMaxSpanSeconds': 3600})

    def test_plain_collection_has_empty_options(self):
        self.db.command('create', 'plain')
        self.coll.insert_one({'_id': 1})  # created by the insert
        for name in ('plain', 'reservations'):
            info = self.info(name)
            self.assertEqual((info['type'], info['options']), ('collection', {}))
            self.assertNotIn('collation', info['idIndex'])

    def test_rules_checked_at_create(self):
        with self.assertRaises(pymongo.errors.OperationFailure) as caught:
            self.db.command('create', 'ring', capped=True)
        self.assertEqual(caught.exception.code, 72)
        with self.assertRaises(pymongo.errors.OperationFailure):
            self.db.command('create', 'series', timeseries={})
        self.assertEqual(self.db.list_collection_names(), [])

    def test_filter_on_options(self):
        self.db.command('create', 'ci', collation=CASE_INSENSITIVE)
        self.db.command('create', 'plain')
        names = [i['name'] for i in self.db.list_collections(
            filter={'options.collation': {'$exists': True}})]
        self.assertEqual(names, ['ci'])


class DefaultCollationTest(EmulatorTest):

    def setUp(self):
        super().setUp()
        self.db.command('create', 'reservations', collation=CASE_INSENSITIVE)

    def test_ids_differing_in_case_are_one_key(self):
        self.coll.insert_one({'_id': 'Ann'})
        with self.assertRaises(pymongo.errors.DuplicateKeyError) as caught:
            self.coll.insert_one({'_id': 'ann'})
        self.assertEqual(caught.exception.code, 11000)
        self.assertEqual(self.coll.count_documents({}), 1)

    def test_queries_follow_the_collation(self):
        self.coll.insert_many([{'_id': 'ann', 'key': 'Bob'}, {'_id': 'cy', 'key': 'dé'}])
        self.assertEqual([d['_id'] for d in self.coll.find({'_id': 'ANN'})], ['ann'])
        self.assertEqual([d['_id'] for d in self.coll.find({'_id': {'$in': ['ANN']}})],
                         ['ann'])
        self.assertEqual([d['_id'] for d in self.coll.find({'key': 'bob'})], ['ann'])
        self.assertEqual([d['_id'] for d in self.coll.find({'key': 'DÉ'})], ['cy'])
        self.assertEqual(list(self.coll.find({'key': 'de'})), [])  # strength 2: accents count

    def test_writes_follow_the_collation(self):
        self.coll.insert_one({'_id': 'ann', 'n': 0})
        doc = self.coll.find_one_and_update({'_id': 'ANN'}, {'$inc': {'n': 1}},
                                            return_document=pymongo.ReturnDocument.AFTER)
        self.assertEqual(doc, {'_id': 'ann', 'n': 1})
        result = self.coll.update_one({'_id': 'Ann'}, {'$inc': {'n': 1}}, upsert=True)
        self.assertEqual((result.matched_count, result.upserted_id), (1, None))
        self.assertEqual(self.coll.delete_one({'_id': 'aNN'}).deleted_count, 1)
        self.assertEqual(self.coll.count_documents({}), 0)

    def test_other_collections_compare_as_given(self):
        other = self.db.plain
        other.insert_many([{'_id': 'Ann'}, {'_id': 'ann'}])
        self.assertEqual([d['_id'] for d in other.find({'_id': 'ANN'})], [])


if __name__ == '__main__':
    unittest.main()
