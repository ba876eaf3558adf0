"""Command line entry point: start the emulator for a test run.

    /usr/bin/python3 emulator/run.py [--mongos | --replset [--lag-ms N]
                                     [--election-timeout-ms N]]
                                     [--user NAME:PASSWORD:ROLE@DB]... [--tls] [--port N]
                                     [--ignore-stdin]

Prints exactly one line, ``mongodb://127.0.0.1:PORT/`` (with --replset the
seed list of the three members, ``mongodb://127.0.0.1:P1,127.0.0.1:P2,
127.0.0.1:P3/?replicaSet=rs0``; --port is then the first of three
consecutive ports), once it accepts connections, then serves until SIGTERM or SIGINT, or until its standard
input reaches end of file, so a test harness that dies (and so closes the
pipe) never leaves it running. ``--ignore-stdin`` serves on when stdin is
/dev/null, e.g. when started in the background by a shell script.
"""

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from emulator.auth import User  # noqa: E402
from emulator.replset import ReplicaSet  # noqa: E402
from emulator.server import Emulator  # noqa: E402
from emulator.tls import make_certificates, remove_keys  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description='MongoDB emulator for resv tests')
    parser.add_argument('--mongos', action='store_true', help='act as a mongos')
    parser.add_argument('--replset', action='store_true',
                        help='run a replica set of three members')
    parser.add_argument('--lag-ms', type=float, default=0,
                        help='replica set: replication lag of the secondaries')
    parser.add_argument('--election-timeout-ms', type=float, default=300,
                        help='replica set: time without a primary before an election')
    parser.add_argument('--user', action='append', default=[], metavar='NAME:PASSWORD:ROLE@DB',
                        help='a user (authentication is on once there is one); roles '
                        'separated by commas, e.g. app:s3cret:readWrite@resv')
    parser.add_argument('--tls', action='store_true',
                        help='listen with TLS, with a certificate made now by openssl in a '
                        'temporary directory; the URI then has tls=true&tlsCAFile=...')
    parser.add_argument('--port', type=int, default=0, help='port (0: any free port)')
    parser.add_argument('--ignore-stdin', action='store_true',
                        help='do not stop when stdin reaches end of file')
    parser.add_argument('--verbose', action='store_true', help='log internal errors')
    args = parser.parse_args(argv)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())

    users = [User.parse(text) for text in args.user]
    tls = None
    if args.tls:
        directory = tempfile.mkdtemp(prefix='resv-emulator-tls-')
        atexit.register(shutil.rmtree, directory, True)
        tls = make_certificates(directory)
    if args.replset:
        ports = [args.port + i for i in range(3)] if args.port else None
        emulator = ReplicaSet(lag_ms=args.lag_ms, election_timeout_ms=args.election_timeout_ms,
                              ports=ports, verbose=args.verbose, users=users,
                              tls=tls).start()
    else:
        emulator = Emulator(port=args.port, mongos=args.mongos, verbose=args.verbose,
                            users=users, tls=tls).start()
    if tls:
        remove_keys(os.path.dirname(tls[0]))  # loaded: only public files stay
    sys.stdout.write(emulator.uri + '\n')
    sys.stdout.flush()

    if not args.ignore_stdin:
        def watch_stdin():
            # os.read, not sys.stdin: a daemon thread blocked inside a
            # buffered reader aborts the interpreter at exit.
            try:
                while os.read(sys.stdin.fileno(), 65536):
                    pass
            except (OSError, ValueError):
                pass
            done.set()
        threading.Thread(target=watch_stdin, daemon=True).start()

    while not done.wait(0.5):
        pass
    emulator.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
