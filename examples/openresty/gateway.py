"""Starts and stops the sign-up gateway in a private nginx.

    with Gateway(uri=None, workers=1) as gw:      # uri None: memory store
    with Gateway(path=DIR, workers=4) as gw:      # the file store in DIR
    with Gateway(path=DIR, sync='process') as gw: # ... with sync = "process"
        status, body = gw.post('/signup', {'email': ..., 'username': ...})

Renders nginx.conf.in into a fresh prefix (a temporary folder), on two
loopback ports chosen free at run time, and runs Debian's nginx on it in the
foreground (`daemon off`), as a child of this process: stopped by stop(), on
leaving the `with` block, and, should this process die first, by the kernel
(PR_SET_PDEATHSIG), so nothing outlives the caller. The system's nginx is
never touched.

nginx's workers run as the user that runs this (the `user` directive names
it when that is root; nginx started by another user never switches), so a
checkout only its owner can enter (a 0700 home directory) serves as well
as any. Gateway(user='nobody') runs them as another user; start() then
refuses, naming the directory, when that user cannot read what the
workers load (the Lua modules, libresv.so) or reach the file store (which
is then made theirs).
"""

import ctypes
import grp
import http.client
import json
import os
import pwd
import shutil
import signal
import socket
import stat
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


def _may(uid, gids, st, bits):
    """True when uid (in groups gids) has the r/w/x bits (4/2/1) on st."""
    if uid == 0:
        return True
    if st.st_uid == uid:
        return (st.st_mode >> 6) & bits == bits
    if st.st_gid in gids:
        return (st.st_mode >> 3) & bits == bits
    return st.st_mode & bits == bits


def cannot_reach(path, user, write=False):
    """Why user cannot read path (or write it, a directory), or None: the
    first directory on the way it may not enter, with its mode and owner."""
    entry = pwd.getpwnam(user)
    gids = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if user in g.gr_mem}
    path = os.path.abspath(path)
    parts = path.split(os.sep)
    for i in range(1, len(parts) + 1):
        here = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.stat(here)
        except OSError as e:
            return '%s: %s' % (here, e.strerror)
        last = i == len(parts)
        bits = (4 | (2 if write else 0) | (1 if stat.S_ISDIR(st.st_mode) else 0)) if last else 1
        if not _may(entry.pw_uid, gids, st, bits):
            what = 'write' if last and write else 'read' if last else 'enter'
            return '%s cannot %s %s (%s, owner %s:%s)' % (
                user, what, here, stat.filemode(st.st_mode),
                _name(pwd.getpwuid, st.st_uid), _name(grp.getgrgid, st.st_gid))
    return None


def _name(lookup, ident):
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)


def _die_with_parent():
    # Runs in the child between fork and exec: SIGTERM when we die.
    libc = ctypes.CDLL('libc.so.6', use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Gateway:
    def __init__(self, uri=None, workers=1, store_threads=8, timeout_ms=5000,
                 wait='', wait_threads=32, build=None, extra_locations='', extra_http='',
                 extra_lua_path='', log_level='warn', path=None, user=None, sync=None):
        self.uri = uri or ''
        self.path = path or ''
        self.sync = sync or ''  # the file store's sync ('': its default, disk)
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
        # The user nginx's workers run as: the one running this, unless
        # told (only root can run them as another).
        self.user = user or pwd.getpwuid(os.geteuid()).pw_name
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
        if os.geteuid() == 0:
            entry = pwd.getpwnam(self.user)
            user = 'user %s %s;' % (self.user, _name(grp.getgrgid, entry.pw_gid))
        else:
            user = '# not root: the workers run as the user that starts nginx'
        values = {
            'user': user,
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
            'store_sync': self.sync,
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
        self.check_readable()
        self.prefix = tempfile.mkdtemp(prefix='resv-gateway-')
        # Workers of another user (Gateway(user=...)) need to enter it.
        os.chmod(self.prefix, 0o755)
        for sub in ('conf', 'logs', 'tmp'):
            os.makedirs(os.path.join(self.prefix, sub))
        if self.path:
            # The workers make and lock its files: it is theirs.
            os.makedirs(self.path, exist_ok=True)
            entry = pwd.getpwnam(self.user)
            if os.geteuid() == 0 and entry.pw_uid != 0:
                os.chown(self.path, entry.pw_uid, entry.pw_gid)
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

    def check_readable(self):
        """Raises, naming the cause, when the workers' user cannot read the
        files they load or reach the file store's directory."""
        if self.user == pwd.getpwuid(os.geteuid()).pw_name:
            return  # what this process could open, so can they
        needs = [(os.path.join(REPO, 'lua', 'resv.lua'), False),
                 (os.path.join(HERE, 'lua', 'gateway.lua'), False),
                 (os.path.join(REPO, self.build, 'libresv.so'), False)]
        if self.path:
            parent = os.path.dirname(os.path.abspath(self.path))
            needs.append((self.path if os.path.exists(self.path) else parent, False))
        for path, write in needs:
            why = cannot_reach(path, self.user, write)
            if why:
                raise RuntimeError(
                    "nginx's workers run as %s and cannot load %s: %s; run them "
                    "as a user that can (Gateway(user=...)), or put the checkout "
                    "where %s can read it" % (self.user, path, why, self.user))

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
