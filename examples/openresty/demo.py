"""`make demo`: the sign-up gateway in a real nginx, and a race to watch.

    /usr/bin/python3 examples/openresty/demo.py [--uri MONGODB_URI]

Starts nginx with the gateway (examples/openresty) on loopback: on the
file store (a fresh directory under the build folder) shared by four
workers, on the memory store with one worker (--memory), or on MongoDB with
two workers when a URI is given. Then fires sign-ups at it from parallel
threads and prints who won, who got 409 and why, and stops nginx (also on
failure or Ctrl-C).
"""

import argparse
import concurrent.futures
import os
import shutil
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
                        help='MongoDB URI (default: the file store)')
    parser.add_argument('--memory', action='store_true',
                        help='the memory store, in one worker')
    parser.add_argument('--racers', type=int, default=12)
    args = parser.parse_args()

    # On MongoDB, values from earlier demos are still taken: tag this run's.
    tag = '+' + uuid.uuid4().hex[:4] if args.uri else ''
    mail = lambda name: '%s%s@example.com' % (name, tag)  # noqa: E731
    path = None
    if args.uri:
        workers, what = 2, 'MongoDB'
    elif args.memory:
        workers, what = 1, 'embedded memory'
    else:
        build = os.environ.get('RESV_BUILD', 'build')
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))), build, 'demo-store-' + uuid.uuid4().hex[:8])
        workers, what = 4, 'file store in ' + path
    ok = True

    try:
        with Gateway(uri=args.uri, workers=workers, path=path) as gw:
            ok = run(gw, workers, what, args, mail, tag)
    finally:
        if path:
            shutil.rmtree(path, ignore_errors=True)
    return 0 if ok else 1


def run(gw, workers, what, args, mail, tag):
    """The four scenes against a started gateway; True when each is as expected."""
    ok = True
    health = gw.get('/health')[1]
    print('nginx %d worker(s) on 127.0.0.1:%d (account service on :%d), '
          'store: %s, waiting by %s'
          % (workers, gw.port, gw.upstream_port, what, health['wait']))

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
    return ok


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print('\ninterrupted; nginx stopped')
        sys.exit(130)
