"""Starts and stops the sign-up gateway in a private nginx.

    with Gateway(uri=None, workers=1) as gw:      # uri None: memory store
    with Gateway(path=DIR, workers=4) as gw:      # the file store in DIR
        status, body = gw.post('/signup', {'email': ..., 'username': ...})

Renders nginx.conf.in into a fresh prefix (a temporary folder), on two
loopback ports chosen free at run time, and runs Debian's nginx on it in the
foreground (`daemon off`), as a child of this process: stopped by stop(), on
leaving the `with` block, and, should this process die first, by the kernel
(PR_SET_PDEATHSIG), so nothing outlives the caller. The system's nginx is
never touched.
"""

import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import string
import subprocess
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
NGINX = os.environ.get('NGINX', '/usr/sbin/nginx')


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Runs in the child between fork and exec: SIGTERM when we die.
    libc = ctypes.CDLL('libc.so.6', use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Gateway:
    def __init__(self, uri=None, workers=1, store_threads=8, timeout_ms=5000,
                 wait='', wait_threads=32, build=None, extra_locations='', extra_http='',
                 extra_lua_path='', log_level='warn', path=None):
        self.uri = uri or ''
        self.path = path or ''
        self.workers = workers
        self.store_threads = store_threads
        self.timeout_ms = timeout_ms
        self.wait = wait
        self.wait_threads = wait_threads
        self.build = build or os.environ.get('RESV_BUILD', 'build')
        self.extra_locations = extra_locations
        self.extra_http = extra_http
        self.extra_lua_path = extra_lua_path
        self.log_level = log_level
        self.prefix = None
        self.proc = None
        self.port = None
        self.upstream_port = None

    # -- life cycle ------------------------------------------------------

    def render(self):
        build = os.path.join(REPO, self.build)
        lua_path = ';'.join(p for p in [
            os.path.join(REPO, 'lua', '?.lua'),
            os.path.join(HERE, 'lua', '?.lua'),
            self.extra_lua_path,
            '/usr/share/lua/5.1/?.lua',
            '/usr/share/lua/5.1/?/init.lua',
        ] if p) + ';;'
        values = {
            'prefix': self.prefix,
            'workers': self.workers,
            'log_level': self.log_level,
            # wait_threads=0: no pool (resv then waits by its watcher)
            'thread_pool': ('thread_pool resv threads=%d;' % self.wait_threads
                            if self.wait_threads else '# no thread_pool resv'),
            'lua_path': lua_path,
            'lua_cpath': os.path.join(build, '?.so') + ';;',
            'store_uri': self.uri.replace('\\', '\\\\').replace('"', '\\"'),
            'store_path': self.path.replace('\\', '\\\\').replace('"', '\\"'),
            'store_threads': self.store_threads,
            'store_timeout_ms': self.timeout_ms,
            'wait': self.wait,
            'port': self.port,
            'upstream_port': self.upstream_port,
            'extra_locations': self.extra_locations,
            'extra_http': self.extra_http,
        }
        with open(os.path.join(HERE, 'nginx.conf.in')) as f:
            template = string.Template(f.read())
        return template.substitute(values)

    def start(self, ready_timeout=10.0):
        if not os.path.exists(os.path.join(REPO, self.build, 'libresv.so')):
            raise RuntimeError('%s/libresv.so is missing: run make first' % self.build)
        self.prefix = tempfile.mkdtemp(prefix='resv-gateway-')
        # Workers may run as another user (nobody) when we are root.
        os.chmod(self.prefix, 0o755)
        for sub in ('conf', 'logs', 'tmp'):
            os.makedirs(os.path.join(self.prefix, sub))
        if self.path:
            # The workers (nobody, when we are root) make and lock its files.
            os.makedirs(self.path, exist_ok=True)
            os.chmod(self.path, 0o777)
        self.port, self.upstream_port = free_port(), free_port()
        conf = os.path.join(self.prefix, 'conf', 'nginx.conf')
        with open(conf, 'w') as f:
            f.write(self.render())
        self.proc = subprocess.Popen(
            [NGINX, '-p', self.prefix, '-c', conf,
             '-e', os.path.join(self.prefix, 'logs', 'error.log')],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + ready_timeout
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors='replace')
                self.stop()
                raise RuntimeError('nginx exited at start: %s\n%s' % (err, self.log()))
            try:
                status, _ = self.get('/health', timeout=0.5)
                if status == 200:
                    return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                log = self.log()
                self.stop()
                raise RuntimeError('nginx did not answer /health:\n' + log)
            time.sleep(0.05)

    def stop(self):
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()  # SIGTERM: fast shutdown
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.proc.stderr:
                self.proc.stderr.close()
            self.proc = None
        if self.prefix and not os.environ.get('RESV_KEEP_PREFIX'):
            shutil.rmtree(self.prefix, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def log(self):
        try:
            with open(os.path.join(self.prefix, 'logs', 'error.log')) as f:
                return f.read()
        except OSError:
            return ''

    def worker_pids(self):
        """The worker processes' ids (children of the master)."""
        pids = []
        for entry in os.listdir('/proc'):
            if entry.isdigit():
                try:
                    with open('/proc/%s/stat' % entry) as f:
                        stat = f.read()
                except OSError:
                    continue
                # pid (comm) state ppid ...; comm may hold spaces.
                if int(stat.rsplit(')', 1)[1].split()[1]) == self.proc.pid:
                    pids.append(int(entry))
        return pids

    # -- HTTP --------------------------------------------------------------

    def request(self, method, path, body=None, headers=None, timeout=10.0):
        conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = data.decode(errors='replace')
        return resp.status, parsed

    def get(self, path, timeout=10.0):
        return self.request('GET', path, timeout=timeout)

    def post(self, path, fields, form=False, timeout=10.0):
        if form:
            body = urllib.parse.urlencode(fields)
            ctype = 'application/x-www-form-urlencoded'
        else:
            body = json.dumps(fields)
            ctype = 'application/json'
        return self.request('POST', path, body=body,
                            headers={'Content-Type': ctype}, timeout=timeout)

    def signup(self, email, username, **kw):
        return self.post('/signup', {'email': email, 'username': username}, **kw)
