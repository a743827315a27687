#!/usr/bin/env python3
"""Summarize `strata replay/sim --move-log` timelines, side by side.

    movelog.py [--csv ROWS.csv] [--gaps N] LOG.csv [LOG.csv ...]

For each log, over the run (the first stall or computation to the last
computation's end; the preload before it is left out): per link, the time it
carried a move (the union of submitted..done), the bytes and the rate while
busy; the disk's idle time and what the engine did meanwhile (computing,
stalled on a move, compacting, its own work) and whether reads were waiting
in the engine's prefetch queue then; how late finished moves were collected;
the computation's host time against the device's.  --csv: the result rows of
the same runs (strata replay/sim --csv), in the same order, for tok/s.
--gaps N: each log's N longest disk idle gaps, with what the engine did in
them and when the next read was asked for.
Reads only the standard library."""
import argparse
import csv
import sys


def union(iv):
    """Merge intervals; return the sorted disjoint list."""
    out = []
    for a, b in sorted(iv):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def total(iv):
    return sum(b - a for a, b in iv)


def clip(iv, lo, hi):
    return [[max(a, lo), min(b, hi)] for a, b in iv if b > lo and a < hi]


def minus(iv, holes):
    """iv minus holes, both disjoint sorted lists."""
    out = []
    j = 0
    for a, b in iv:
        cur = a
        while j < len(holes) and holes[j][1] <= cur:
            j += 1
        k = j
        while k < len(holes) and holes[k][0] < b:
            if holes[k][0] > cur:
                out.append([cur, holes[k][0]])
            cur = max(cur, holes[k][1])
            k += 1
        if cur < b:
            out.append([cur, b])
    return out


def inter(x, y):
    """Intersection of two disjoint sorted lists."""
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append([a, b])
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def num(s):
    return float(s) if s not in ("", None) else None


