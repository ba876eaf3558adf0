"""Measures resv.ngx's waiting mechanisms in a real nginx (one worker).

    scripts/with-mongo /usr/bin/python3 examples/openresty/bench/bench.py

Against RESV_TEST_URI (the emulator, or MONGODB_URI). For each mechanism:

  * latency: 400 sequential get calls (conc 1), then 400 over 16 light
    threads (conc 16); p50/p99 of one call, measured inside the worker.
    "block" (resv_job_wait on the worker's thread) is the baseline: the
    added latency of a mechanism is its figure minus block's.
  * CPU while waiting: 32 calls wait together ~1 s (a fail point stalls
    every find for 1000 ms); the worker process's CPU time over the wait.

Prints a table (markdown), the figures for the README.
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from gateway import Gateway  # noqa: E402

URI = os.environ.get('RESV_TEST_URI', '')
MECHANISMS = ['block', 'inbox', 'thread', 'watcher', 'backoff']
LOCATIONS = """
    location = /bench/latency {
      content_by_lua_block { require("bench").latency() }
    }
    location = /bench/cpu {
      content_by_lua_block { require("bench").cpu() }
    }
"""


def get(gw, path):
    status, body = gw.get(path, timeout=120)
    if status != 200:
        raise RuntimeError('%s: %s %s' % (path, status, body))
    return body


def main():
    if not URI:
        sys.exit('RESV_TEST_URI is not set: run through scripts/with-mongo')
    import pymongo
    client = pymongo.MongoClient(URI, serverSelectionTimeoutMS=5000)
    rows = []
    with Gateway(uri=URI, store_threads=64, wait_threads=64,
                 extra_locations=LOCATIONS, extra_lua_path=os.path.join(HERE, '?.lua')) as gw:
        # Warm up: the store's connections, the JIT, and the Lua states of
        # nginx's thread pool (each loads resv.ngx on its first job).
        get(gw, '/bench/latency?wait=block&n=100')
        for _ in range(3):
            get(gw, '/bench/latency?wait=thread&n=640&conc=64')
        idle = get(gw, '/bench/cpu?wait=none&k=32&idle=1')
        for wait in MECHANISMS:
            one = get(gw, '/bench/latency?wait=%s&n=400&conc=1' % wait)
            many = get(gw, '/bench/latency?wait=%s&n=400&conc=16' % wait)
            cpu = None
            if wait != 'block':  # blocking would serialise the 32 calls
                client.admin.command('configureFailPoint', 'failCommand', mode='alwaysOn',
                                     data={'failCommands': ['find'],
                                           'blockConnection': True, 'blockTimeMS': 1000})
                try:
                    cpu = get(gw, '/bench/cpu?wait=%s&k=32' % wait)
                finally:
                    client.admin.command('configureFailPoint', 'failCommand', mode='off')
            rows.append((wait, one, many, cpu))
            sys.stderr.write('%s %s %s %s\n' % (wait, json.dumps(one), json.dumps(many),
                                                json.dumps(cpu)))
    base = rows[0][1]
    print('| mechanism | one call at a time: p50 / p99 (µs) | added p50 / p99 (µs) | '
          '16 at once: p50 / p99 (µs) | calls/s | CPU while 32 calls wait 1 s |')
    print('| --- | --- | --- | --- | --- | --- |')
    for wait, one, many, cpu in rows:
        print('| %s | %d / %d | %+d / %+d | %d / %d | %d | %s |' % (
            wait, one['p50_us'], one['p99_us'],
            one['p50_us'] - base['p50_us'], one['p99_us'] - base['p99_us'],
            many['p50_us'], many['p99_us'], many['per_s'],
            '%.1f ms' % cpu['cpu_ms'] if cpu else 'n/a (blocks the worker)'))
    print('\nIdle worker, 32 light threads in ngx.sleep(1): %.1f ms CPU.' % idle['cpu_ms'])
    print('Errors: %s' % sum(r[1]['errors'] + r[2]['errors'] + (r[3]['errors'] if r[3] else 0)
                             for r in rows))
    print('(block: resv_job_wait on the worker thread, the baseline; 16 at once it '
          'serialises the calls.)')


if __name__ == '__main__':
    main()
