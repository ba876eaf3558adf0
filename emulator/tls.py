"""TLS for the emulator: a certificate made at run time, and the server
side of the handshake.

make_certificates(directory) runs the ``openssl`` command line to make a
throw-away certificate authority and a server certificate signed by it for
``127.0.0.1`` and ``localhost`` (subjectAltName, as drivers check the host
name), valid one day; keys never leave that directory, which the caller
removes. A client trusts the server with ``tls=true&tlsCAFile=<ca.pem>``.
"""

import os
import ssl
import subprocess


def make_certificates(directory):
    """Write ca.pem, server.pem and server.key into directory; returns
    (ca, certificate, key) paths."""
    ca_key, ca = os.path.join(directory, 'ca.key'), os.path.join(directory, 'ca.pem')
    key, csr = os.path.join(directory, 'server.key'), os.path.join(directory, 'server.csr')
    cert, ext = os.path.join(directory, 'server.pem'), os.path.join(directory, 'server.ext')

    def openssl(*args):
        subprocess.run(('openssl',) + args, check=True, capture_output=True)

    openssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', ca_key, '-out', ca,
            '-days', '1', '-subj', '/CN=resv emulator test CA')
    openssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr,
            '-subj', '/CN=localhost')
    with open(ext, 'w') as out:
        out.write('subjectAltName = IP:127.0.0.1, DNS:localhost\n'
                  'extendedKeyUsage = serverAuth\n')
    openssl('x509', '-req', '-in', csr, '-CA', ca, '-CAkey', ca_key, '-CAcreateserial',
            '-out', cert, '-days', '1', '-extfile', ext)
    return ca, cert, key


def remove_keys(directory):
    """Delete all but ca.pem and server.pem once the server has loaded its
    key: what stays behind after a crash is public."""
    for name in ('ca.key', 'server.key', 'server.csr', 'server.ext', 'ca.srl'):
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass


def server_context(certificate, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certificate, key)
    return context
