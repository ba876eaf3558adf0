"""bench/gateway.py: the OpenResty sign-up gateway under wrk.

    /usr/bin/python3 bench/gateway.py [seconds] [connections]

Starts the gateway of examples/openresty (its own launcher, gateway.py: a
private nginx on free loopback ports that stops with this process), one
worker, with one more location, /noop (bench/gateway/bench_noop.lua): the
same sign-up request, account subrequest and reply, but no reservation.
Then, for the memory store and, when RESV_TEST_URI is set (scripts/with-
mongo), for MongoDB, runs wrk on /noop and on /signup, every request a new
e-mail and user name (bench/gateway/signup.wrk.lua), and prints requests/s
and the latency p50/p99 of each, with the ratios signup/noop. Writes
$BENCH_OUT/gateway.dat for the plot. wrk runs for a fixed time; nothing
here fails on a figure.
"""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, 'examples', 'openresty'))

from gateway import Gateway  # noqa: E402

NOOP = '''
    location = /noop {
      content_by_lua_block { require("bench_noop").run() }
    }
'''


def parse_wrk(out):
    def ms(text):
        value, unit = re.match(r'([\d.]+)(us|ms|s)', text).groups()
        return float(value) * {'us': 0.001, 'ms': 1.0, 's': 1000.0}[unit]
    rps = float(re.search(r'Requests/sec:\s+([\d.]+)', out).group(1))
    p50 = ms(re.search(r'^\s+50%\s+(\S+)', out, re.M).group(1))
    p99 = ms(re.search(r'^\s+99%\s+(\S+)', out, re.M).group(1))
    total = int(re.search(r'(\d+) requests in', out).group(1))
    bad = re.search(r'Non-2xx or 3xx responses:\s+(\d+)', out)
    errors = re.search(r'Socket errors:.*', out)
    return {'rps': rps, 'p50': p50, 'p99': p99, 'total': total,
            'bad': int(bad.group(1)) if bad else 0,
            'errors': errors.group(0) if errors else ''}


def wrk(gw, path, seconds, connections, run):
    env = dict(os.environ, WRK_RUN=str(run))
    out = subprocess.run(
        ['timeout', str(seconds + 30), 'wrk', '-t1', '-c%d' % connections,
         '-d%ds' % seconds, '--latency', '--timeout', '10s',
         '-s', os.path.join(HERE, 'gateway', 'signup.wrk.lua'),
         'http://127.0.0.1:%d%s' % (gw.port, path)],
        env=env, check=True, capture_output=True, text=True).stdout
    return parse_wrk(out)


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    connections = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    stores = [('memory', None)]
    if os.environ.get('RESV_TEST_URI'):
        stores.append(('mongodb', os.environ['RESV_TEST_URI']))
    rows = []
    run = 0
    for name, uri in stores:
        with Gateway(uri=uri, workers=1, extra_locations=NOOP,
                     extra_lua_path=os.path.join(HERE, 'gateway', '?.lua'),
                     build=os.environ.get('O', 'build')) as gw:
            for path in ('/noop', '/signup'):
                run += 1
                wrk(gw, path, 1, connections, run * 100)  # warm-up (JIT, connections)
                rows.append((name, path, wrk(gw, path, seconds, connections, run)))
    print('== 6. sign-up gateway under wrk (examples/openresty, 1 worker, '
          '%d connections, %d s each)' % (connections, seconds))
    print('  %-8s %-8s %9s %9s %9s %8s %8s %8s  %s' % (
        'store', 'location', 'req/s', 'p50 ms', 'p99 ms', 'rps/noop', 'p50/noop',
        'p99/noop', 'non-2xx'))
    out_dir = os.environ.get('BENCH_OUT', '.')
    with open(os.path.join(out_dir, 'gateway.dat'), 'w') as dat:
        dat.write('# label rps p50_ms p99_ms\n')
        base = None
        for name, path, r in rows:
            if path == '/noop':
                base = r
            print('  %-8s %-8s %9.0f %9.2f %9.2f %8.2f %8.2f %8.2f  %d/%d %s' % (
                name, path, r['rps'], r['p50'], r['p99'], r['rps'] / base['rps'],
                r['p50'] / base['p50'], r['p99'] / base['p99'], r['bad'], r['total'],
                r['errors']))
            dat.write('"%s %s" %.1f %.3f %.3f\n' % (name, path, r['rps'], r['p50'], r['p99']))


if __name__ == '__main__':
    main()
