"""NBD requests that the command-line clients do not send, through libnbd's own binding.

Usage: /usr/bin/python3 requests.py URI

Writes a pattern over the start of the export, then:
- TRIM and WRITE_ZEROES (with and without NO_HOLE) at offsets and lengths that are not
  multiples of 4 KiB: inside one chunk, across chunk boundaries, across a 4 MiB data
  object's end, and over a range never written. Each range must read back as zeros and
  every byte around it as written.
- Requests carrying command flags the protocol does not define for them (an undefined
  bit on a read; NO_HOLE on a write): each must fail with EINVAL, the write must change
  nothing, and the connection must go on serving.
Prints one line per check; exits non-zero at the first failure.
"""

import errno
import random
import sys

import nbd

MIB = 1 << 20


def main(uri):
    h = nbd.NBD()
    # libnbd refuses undefined flags itself unless told to send them as they are.
    h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_FLAGS)
    h.connect_uri(uri)
    span = 6 * MIB
    assert h.get_size() >= span + 2 * MIB, "the export is too small for the checks"
    rng = random.Random(7)
    expected = bytearray(rng.randbytes(span))
    h.pwrite(bytes(expected), 0)

    def check(what):
        got = h.pread(span, 0)
        if got != bytes(expected):
            first = next(i for i in range(span) if got[i] != expected[i])
            sys.exit(f"FAIL {what}: byte {first} reads {got[first]}, expected {expected[first]}")
        print(f"ok   {what}")

    def zeroed(offset, count):
        expected[offset:offset + count] = bytes(count)

    check("the pattern reads back")
    cases = [
        ("trim of 1000 bytes at 512", "trim", 512, 1000, 0),
        ("trim across a chunk boundary (5000 bytes at 3000)", "trim", 3000, 5000, 0),
        ("write-zeroes inside one chunk (100 bytes at 9000)", "zero", 9000, 100, 0),
        ("write-zeroes of 3 chunks and a bit at 12345", "zero", 12345, 3 * 4096 + 77, 0),
        ("write-zeroes, no hole, 700 bytes at 40000", "zero", 40000, 700, nbd.CMD_FLAG_NO_HOLE),
        ("trim across a data object's end", "trim", 4 * MIB - 1000, 5000, 0),
        ("write-zeroes across a data object's end", "zero", 4 * MIB - 3333, 7777, 0),
        ("trim of one whole chunk plus 1 byte", "trim", 8192, 4097, 0),
    ]
    for what, kind, offset, count, flags in cases:
        if kind == "trim":
            h.trim(count, offset, flags)
        else:
            h.zero(count, offset, flags)
        zeroed(offset, count)
        check(what)

    never = span + MIB + 77
    h.zero(333, never)
    h.trim(4096 + 5, never + 1000)
    if h.pread(8192, never) != bytes(8192):
        sys.exit("FAIL zeros over a range never written do not read as zeros")
    print("ok   unaligned zeros over a range never written")

    def refused(what, call):
        try:
            call()
        except nbd.Error as e:
            if e.errnum != errno.EINVAL:
                sys.exit(f"FAIL {what}: {e}, expected EINVAL")
            print(f"ok   {what}: refused with EINVAL")
            return
        sys.exit(f"FAIL {what}: served")

    refused("a read with an undefined flag bit", lambda: h.pread(512, 0, 1 << 9))
    refused(
        "a write with NO_HOLE, a flag only WRITE_ZEROES takes",
        lambda: h.pwrite(b"\xff" * 512, 0, nbd.CMD_FLAG_NO_HOLE),
    )
    refused("a flush with REQ_ONE", lambda: h.flush(nbd.CMD_FLAG_REQ_ONE))
    check("the refused write changed nothing and the connection still serves")
    h.pwrite(b"\xee" * 512, 0, nbd.CMD_FLAG_FUA)
    expected[0:512] = b"\xee" * 512
    check("FUA on a write is accepted")
    h.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
