#!/usr/bin/env python3
"""Splits a profile by the chunks of `fio_ab` (crates/tidepool-lab/examples/fio_ab.rs).

    FIO_AB_TIMELINE=1 perf record -k CLOCK_MONOTONIC -e cpu-clock -o ab.data \\
        target/release/examples/fio_ab qemu-2024 tidepool 2> ab.timeline
    perf script -i ab.data -F time,ip,sym | bin/perf-by-chunk.py ab.timeline [TOP]

Reads the timeline (`chunk POLICY START END` lines, CLOCK_MONOTONIC seconds)
and `perf script` output on standard input; counts each sample in the chunk
it fell in, by policy and symbol; prints the TOP symbols (default 20) whose
counts differ most between the two policies, with each policy's total. Both
policies run the same requests per chunk, so counts compare directly.
"""
import bisect
import collections
import re
import sys


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    chunks = []  # (start, end, policy)
    for line in open(sys.argv[1]):
        f = line.split()
        if len(f) == 4 and f[0] == "chunk":
            chunks.append((float(f[2]), float(f[3]), f[1]))
    if not chunks:
        sys.exit(f"no `chunk` lines in {sys.argv[1]} (was FIO_AB_TIMELINE=1 set?)")
    chunks.sort()
    starts = [c[0] for c in chunks]
    policies = list(dict.fromkeys(c[2] for c in chunks))
    counts = {p: collections.Counter() for p in policies}
    sample = re.compile(r"\s*([0-9.]+):\s+[0-9a-f]+\s+(.*)")
    for line in sys.stdin:
        m = sample.match(line)
        if not m:
            continue
        t = float(m.group(1))
        i = bisect.bisect_right(starts, t) - 1
        if i < 0 or t > chunks[i][1]:
            continue
        sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(2).strip()) or "[unknown]"
        counts[chunks[i][2]][sym] += 1
    if len(policies) != 2:
        sys.exit(f"expected two policies in the timeline, found {policies}")
    a, b = policies
    ta, tb = sum(counts[a].values()), sum(counts[b].values())
    print(f"samples: {a} {ta}, {b} {tb} ({b} / {a} = {tb / max(ta, 1):.3f})")
    print(f"{a:>12} {b:>12} {'diff':>8}  symbol")
    keys = set(counts[a]) | set(counts[b])
    for k in sorted(keys, key=lambda k: -abs(counts[b][k] - counts[a][k]))[:top]:
        print(f"{counts[a][k]:>12} {counts[b][k]:>12} {counts[b][k] - counts[a][k]:>+8}  {k[:100]}")


if __name__ == "__main__":
    main()
