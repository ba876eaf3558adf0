"""bench/gateway.py: the OpenResty sign-up gateway under wrk.

    /usr/bin/python3 bench/gateway.py [seconds] [connections]

Starts the gateway of examples/openresty (its own launcher, gateway.py: a
private nginx on free loopback ports that stops with this process), one
worker, with one more location, /noop (bench/gateway/bench_noop.lua): the
same sign-up request, account subrequest and reply, but no reservation.
Then, for the memory store (one worker), the file store with sync = "disk"
(label file) and with sync = "process" (label file-p) and, when
RESV_TEST_URI is set (scripts/with-mongo), for MongoDB, runs wrk on /noop,
on /dict (the same sign-up on ngx.shared.DICT:add) and on /signup, every request a new
e-mail and user name (bench/gateway/signup.wrk.lua), and prints requests/s
and the latency p50/p99 of each, with the ratios signup/noop. Writes
gateway.dat for the plot into $BENCH_OUT (default: build/bench). wrk runs for a fixed time; nothing
here fails on a figure.
"""

import os
import re
import shutil
import subprocess
import tempfile
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, 'examples', 'openresty'))

from gateway import Gateway  # noqa: E402

NOOP = '''
    location = /noop {
      content_by_lua_block { require("bench_noop").run() }
    }
    location = /dict {
      content_by_lua_block { require("bench_dict").run() }
    }
'''
DICT = 'lua_shared_dict signups 64m;'


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
    workers_list = [int(w) for w in (sys.argv[3] if len(sys.argv) > 3 else '1,2,4').split(',')]
    store_dir = tempfile.mkdtemp(prefix='resv-bench-gateway-')
    # The memory store keeps values per worker: it is measured with one
    # worker only (with more, resv.open {} is refused in nginx). The file
    # store with each sync mode, each in a directory of its own.
    stores = [('memory', {}, [1]),
              ('file', {'path': os.path.join(store_dir, 'disk')}, workers_list),
              ('file-p', {'path': os.path.join(store_dir, 'process'), 'sync': 'process'},
               workers_list)]
    if os.environ.get('RESV_TEST_URI'):
        stores.append(('mongodb', {'uri': os.environ['RESV_TEST_URI']}, workers_list))
    rows = []
    run = 0
    try:
        for workers in workers_list:
            baselines = ('/noop', '/dict')  # measured once per worker count
            for name, store, counts in stores:
                if workers not in counts:
                    continue
                with Gateway(workers=workers, extra_locations=NOOP, extra_http=DICT,
                             extra_lua_path=os.path.join(HERE, 'gateway', '?.lua'),
                             build=os.environ.get('O', 'build'), **store) as gw:
                    paths, baselines = baselines + ('/signup',), ()
                    for path in paths:
                        run += 1
                        wrk(gw, path, 1, connections, run * 100)  # warm-up
                        label = name if path == '/signup' else path[1:]
                        rows.append((workers, label, wrk(gw, path, seconds, connections, run)))
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    print('== 6. sign-up gateway under wrk (examples/openresty, %d connections, %d s each)'
          % (connections, seconds))
    print('  %-7s %-8s %9s %9s %9s %9s %9s  %s' % (
        'workers', 'what', 'req/s', 'p50 ms', 'p99 ms', 'rps/noop', 'rps/dict', 'non-2xx'))
    # BENCH_OUT (bench/run.sh sets it), else the build folder's bench/:
    # never the work tree's root.
    out_dir = os.environ.get('BENCH_OUT') or os.path.join(
        REPO, os.environ.get('O', 'build'), 'bench')
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, 'gateway.dat'), 'w') as dat:
        dat.write('# label rps p50_ms p99_ms\n')
        base = {}
        for workers, label, r in rows:
            base.setdefault(workers, {})
            if label in ('noop', 'dict'):
                base[workers][label] = r
            noop, dict_ = base[workers].get('noop'), base[workers].get('dict')
            print('  %-7d %-8s %9.0f %9.2f %9.2f %9s %9s  %d/%d %s' % (
                workers, label, r['rps'], r['p50'], r['p99'],
                '%.2f' % (r['rps'] / noop['rps']) if noop else '-',
                '%.2f' % (r['rps'] / dict_['rps']) if dict_ else '-',
                r['bad'], r['total'], r['errors']))
            dat.write('"%d %s" %.1f %.3f %.3f\n' % (workers, label, r['rps'], r['p50'], r['p99']))


if __name__ == '__main__':
    main()
