#!/usr/bin/env python3
"""Reads every rank's flight-recorder dump and names the rank that is behind,
stuck or diverged.

    tools/flight_analyze.py DIR [GROUP]   # DIR holds rank<R>.json (BRAID_FLIGHT_DIR)

GROUP (default "world") picks one communicator's dumps: a subgroup's are
rank<R>.<group>.json, its ranks numbered within the subgroup.

Each dump (collectives/flight_recorder.h) lists a rank's last collectives:
seq, op, count, dtype, reduce op, root, state and times. Findings, most
telling first:
  - diverged: ranks issued different collectives under the same sequence
    number (op, count, dtype, reduce op or root differ);
  - behind: a rank never issued the collectives the others reached;
  - stuck: collectives still running (or queued) when the rank dumped;
  - missing: ranks of the group with no dump (dead before any failure?).
Exit status 0 when it could read the dumps (whatever they say), 2 when not.
"""
import glob
import json
import os
import sys


def signature(e):
    root = f" root {e['root']}" if e["root"] >= 0 else ""
    return f"{e['op']} count {e['count']} {e['dtype']} {e['reduce_op']}{root}"


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    group = argv[2] if len(argv) == 3 else "world"
    paths = sorted(glob.glob(os.path.join(argv[1], "rank*.json")))
    if not paths:
        print(f"flight_analyze: no rank*.json in {argv[1]}", file=sys.stderr)
        return 2
    dumps = {}
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        if d.get("group", "world") == group:
            dumps[d["rank"]] = d
    if not dumps:
        print(f"flight_analyze: no dump of group {group} in {argv[1]}", file=sys.stderr)
        return 2
    size = max(d["size"] for d in dumps.values())
    # Collectives only: point-to-point calls carry seq 0.
    seqs = {r: {e["seq"]: e for e in d["entries"] if e["seq"] > 0} for r, d in dumps.items()}

    print(f"{len(dumps)} of {size} ranks dumped:")
    for r in sorted(dumps):
        entries = sorted(seqs[r].values(), key=lambda e: e["seq"])
        done = [e["seq"] for e in entries if e["state"] == "completed"]
        open_ = [e for e in entries if e["state"] in ("queued", "running", "failed")]
        last = f"last completed seq {done[-1]}" if done else "no completed collective"
        first_open = (f"; seq {open_[0]['seq']} {open_[0]['op']} {open_[0]['state']}" if open_ else "")
        print(f"  rank {r}: {last}{first_open} (dumped because: {dumps[r]['why'][:120]})")

    for note in sorted({d.get("note", "") for d in dumps.values()} - {""}):
        print(f"  straggler report: {note}")

    findings = []
    # Diverged: the same seq, different collectives.
    all_seqs = sorted(set().union(*[set(s) for s in seqs.values()]))
    for seq in all_seqs:
        issued = {r: signature(seqs[r][seq]) for r in seqs if seq in seqs[r]}
        if len(set(issued.values())) > 1:
            what = "; ".join(f"rank {r} issued {sig}" for r, sig in sorted(issued.items()))
            findings.append(f"diverged at seq {seq}: {what}")
    # Behind: highest seq issued per rank.
    highest = {r: max(s) if s else 0 for r, s in seqs.items()}
    top = max(highest.values())
    for r in sorted(highest):
        if highest[r] < top:
            ahead = [q for q in highest if highest[q] == top]
            nxt = next((seqs[q][highest[r] + 1] for q in ahead if highest[r] + 1 in seqs[q]), None)
            waiting = f" ({signature(nxt)})" if nxt else ""
            findings.append(
                f"rank {r} is behind: it issued collectives up to seq {highest[r]}; "
                f"rank(s) {', '.join(map(str, ahead))} reached seq {top} and wait for it at seq "
                f"{highest[r] + 1}{waiting}")
    # Stuck: still running or queued at the dump.
    for r in sorted(seqs):
        for e in sorted(seqs[r].values(), key=lambda e: e["seq"]):
            if e["state"] in ("running", "queued"):
                since = e["started_us"] or e["queued_us"]
                age = (dumps[r]["time_us"] - since) / 1e6 if since else 0
                findings.append(f"rank {r} is stuck in seq {e['seq']} {signature(e)} ({e['state']} for {age:.1f} s)")
                break
    missing = [r for r in range(size) if r not in dumps]
    if missing:
        findings.append(f"no dump from rank(s) {', '.join(map(str, missing))} (dead, or never failed: "
                        f"send them SIGUSR1 to dump)")
    print("findings:" if findings else "findings: none (every dumped rank agrees)")
    for f in findings:
        print(f"  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
