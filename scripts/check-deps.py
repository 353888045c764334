#!/usr/bin/env python3
"""Keeps each crate's "must never depend on" rule (docs/architecture.md) true.

Reads `cargo metadata`, walks every crate's resolved dependencies (normal and build, not dev),
and fails naming the path from a crate to anything it must never reach. Most rules hold
transitively; the front ends' rule about the messenger holds for direct dependencies only,
since they reach the cluster through `client`, which is built on it.
"""
import json
import subprocess
import sys

# crate -> packages it must never reach. A front end must not see the messenger, the OSD or
# the store; the store must not see the network; map, keys, metrics, ec and select stay
# free of IO runtimes; the binary never reaches the simulator.
NEVER = {
    "coffer-metrics": ["tokio", "coffer-map", "coffer-keys", "coffer-store", "coffer-messenger"],
    "coffer-map": ["tokio", "coffer-keys", "coffer-store", "redb"],
    "coffer-ec": ["tokio", "coffer-map", "coffer-keys", "coffer-store", "coffer-messenger"],
    "coffer-select": ["tokio", "coffer-map", "coffer-keys", "coffer-store", "coffer-messenger"],
    "coffer-keys": ["tokio", "coffer-map", "coffer-store", "redb"],
    "coffer-store": ["tokio", "coffer-messenger", "coffer-osd", "coffer-mon", "coffer-client"],
    "coffer-messenger": ["coffer-store", "coffer-osd", "coffer-mon"],
    "coffer-mon": ["coffer-store", "coffer-osd", "coffer-client"],
    "coffer-osd": ["coffer-mon", "coffer-client"],
    "coffer-client": ["coffer-osd", "coffer-store", "coffer-mon"],
    "coffer-block": ["coffer-osd", "coffer-store", "coffer-mon"],
    "coffer-gateway": ["coffer-osd", "coffer-store", "coffer-mon"],
    "coffer-fs": ["coffer-osd", "coffer-store", "coffer-mon", "coffer-mds"],
    "coffer-mds": ["coffer-osd", "coffer-store", "coffer-mon"],
    # The simulator is for tests: nothing shipped may be built on it.
    "coffer": ["coffer-sim"],
}
# crate -> packages it must never name as a direct dependency.
NEVER_DIRECT = {
    "coffer-block": ["coffer-messenger"],
    "coffer-gateway": ["coffer-messenger"],
    "coffer-fs": ["coffer-messenger"],
}

meta = json.loads(subprocess.check_output(["cargo", "metadata", "--format-version", "1", "--locked"]))
names = {p["id"]: p["name"] for p in meta["packages"]}
graph = {}
for node in meta["resolve"]["nodes"]:
    graph[node["id"]] = [
        d["pkg"] for d in node["deps"] if any(k["kind"] in (None, "build") for k in d["dep_kinds"])
    ]

failures = []
checked = 0
for pkg_id in meta["workspace_members"]:
    crate = names[pkg_id]
    for dep in graph.get(pkg_id, []):
        if names[dep] in NEVER_DIRECT.get(crate, []):
            failures.append(f"{crate} -> {names[dep]} (direct)")
    banned = set(NEVER.get(crate, []))
    if not banned:
        continue
    checked += 1
    seen = {pkg_id: [crate]}
    stack = [pkg_id]
    while stack:
        current = stack.pop()
        for dep in graph.get(current, []):
            if dep in seen:
                continue
            seen[dep] = seen[current] + [names[dep]]
            if names[dep] in banned:
                failures.append(" -> ".join(seen[dep]))
            stack.append(dep)

if failures:
    print("dependency rules broken (see docs/architecture.md):")
    for path in failures:
        print("  " + path)
    sys.exit(1)
print(f"dependency rules hold for {checked} crates")
