#!/usr/bin/env python3
"""Plot a Strata results CSV (one row per run) and write a markdown table.

    plot_results.py results.csv --x vram_gib --y hit_rate --hue evict \
        --out plot.png [--svg] [--table table.md] [--cols evict,vram_gib,hit_rate,decode_tok_s]
        [--logx] [--ref-hue belady --ref-style dashed] [--title ...]

Rows whose `status` column is not "ok" are left out of the plot and listed in
the table with their error.  Needs matplotlib (python3-matplotlib on Debian).
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
    ap.add_argument('--logx', action='store_true')
    ap.add_argument('--title', default='')
    ap.add_argument('--ref-hue', help='hue value drawn dashed (e.g. belady, the bound)')
    args = ap.parse_args(argv)

    with open(args.csv, newline='') as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f'{args.csv}: no rows', file=sys.stderr)
        return 1
    for flt in args.filter:
        k, _, v = flt.partition('=')
        rows = [r for r in rows if r.get(k) == v]
    ok = [r for r in rows if r.get('status', 'ok') == 'ok']
    failed = [r for r in rows if r.get('status', 'ok') != 'ok']
    ys = args.y.split(',')
    for col in [args.x] + ys + ([args.hue] if args.hue else []):
        if rows and col not in rows[0]:
            print(f'{args.csv}: no column {col!r} (have: {", ".join(rows[0].keys())})', file=sys.stderr)
            return 1

    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ys), figsize=(5.2 * len(ys), 3.8), squeeze=False)
    groups = {}
    for r in ok:
        groups.setdefault(r[args.hue] if args.hue else args.y, []).append(r)
    for ax, y in zip(axes[0], ys):
        for name, rs in sorted(groups.items()):
            pts = sorted((num(r[args.x]), num(r[y])) for r in rs if num(r[args.x]) is not None and num(r[y]) is not None)
            if not pts:
                continue
            style = '--' if args.ref_hue and name == args.ref_hue else '-'
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker='o', ms=3, label=str(name))
        ax.set_xlabel(args.x)
        ax.set_ylabel(y)
        if args.logx:
            ax.set_xscale('log')
        ax.grid(alpha=0.3)
        if args.hue:
            ax.legend(fontsize=7, title=args.hue, title_fontsize=7)
    if args.title:
        fig.suptitle(args.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    if args.svg:
        fig.savefig(args.out.rsplit('.', 1)[0] + '.svg')

    if args.table:
        cols = args.cols.split(',') if args.cols else [c for c in [args.hue, args.x] + ys if c]
        with open(args.table, 'w') as f:
            f.write('| ' + ' | '.join(cols) + ' |\n|' + '---|' * len(cols) + '\n')
            for r in ok:
                cells = []
                for c in cols:
                    v = r.get(c, '')
                    n = num(v)
                    cells.append(f'{n:.4g}' if n is not None and not v.isdigit() else v)
                f.write('| ' + ' | '.join(cells) + ' |\n')
            for r in failed:
                f.write(f"\nFailed: `{r.get('config', '?')}`: {r.get('error', r.get('status'))}\n")
    print(f'wrote {args.out}' + (f' and {args.table}' if args.table else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
