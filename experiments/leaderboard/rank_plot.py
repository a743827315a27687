#!/usr/bin/env python3
"""The leaderboard as a ranked table figure: one row per policy, one column per (trace, VRAM
budget), each cell coloured and labelled, rows ranked best first.

    rank_plot.py results/leaderboard-plot.csv --y decode_tok_s [--bound bound_tok_s]
        [--absolute] [--title ...] --out rank.png

Default: each cell is the policy's value as a percentage of the best policy of its column (100 =
that column's winner), rows ranked by the geometric mean of those percentages; --absolute shows
and ranks by the value itself (e.g. a hit rate in %), by its mean.  --bound COL adds a last row,
the bound of each column on the same scale (a policy can never exceed it).  Writes PNG + PDF in
the house style (scripts/strata_plot.py).  Run it through scripts/plot.sh --script.
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import strata_plot as sp  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--y", required=True, help="the measure (a column)")
    ap.add_argument("--bound", help="a column holding each run's bound of --y: drawn as the last row")
    ap.add_argument("--absolute", action="store_true", help="cells are the value itself, not %% of the best")
    ap.add_argument("--title", default="")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    rows = [r for r in csv.DictReader(open(a.csv)) if r.get("status", "ok") == "ok"]
    if not rows:
        sys.exit("rank_plot.py: %s: no rows" % a.csv)
    for k in ("trace", "policy", "vram_mib", a.y) + ((a.bound,) if a.bound else ()):
        if k not in rows[0]:
            sys.exit("rank_plot.py: %s: no column '%s'" % (a.csv, k))
    cols, policies, val, bound = [], [], {}, {}
    for r in rows:
        c = (r["trace"], float(r["vram_mib"]))
        if c not in cols:
            cols.append(c)
        if r["policy"] not in policies:
            policies.append(r["policy"])
        val[(r["policy"], c)] = float(r[a.y])
        if a.bound:
            bound[c] = float(r[a.bound])
    order = [t for t, _ in cols]
    cols.sort(key=lambda c: (order.index(c[0]), c[1]))
    best = {c: max(val.get((p, c), 0) for p in policies) for c in cols}

    def cell(p, c):
        v = val.get((p, c))
        if v is None:
            return None
        return v if a.absolute else (100.0 * v / best[c] if best[c] > 0 else 0.0)

    def score(p):
        xs = [cell(p, c) for c in cols if cell(p, c) is not None]
        if not xs:
            return -1
        if a.absolute:
            return sum(xs) / len(xs)
        return math.exp(sum(math.log(max(x, 1e-9)) for x in xs) / len(xs))

    ranked = sorted(policies, key=score, reverse=True)
    labels = ["%d. %s (%.0f)" % (i + 1, p, score(p)) for i, p in enumerate(ranked)]
    grid = [[cell(p, c) for c in cols] for p in ranked]
    if a.bound:
        labels.append("bound (%s)" % a.bound)
        grid.append([bound[c] if a.absolute else 100.0 * bound[c] / best[c] for c in cols])

    plt = sp.setup()
    n_r, n_c = len(grid), len(cols)
    fig, ax = plt.subplots(figsize=(sp.PAGE_IN, 0.8 + 0.17 * n_r))
    vmax = 100.0
    cmap = plt.get_cmap("viridis")
    for i, row in enumerate(grid):
        is_bound = a.bound and i == n_r - 1
        for j, v in enumerate(row):
            if v is None:
                continue
            face = "#e8e8e8" if is_bound else cmap(min(v, vmax) / vmax)
            ax.add_patch(plt.Rectangle((j, i), 1, 1, facecolor=face, edgecolor="white", lw=0.6))
            dark = not is_bound and min(v, vmax) / vmax < 0.6
            txt = "%.0f" % v if v < 1e4 else "%.0fk" % (v / 1e3)
            ax.text(j + 0.5, i + 0.5, txt, ha="center", va="center", fontsize=5.5,
                    color="white" if dark else "black")
    ax.set_xlim(0, n_c)
    ax.set_ylim(n_r, 0)
    ax.set_yticks([i + 0.5 for i in range(n_r)])
    ax.set_yticklabels(labels, fontsize=6)
    ax.set_xticks([j + 0.5 for j in range(n_c)])
    ax.set_xticklabels([("%gG" % (v / 1024)) if v >= 1024 else ("%gM" % v) if v >= 1 else ("%gK" % (v * 1024))
                        for _, v in cols], fontsize=6)
    ax.tick_params(length=0)
    ax.grid(False)
    for s in ax.spines.values():
        s.set_visible(False)
    # trace names over their budget columns, a gap line between traces
    starts = [j for j, c in enumerate(cols) if j == 0 or cols[j - 1][0] != c[0]]
    for k, j0 in enumerate(starts):
        j1 = starts[k + 1] if k + 1 < len(starts) else n_c
        ax.text((j0 + j1) / 2, -0.35, cols[j0][0], ha="center", va="bottom", fontsize=6.5)
        if j0:
            ax.axvline(j0, color="white", lw=2.5)
    ax.set_xlabel("VRAM budget per trace", fontsize=7)
    what = a.y if a.absolute else "%s, %% of the column's best" % a.y
    ax.set_title(sp.wrap(a.title or what, 2) + "\nrows ranked by the %s over every column (in brackets)%s"
                 % ("mean" if a.absolute else "geometric mean",
                    "; the last row: the bound, on the same scale" if a.bound else ""), pad=16, fontsize=7.5)
    fig.tight_layout()
    print("\n".join(sp.save(fig, a.out)))


if __name__ == "__main__":
    main()
