"""NBD over TLS through libnbd (Debian's python3-libnbd, GnuTLS underneath).

Usage: tls.py HOST:PORT EXPORT CERT_DIR WRONG_DIR MARKER_HEX REQUIRED(0|1)

Writes MARKER at offset 1 MiB over TLS and reads it back; checks that a client trusting
another authority is refused; and, if REQUIRED, that a client without TLS is refused, else
that it still reads the marker. Prints one "ok" line per check; raises on the first failure.
"""

import sys

import nbd

addr, export, certs, wrong, marker_hex, required = sys.argv[1:7]
marker = bytes.fromhex(marker_hex)
offset = 1 << 20


def ok(what):
    print(f"ok   {what}", flush=True)


def connect(tls, directory=None):
    h = nbd.NBD()
    h.set_tls(tls)
    if directory is not None:
        h.set_tls_certificates(directory)
    host, port = addr.rsplit(":", 1)
    h.set_export_name(export)
    h.connect_tcp(host, port)
    return h


h = connect(nbd.TLS_REQUIRE, certs)
if not h.get_tls_negotiated():
    raise AssertionError("TLS was not negotiated")
h.pwrite(marker, offset, nbd.CMD_FLAG_FUA)
if h.pread(len(marker), offset) != marker:
    raise AssertionError("the marker does not read back over TLS")
h.shutdown()
ok("written and read back over TLS")

try:
    connect(nbd.TLS_REQUIRE, wrong)
except nbd.Error as e:
    ok(f"a client trusting another authority is refused: {e}")
else:
    raise AssertionError("a client trusting another authority was served")

if required == "1":
    try:
        h = connect(nbd.TLS_DISABLE)
    except nbd.Error as e:
        ok(f"a client without TLS is refused: {e}")
    else:
        raise AssertionError("a client without TLS was served by a server that requires TLS")
else:
    h = connect(nbd.TLS_DISABLE)
    if h.pread(len(marker), offset) != marker:
        raise AssertionError("the marker does not read back without TLS")
    h.shutdown()
    ok("a client without TLS is served on loopback")
