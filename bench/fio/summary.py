#!/usr/bin/env python3
"""Prints fio's JSON report of bench/fio/image.fio in the columns of `coffer bench image`:
job, IOPS, MiB/s, mean, p50 and p99 latency. Usage: summary.py fio.json"""
import json
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], encoding="utf-8") as f:
        report = json.load(f)
    print(f"{'job':<20} {'IOPS':>9} {'MiB/s':>9} {'mean us':>9} {'p50 us':>9} {'p99 us':>9}")
    for job in report["jobs"]:
        if job["jobname"] == "prefill":
            continue
        side = job["write"] if job["write"]["io_bytes"] > 0 else job["read"]
        clat = side["clat_ns"]
        pct = clat.get("percentile", {})
        print(
            f"{job['jobname']:<20} {side['iops']:>9.0f} {side['bw_bytes'] / 2**20:>9.1f} "
            f"{clat['mean'] / 1000:>9.0f} {pct.get('50.000000', 0) / 1000:>9.0f} "
            f"{pct.get('99.000000', 0) / 1000:>9.0f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
