"""`make demo`: the sign-up gateway in a real nginx, and a race to watch.

    /usr/bin/python3 examples/openresty/demo.py [--uri MONGODB_URI]

Starts nginx with the gateway (examples/openresty) on loopback: on the
embedded memory store with one worker, or on MongoDB with two workers when
a URI is given. Then fires sign-ups at it from parallel threads and prints
who won, who got 409 and why, and stops nginx (also on failure or Ctrl-C).
"""

import argparse
import concurrent.futures
import os
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gateway import Gateway  # noqa: E402


def race(gw, people):
    """Signs every (email, username) up at once, behind one barrier."""
    barrier = threading.Barrier(len(people))

    def one(person):
        barrier.wait()
        t0 = time.monotonic()
        status, body = gw.signup(*person)
        return person, status, body, (time.monotonic() - t0) * 1000

    with concurrent.futures.ThreadPoolExecutor(len(people)) as pool:
        return list(pool.map(one, people))


def show(results):
    counts = {}
    for (email, username), status, body, ms in results:
        counts[status] = counts.get(status, 0) + 1
        if status == 201:
            what = 'WON      -> account %s' % body['id']
        elif status == 409:
            what = 'got 409  -> %s %s is taken (%s)' % (body['field'], body['value'],
                                                       body['state'])
        else:
            what = 'got %d  -> %s' % (status, body)
        print('  %-28s %-16s %s  [%.0f ms]' % (email, username, what, ms))
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--uri', default=os.environ.get('MONGODB_URI', ''),
                        help='MongoDB URI (default: the embedded memory store)')
    parser.add_argument('--racers', type=int, default=8)
    args = parser.parse_args()

    # On MongoDB, values from earlier demos are still taken: tag this run's.
    tag = '+' + uuid.uuid4().hex[:4] if args.uri else ''
    mail = lambda name: '%s%s@example.com' % (name, tag)  # noqa: E731
    workers = 2 if args.uri else 1
    ok = True

    with Gateway(uri=args.uri, workers=workers) as gw:
        health = gw.get('/health')[1]
        print('nginx %d worker(s) on 127.0.0.1:%d (account service on :%d), '
              'store: %s, waiting by %s'
              % (workers, gw.port, gw.upstream_port,
                 'MongoDB' if args.uri else 'embedded memory', health['wait']))

        print('\n1. %d people sign up as %s at the same instant:'
              % (args.racers, mail('ann')))
        counts = show(race(gw, [(mail('ann'), 'ann%d%s' % (i, tag.strip('+')))
                                for i in range(1, args.racers + 1)]))
        ok &= counts == {201: 1, 409: args.racers - 1}

        print('\n2. %d people sign up with different e-mails at the same instant:'
              % args.racers)
        counts = show(race(gw, [(mail('user%d' % i), 'user%d%s' % (i, tag.strip('+')))
                                for i in range(1, args.racers + 1)]))
        ok &= counts == {201: args.racers}

        print('\n3. Two people want the same user name with different e-mails:')
        counts = show(race(gw, [(mail('bob'), 'bob' + tag.strip('+')),
                                (mail('robert'), 'BOB' + tag.strip('+'))]))
        ok &= counts == {201: 1, 409: 1}

        print('\n4. The account service fails for carl; the reservation is '
              'abandoned, so carl can try again at once:')
        counts = show(race(gw, [(mail('carl'), 'fail-carl' + tag.strip('+'))]))
        counts2 = show(race(gw, [(mail('carl'), 'carl' + tag.strip('+'))]))
        ok &= counts == {502: 1} and counts2 == {201: 1}

    print('\n%s: one winner per value, every other contender told 409.'
          % ('OK' if ok else 'UNEXPECTED'))
    return 0 if ok else 1


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print('\ninterrupted; nginx stopped')
        sys.exit(130)
