#!/usr/bin/env python3
"""Plot a Strata results CSV (one row per run) and write a markdown table.

    plot_results.py results.csv --x vram_mib --y hit_rate_vram,decode_tok_s --hue evict \\
        --out plot.png [--svg] [--table table.md] [--cols evict,vram_mib,hit_rate_vram]
        [--filter ram_mib=256] [--logx] [--logy decode_tok_s] [--ref-hue farthest] [--kind line|bar]
        [--hline decode_tok_s=10.8:published] [--label split] [--xlabel ...] [--ylabel a,b] [--title ...]

One panel per --y column; one line (or bar group) per distinct --hue value.
--kind bar treats x as categories, in the CSV's row order.  --hline COL=VALUE[:LABEL]
draws a horizontal reference line on COL's panel (repeatable).  Rows whose
`status` column is not "ok" are left out of the plot and listed under the
table with their error.  Needs matplotlib: run it through scripts/plot.sh,
which picks an interpreter that has it.
"""
import argparse
import csv
import math
import sys


def num(v):
    try:
        f = float(v)
        return f if math.isfinite(f) else None
    except (TypeError, ValueError):
        return None


def fmt_cell(v):
    n = num(v)
    if n is None or v.strip().lstrip('-').isdigit():
        return v
    return f'{n:.4g}'


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('csv')
    ap.add_argument('--x', required=True)
    ap.add_argument('--y', required=True, help='column, or several joined by commas (one panel each)')
    ap.add_argument('--hue', help='one line per distinct value of this column')
    ap.add_argument('--filter', action='append', default=[], help='col=value, keep matching rows only')
    ap.add_argument('--out', required=True, help='PNG path (an SVG is written beside it with --svg)')
    ap.add_argument('--svg', action='store_true')
    ap.add_argument('--table', help='write a markdown table here')
    ap.add_argument('--cols', help='columns of the markdown table (default: hue,x,y)')
    ap.add_argument('--kind', choices=['line', 'bar'], default='line')
    ap.add_argument('--logx', action='store_true')
    ap.add_argument('--logy', default='', help='columns (comma-separated) whose panel gets a log y axis')
    ap.add_argument('--xlabel')
    ap.add_argument('--ylabel', help='labels of the panels, comma-separated (default: the columns)')
    ap.add_argument('--title', default='')
    ap.add_argument('--ref-hue', action='append', default=[], help='hue value drawn dashed (e.g. farthest, a bound)')
    ap.add_argument('--hline', action='append', default=[], help='COL=VALUE[:LABEL], a reference line on COL\'s panel')
    ap.add_argument('--label', help='line plots: annotate each point with this column')
    ap.add_argument('--dpi', type=int, default=100)
    args = ap.parse_args(argv)

    try:
        with open(args.csv, newline='') as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f'{args.csv}: {e.strerror}', file=sys.stderr)
        return 1
    if not rows:
        print(f'{args.csv}: no rows', file=sys.stderr)
        return 1
    ys = args.y.split(',')
    need = [args.x] + ys + ([args.hue] if args.hue else []) + [f.partition('=')[0] for f in args.filter]
    for col in need:
        if col not in rows[0]:
            print(f'{args.csv}: no column {col!r} (have: {", ".join(rows[0].keys())})', file=sys.stderr)
            return 1
    for flt in args.filter:
        k, _, v = flt.partition('=')
        rows = [r for r in rows if r.get(k) == v or (num(r.get(k)) is not None and num(v) is not None
                                                     and num(r.get(k)) == num(v))]
    ok = [r for r in rows if r.get('status', 'ok') == 'ok']
    failed = [r for r in rows if r.get('status', 'ok') != 'ok']
    if not ok:
        print(f'{args.csv}: no ok rows to plot (after filters: {len(rows)} rows, {len(failed)} failed)', file=sys.stderr)
        return 1
    hlines = []
    for h in args.hline:
        col, _, rest = h.partition('=')
        val, _, label = rest.partition(':')
        if col not in ys or num(val) is None:
            print(f'--hline {h!r}: want COL=VALUE[:LABEL] with COL one of --y', file=sys.stderr)
            return 2
        hlines.append((col, num(val), label))
    ylabels = args.ylabel.split(',') if args.ylabel else ys
    if len(ylabels) != len(ys):
        print('--ylabel: give one label per --y column', file=sys.stderr)
        return 2

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ys), figsize=(max(6.4, 4.8 * len(ys)), 3.6), squeeze=False)
    groups = {}
    order = []
    for r in ok:
        key = r[args.hue] if args.hue else ''
        if key not in groups:
            order.append(key)
        groups.setdefault(key, []).append(r)
    xcats = []
    for r in ok:
        if r[args.x] not in xcats:
            xcats.append(r[args.x])
    for ax, y, ylab in zip(axes[0], ys, ylabels):
        for gi, name in enumerate(order):
            rs = groups[name]
            dashed = name in args.ref_hue
            if args.kind == 'bar':
                width = 0.8 / max(1, len(order))
                xs, hs = [], []
                for r in rs:
                    if num(r[y]) is not None:
                        xs.append(xcats.index(r[args.x]) - 0.4 + width * (gi + 0.5))
                        hs.append(num(r[y]))
                ax.bar(xs, hs, width, label=str(name) if args.hue else None,
                       hatch='//' if dashed else None)
            else:
                pts = sorted((num(r[args.x]), num(r[y]), r.get(args.label, '') if args.label else '') for r in rs
                             if num(r[args.x]) is not None and num(r[y]) is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], '--' if dashed else '-', marker='o', ms=3,
                            label=str(name) if args.hue else None)
                    for px, py, lab in pts:
                        if lab:
                            ax.annotate(lab, (px, py), textcoords='offset points', xytext=(3, -9), fontsize=6)
        for col, val, label in hlines:
            if col == y:
                ax.axhline(val, color='k', ls=':', lw=1)
                if label:
                    ax.annotate(label, (0.01, val), xycoords=('axes fraction', 'data'), fontsize=7,
                                va='bottom')
        if args.kind == 'bar':
            ax.set_xticks(range(len(xcats)))
            long = max(len(c) for c in xcats) > 6
            ax.set_xticklabels(xcats, fontsize=7, rotation=30 if long else 0, ha='right' if long else 'center')
        ax.set_xlabel(args.x if args.xlabel is None else args.xlabel)
        ax.set_ylabel(ylab)
        if args.logx and args.kind == 'line':
            ax.set_xscale('log', base=2)
            xv = sorted({num(r[args.x]) for r in ok if num(r[args.x]) is not None})
            ax.set_xticks(xv)
            ax.set_xticklabels([f'{v:g}' for v in xv], fontsize=7)
            ax.minorticks_off()
        elif args.kind == 'line':
            xv = sorted({num(r[args.x]) for r in ok if num(r[args.x]) is not None})
            if len(xv) <= 12 and all(v == int(v) for v in xv):
                ax.set_xticks(xv)
        if y in args.logy.split(','):
            ax.set_yscale('log')
        ax.grid(alpha=0.3)
        if args.hue:
            ax.legend(fontsize=6, title=args.hue, title_fontsize=6)
    if args.title:
        fig.suptitle(args.title, fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=args.dpi)
    if args.svg:
        fig.savefig(args.out.rsplit('.', 1)[0] + '.svg')

    if args.table:
        cols = args.cols.split(',') if args.cols else [c for c in [args.hue, args.x] + ys if c]
        with open(args.table, 'w') as f:
            f.write('| ' + ' | '.join(cols) + ' |\n|' + '---|' * len(cols) + '\n')
            for r in ok:
                f.write('| ' + ' | '.join(fmt_cell(r.get(c, '')) for c in cols) + ' |\n')
            for r in failed:
                f.write(f"\nFailed: `{r.get('run_id', r.get('config', '?'))}`: {r.get('error') or r.get('status')}\n")
    print(f'wrote {args.out}' + (f' and {args.table}' if args.table else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
