"""The gateway from a checkout only its owner can enter: a clone of this
repository under a fresh 0700 directory (as a home directory is on Debian
12, and /root everywhere). Run by `make test-nginx`, or:

    scripts/with-mongo /usr/bin/python3 examples/openresty/test/test_private_clone.py

In the clone it runs a few of the nginx tests (test_gateway.py: the memory
store, the file store with four workers, MongoDB when RESV_TEST_URI is
set) and the demo on the file store, each of which needs nginx's workers
to read the clone's Lua modules and libresv.so and to write the file store
there. Run as root, it also asks for workers running as nobody, which
cannot enter the directory: start() must refuse, naming nobody and the
directory; and loads resv as nobody from a readable copy of the Lua files
with libresv.so left in the clone: the error must say that it cannot read
libresv.so, and why. The clone is of the committed HEAD; the library is the one
built here (RESV_BUILD), copied into the clone's build folder.
"""

import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
PYTHON = '/usr/bin/python3'
TESTS = ['MemoryStore.test_one_of_concurrent_signups_for_one_email_wins',
         'FileStore.test_four_workers_give_exactly_one_winner']
if os.environ.get('RESV_TEST_URI'):
    TESTS.append('OnMongo.test_one_of_concurrent_signups_for_one_email_wins')

# Asks the clone's gateway for workers running as nobody.
AS_NOBODY = '''
import sys
sys.path.insert(0, sys.argv[1])
from gateway import Gateway
try:
    Gateway(user='nobody').start().stop()
except RuntimeError as e:
    print(e)
    sys.exit(0)
print('nginx started with workers that cannot enter the checkout')
sys.exit(1)
'''


def nobody_loads_resv(clone, env):
    """As nobody: the clone's Lua files copied where anyone may read them,
    libresv.so still in the clone. resv must say it cannot read it."""
    readable = tempfile.mkdtemp(prefix='resv-private-lua-')
    try:
        os.chmod(readable, 0o755)
        shutil.copytree(os.path.join(clone, 'lua'), os.path.join(readable, 'lua'))
        for root, dirs, files in os.walk(readable):
            for name in dirs + files:
                os.chmod(os.path.join(root, name), 0o755)
        lua = os.path.join(readable, 'lua')
        env = dict(env, LUA_PATH='%s/?.lua;%s/?/init.lua;;' % (lua, lua),
                   LUA_CPATH=os.path.join(clone, 'build', '?.so') + ';;')
        return run('resv as nobody names what it cannot read',
                   ['runuser', '-u', 'nobody', '--', 'luajit', '-e', 'require "resv"'],
                   '/', env)
    finally:
        shutil.rmtree(readable, ignore_errors=True)


def run(what, argv, cwd, env):
    print('test_private_clone: %s' % what, flush=True)
    proc = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout


def main():
    build = os.environ.get('RESV_BUILD', 'build')
    lib = os.path.join(REPO, build, 'libresv.so')
    if not os.path.exists(lib):
        print('test_private_clone: %s is missing: run make first' % lib)
        return 1
    top = tempfile.mkdtemp(prefix='resv-private-')
    failed = []
    try:
        os.chmod(top, 0o700)
        clone = os.path.join(top, 'resv')
        subprocess.run(['git', 'clone', '-q', REPO, clone], check=True)
        os.makedirs(os.path.join(clone, 'build'))
        shutil.copy(lib, os.path.join(clone, 'build', 'libresv.so'))
        env = dict(os.environ, RESV_BUILD='build')
        status, out = run('the nginx tests in %s (0700)' % top,
                          [PYTHON, 'examples/openresty/test/test_gateway.py'] + TESTS,
                          clone, env)
        if status != 0:
            failed.append(('the nginx tests', out))
        status, out = run('make demo\'s gateway on the file store',
                          [PYTHON, 'examples/openresty/demo.py', '--uri', ''], clone, env)
        if status != 0 or 'OK: one winner per value' not in out:
            failed.append(('the demo', out))
        if os.geteuid() == 0:
            status, out = run('workers as nobody are refused, naming the cause',
                              [PYTHON, '-c', AS_NOBODY,
                               os.path.join(clone, 'examples', 'openresty')], clone, env)
            if status != 0 or 'nobody cannot enter %s' % top not in out:
                failed.append(('workers as nobody', out))
            status, out = nobody_loads_resv(clone, env)
            if 'resv: cannot read libresv: %s' % clone not in out or \
                    'Permission denied' not in out:
                failed.append(('resv as nobody', out))
    finally:
        shutil.rmtree(top, ignore_errors=True)
    for what, out in failed:
        print('test_private_clone: %s failed:\n%s' % (what, out[-6000:]))
    print('test_private_clone: %s' % ('%d failed' % len(failed) if failed else 'ok'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