def summarize(path):
    rows = list(csv.DictReader(open(path)))
    eng = [r for r in rows if r["link"] in ("engine", "hbm", "host")]
    moves = [r for r in rows if r["link"] not in ("engine", "hbm", "host")]
    spans = [r for r in eng if r["kind"] in ("stall", "compute")]
    # without a stall or a computation (a replay with --compute none that never
    # waited), the whole log
    lo = min(num(r["queued_ns"]) for r in (spans or rows))
    comp = [r for r in eng if r["kind"] == "compute"]
    hi = max(num(r["reaped_ns"]) for r in (comp or spans or rows))
    s = {"log": path, "run_ms": (hi - lo) / 1e6}
    done = [r for r in moves if r["status"] == "done" and num(r["done_ns"]) is not None]
    run_moves = [r for r in done if num(r["done_ns"]) > lo]
    for link, names in (("disk", ("nvme", "staged")), ("pcie", ("pcie", "staged"))):
        mv = [r for r in run_moves if r["link"] in names]
        busy = clip(union([(num(r["submitted_ns"]), num(r["done_ns"])) for r in mv]), lo, hi)
        b = sum(int(r["bytes"]) for r in mv if r["link"] == names[0] or link == "disk")
        s[f"{link}_busy_ms"] = total(busy) / 1e6
        s[f"{link}_GB"] = b / 1e9
        s[f"{link}_GBps_busy"] = b / total(busy) if total(busy) else 0
        s[f"{link}_moves"] = len(mv)
        if link == "disk":
            disk_busy = busy
            # mean reads in flight while busy
            ev = []
            for r in mv:
                ev += [(num(r["submitted_ns"]), 1), (num(r["done_ns"]), -1)]
            ev.sort()
            qd, last, area = 0, None, 0.0
            for t, d in ev:
                if last is not None and qd > 0:
                    a, c = max(last, lo), min(t, hi)
                    if c > a:
                        area += qd * (c - a)
                qd += d
                last = t
            s["disk_qd"] = area / total(busy) if total(busy) else 0
            # reads asked for but held in the engine (queued..handed) while the disk idled
            held = union([(num(r["queued_ns"]), num(r["handed_ns"])) for r in mv
                          if num(r["handed_ns"]) is not None])
    if hi <= lo:
        hi = lo + 1
    idle = minus([[lo, hi]], disk_busy)
    s["disk_idle_ms"] = total(idle) / 1e6
    for kind, link in (("compute", "engine"), ("stall", "engine"), ("slide", "hbm"), ("room", "hbm")):
        iv = union([(num(r["queued_ns"]), num(r["reaped_ns"])) for r in eng if r["kind"] == kind and r["link"] == link])
        s[f"{kind}_ms"] = total(clip(iv, lo, hi)) / 1e6
        s[f"idle_in_{kind}_ms"] = total(inter(idle, iv)) / 1e6
    s["idle_reads_held_ms"] = total(inter(idle, held)) / 1e6
    gpu = [num(r["done_ns"]) - num(r["queued_ns"]) for r in comp]
    s["compute_device_ms"] = sum(gpu) / 1e6
    # the launch call's own time (host: sorting, tables, the launches), inside the device time
    s["compute_launch_ms"] = sum(num(r["submitted_ns"]) - num(r["queued_ns"]) for r in comp) / 1e6
    s["compute_layers"] = len(comp)
    late = [num(r["reaped_ns"]) - num(r["done_ns"]) for r in run_moves]
    s["collect_late_ms_mean"] = sum(late) / len(late) / 1e6 if late else 0
    s["collect_late_ms_max"] = max(late) / 1e6 if late else 0
    s["cancelled"] = sum(r["status"] == "cancelled" for r in moves)
    s["moves"] = sum(1 for r in moves)
    # the idle gaps, longest first: the engine's spans in them, the next read asked
    reads = sorted((num(r["queued_ns"]), r["step"]) for r in moves if r["link"] in ("nvme", "staged"))
    gaps = []
    for a, b in sorted(idle, key=lambda g: g[0] - g[1]):
        doing = {}
        for r in eng:
            t0, t1 = num(r["queued_ns"]), num(r["reaped_ns"])
            o = min(b, t1) - max(a, t0)
            if o > 0:
                doing[r["kind"]] = doing.get(r["kind"], 0) + o
        nxt = next(((t, st) for t, st in reads if t >= a), None)
        gaps.append((a - lo, b - a, doing, nxt))
    s["_gaps"] = gaps
    s["_lo"] = lo
    return s, moves


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--csv", help="the runs' result rows (strata replay/sim --csv), one per log, same order")
    ap.add_argument("--gaps", type=int, default=0, help="list each log's N longest disk idle gaps")
    a = ap.parse_args()
    res = [summarize(p) for p in a.logs]
    sums = [x[0] for x in res]
    if a.csv:
        try:
            rr = list(csv.DictReader(open(a.csv)))
        except OSError as e:
            print(f"movelog.py: {a.csv}: {e}", file=sys.stderr)
            rr = []
        for s, r in zip(sums, rr):
            for k in ("mode", "decode_tok_s", "bound_tok_s", "compute_ms", "stall_ms", "bookkeeping_ms",
                      "compact_ms", "decode_nvme_busy_ms", "decode_pcie_busy_ms"):
                if k in r:
                    s["row_" + k] = r[k]
    keys = [k for k in dict.fromkeys(k for s in sums for k in s) if not k.startswith("_")]
    w = max(len(k) for k in keys)
    for k in keys:
        vals = []
        for s in sums:
            v = s.get(k, "")
            vals.append(f"{v:.3f}" if isinstance(v, float) else str(v).split("/")[-1])
        print(f"{k:<{w}}  " + "  ".join(f"{v:>14}" for v in vals))
    # the same moves in each log (decisions depend on state only)
    key = lambda m: sorted((r["link"], r["kind"], r["layer"], r["expert"], r["bytes"], r["step"]) for r in m)
    base = key(res[0][1])
    same = [key(m) == base for _, m in res[1:]]
    print(f"{'same_moves_as_first':<{w}}  " + "  ".join(f"{str(x):>14}" for x in [True] + same))
    for s in sums if a.gaps else []:
        print(f"\n{s['log']}: the {a.gaps} longest disk idle gaps (ms from the run's start)")
        for at, n, doing, nxt in s["_gaps"][:a.gaps]:
            what = ", ".join(f"{k} {v / 1e6:.2f}" for k, v in sorted(doing.items(), key=lambda x: -x[1]))
            other = n - sum(doing.values())
            ask = f"next read asked {(nxt[0] - at - s['_lo']) / 1e6:+.2f} ms (step {nxt[1]})" if nxt else "no read after"
            print(f"  at {at / 1e6:8.2f}: {n / 1e6:6.2f} ms idle; engine: {what or '-'}"
                  f"{f', own work {other / 1e6:.2f}' if other > 1e3 else ''}; {ask}")


if __name__ == "__main__":
    main()
