#!/usr/bin/env python3
"""Plot a Strata results CSV (one row per run) and write a markdown table.

    plot_results.py results.csv --x vram_mib --y hit_rate_vram,decode_tok_s --hue evict \\
        --out plot.png [--table table.md] [--cols evict,vram_mib,hit_rate_vram]
        [--filter ram_mib=256] [--logx] [--logy decode_tok_s] [--ref-hue farthest] [--kind line|bar]
        [--hline decode_tok_s=10.8:published] [--bound hit_vram_pct=bound_hit_vram_pct]
        [--seed seed] [--label split] [--ylim decode_tok_s=runs] [--xlabel ...] [--ylabel a,b] [--title ...]

One panel per --y column; one line (or bar group) per distinct --hue value.
The figure is written as PNG (200 dpi) and PDF beside it, sized for a paper
(one column for one panel, the page width for more; scripts/strata_plot.py is
the style).  --kind bar treats x as categories in the CSV's row order; --x
a,b joins several columns into one category label (one per line).

Several rows per (hue, x) point, e.g. one per seed (--seed names the column,
default `seed` when the CSV has it), are drawn as the mean with a min-max band
(lines) or error bars (bars); the legend says how many.  A column
`bound_<y>` (or --bound Y=COL[:LABEL]) is drawn as the bound of panel y,
black and dashed; --ref-hue VALUE draws that series (e.g. belady) the same
way.  --hline COL=VALUE[:LABEL] draws a horizontal reference line on COL's
panel (repeatable).  --ylim COL=LO:HI fixes COL's y range (either end may
be left out); COL=runs fits it to the runs, leaving out the bounds, for a
bound far above them (it would squeeze the runs' lines): a series cut off
at the top is named in a note "above: ..." with its values.  Rows whose `status` column is not "ok" are left out of
the plot and listed under the table with their error.  Needs matplotlib: run
it through scripts/plot.sh, which picks an interpreter that has it.
"""
import argparse
import csv
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_plot as sp  # noqa: E402  (the house style, beside this script)


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


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('csv')
    ap.add_argument('--x', required=True, help='column (bars: several joined by commas make one label)')
    ap.add_argument('--y', required=True, help='column, or several joined by commas (one panel each)')
    ap.add_argument('--hue', help='one line per distinct value of this column')
    ap.add_argument('--hue-title', help='legend title (default: the --hue column)')
    ap.add_argument('--filter', action='append', default=[], help='col=value, keep matching rows only')
    ap.add_argument('--out', required=True, help='PNG path; the PDF is written beside it')
    ap.add_argument('--svg', action='store_true', help='also an SVG')
    ap.add_argument('--table', help='write a markdown table here')
    ap.add_argument('--cols', help='columns of the markdown table (default: hue,x,y)')
    ap.add_argument('--kind', choices=['line', 'bar'], default='line')
    ap.add_argument('--logx', action='store_true')
    ap.add_argument('--logy', default='', help='columns (comma-separated) whose panel gets a log y axis')
    ap.add_argument('--xlabel')
    ap.add_argument('--ylabel', help='labels of the panels, comma-separated (default: the columns)')
    ap.add_argument('--title', default='')
    ap.add_argument('--ref-hue', action='append', default=[], help='hue value drawn as the bound (e.g. belady)')
    ap.add_argument('--hline', action='append', default=[], help='COL=VALUE[:LABEL], a reference line on COL\'s panel')
    ap.add_argument('--bound', action='append', default=[],
                    help='Y=COL[:LABEL]: column COL is the bound of panel Y (default: bound_<Y> when present)')
    ap.add_argument('--seed', default=None, help='column telling repeated runs apart (default: seed, if present)')
    ap.add_argument('--label', help='line plots: annotate each point with this column')
    ap.add_argument('--ylim', action='append', default=[],
                    help='COL=LO:HI (an end may be empty) or COL=runs: the y range of COL\'s panel; runs: fit the '
                         'runs, not the bounds (a series above is named in a note)')
    ap.add_argument('--dpi', type=int, default=200)
    return ap.parse_args(argv)


def load(args):
    try:
        with open(args.csv, newline='') as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise SystemExit(f'{args.csv}: {e.strerror}')
    if not rows:
        raise SystemExit(f'{args.csv}: no rows')
    xs = args.x.split(',')
    if len(xs) > 1 and args.kind != 'bar':
        raise SystemExit('--x with several columns needs --kind bar')
    need = xs + args.y.split(',') + ([args.hue] if args.hue else []) + [f.partition('=')[0] for f in args.filter]
    for col in need:
        if col not in rows[0]:
            raise SystemExit(f'{args.csv}: no column {col!r} (have: {", ".join(rows[0].keys())})')
    for flt in args.filter:
        k, _, v = flt.partition('=')
        rows = [r for r in rows if r.get(k) == v or (num(r.get(k)) is not None and num(v) is not None
                                                     and num(r.get(k)) == num(v))]
    for r in rows:
        r['_x'] = '\n'.join(sp.stack_label(r[c]) for c in xs) if len(xs) > 1 else r[xs[0]]
    return rows


def main(argv=None):
    args = parse_args(argv)
    try:
        rows = load(args)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 1
    ys = args.y.split(',')
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
    bounds = {}
    for b in args.bound:
        y, _, rest = b.partition('=')
        col, _, label = rest.partition(':')
        if y not in ys or col not in ok[0]:
            print(f'--bound {b!r}: want Y=COL[:LABEL] with Y one of --y and COL a column', file=sys.stderr)
            return 2
        bounds[y] = (col, label or 'bound')
    for y in ys:
        if y not in bounds and f'bound_{y}' in ok[0]:
            bounds[y] = (f'bound_{y}', 'bound')
    ylabels = args.ylabel.split(',') if args.ylabel else ys
    if len(ylabels) != len(ys):
        print('--ylabel: give one label per --y column', file=sys.stderr)
        return 2
    ylims = {}
    for yl in args.ylim:
        col, _, rng = yl.partition('=')
        lo, sep, hi = rng.partition(':')
        if col not in ys or not (rng == 'runs' or (sep and all(v == '' or num(v) is not None for v in (lo, hi)))):
            print(f'--ylim {yl!r}: want COL=LO:HI or COL=runs with COL one of --y', file=sys.stderr)
            return 2
        ylims[col] = 'runs' if rng == 'runs' else (num(lo), num(hi))
    seed_col = args.seed if args.seed else ('seed' if 'seed' in ok[0] else None)
    if seed_col and seed_col not in ok[0]:
        print(f'--seed {seed_col!r}: no such column', file=sys.stderr)
        return 2

    plt = sp.setup()
    fig, axes = sp.figure(plt, len(ys))
    # series in first-seen order; points grouped by (series, x)
    order, groups = [], {}
    for r in ok:
        key = r[args.hue] if args.hue else ''
        if key not in groups:
            order.append(key)
            groups[key] = {}
        groups[key].setdefault(r['_x'], []).append(r)
    xcats = []
    for r in ok:
        if r['_x'] not in xcats:
            xcats.append(r['_x'])
    reps = max(len(v) for g in groups.values() for v in g.values())
    nseeds = len({r[seed_col] for r in ok}) if seed_col else reps
    if reps > 1 and not seed_col:
        print(f'{args.csv}: up to {reps} rows share a (hue, x) point and there is no seed column: plotting '
              f'their mean and min-max range', file=sys.stderr)
    spread_note = (f' (mean of {nseeds} seeds, {"bars" if args.kind == "bar" else "band"}: min-max)'
                   if reps > 1 else '')

    for ax, y, ylab in zip(axes, ys, ylabels):
        drawn = []   # (name, points) of this panel's lines, to spot a series hidden under another
        run_ys, bound_lines = [], []   # for --ylim: the runs' values (bands included), the bounds' (label, values)
        labels = {}  # --label: (text, x) -> (y, colour)
        for gi, name in enumerate(order):
            is_bound = name in args.ref_hue
            lab = (f'{name} (bound)' if is_bound and 'bound' not in str(name) else str(name)) if args.hue else None
            pts = []
            for xc, rs in groups[name].items():
                vals = [num(r[y]) for r in rs if num(r[y]) is not None]
                if vals:
                    pts.append((xc, sp.spread(vals), rs[0].get(args.label, '') if args.label else ''))
            if args.kind == 'bar':
                width = 0.8 / max(1, len(order))
                bx = [xcats.index(p[0]) - 0.4 + width * (gi + 0.5) for p in pts]
                means = [p[1][0] for p in pts]
                err = [[max(0.0, p[1][0] - p[1][1]) for p in pts], [max(0.0, p[1][2] - p[1][0]) for p in pts]]
                ax.bar(bx, means, width, label=lab, yerr=err if reps > 1 else None, capsize=2,
                       **sp.bar_style(gi, name, is_bound))
                if y in bounds:   # each bar's own bound, a dashed cap over it
                    col, blab = bounds[y]
                    for x0, p in zip(bx, pts):
                        bv = [num(r.get(col)) for r in groups[name][p[0]] if num(r.get(col)) is not None]
                        if bv:
                            ax.hlines(max(bv), x0 - width / 2, x0 + width / 2, colors=sp.BOUND_COLOR,
                                      linestyles='--', lw=1.1, label=blab, zorder=6)
                continue
            pts = sorted((num(p[0]), p[1], p[2]) for p in pts if num(p[0]) is not None)
            if not pts:
                continue
            px = [p[0] for p in pts]
            st = sp.series_style(gi, name, is_bound)
            # "bound X" beside a series "X" (one bound per accuracy, say): its colour, dashed
            twin = next((i for i, o in enumerate(order) if is_bound and str(name) in (f'bound {o}', f'{o} bound')),
                        None)
            if twin is not None:
                st['color'] = sp.series_style(twin, order[twin])['color']
            under = next((n for n, q in drawn if sp.same_points(q, pts)), None)
            if under is not None and not is_bound:   # it would hide exactly under `under`: draw it hollow
                st = sp.series_style(gi, f'{name}.lua', False)
                st['color'] = sp.series_style(gi, name)['color']
            elif under is not None:                  # a bound on another bound: dotted, other marker
                st.update(ls=':', marker='+', ms=8, lw=1.6)
            drawn.append((name, pts))
            line, = ax.plot(px, [p[1][0] for p in pts], label=lab, **st)
            if is_bound:
                bound_lines.append((lab or str(name), [p[1][0] for p in pts], line))
            else:
                run_ys += [v for p in pts for v in (p[1][1], p[1][2])]
            if reps > 1:
                ax.fill_between(px, [p[1][1] for p in pts], [p[1][2] for p in pts], color=st['color'], alpha=0.15,
                                lw=0, zorder=1)
            for qx, q, text in pts:
                if text:  # one label per (text, x): the lowest point, drawn after every series
                    key = (text, qx)
                    if key not in labels or q[0] < labels[key][0]:
                        labels[key] = (q[0], st['color'])
        prev = None
        for i, ((text, qx), (qy, color)) in enumerate(sorted(labels.items(), key=lambda kv: kv[0][1])):
            # below-right; a label close to the previous one goes below-left instead
            near = prev is not None and abs(qx - prev) < 0.04 * (max(k[1] for k in labels) - min(k[1] for k in labels) or 1)
            ax.annotate(text, (qx, qy), textcoords='offset points', xytext=(-4 if near else 4, -10),
                        ha='right' if near else 'left', fontsize=6, color='0.25')
            prev = qx
        if y in bounds:
            col, blab = bounds[y]
            bpts = {}
            for r in ok:
                if num(r.get(col)) is not None:
                    bpts.setdefault(r['_x'], []).append(num(r[col]))
            if args.kind != 'bar':   # bars drew theirs above
                if all(max(v) - min(v) <= 1e-9 * max(1.0, abs(max(v))) for v in bpts.values()):
                    bp = sorted((num(xc), max(v)) for xc, v in bpts.items() if num(xc) is not None)
                    line, = ax.plot([p[0] for p in bp], [p[1] for p in bp], label=blab, **sp.series_style(0, blab, True))
                    bound_lines.append((blab, [p[1] for p in bp], line))
                else:   # a bound per series: dashed, in the series' colour (one black line where all agree)
                    per = [sorted((num(xc), max(num(r[col]) for r in rs)) for xc, rs in groups[name].items()
                                  if num(xc) is not None and all(num(r.get(col)) is not None for r in rs))
                           for name in order]
                    if all(sp.same_points([(x, (v,)) for x, v in p], [(x, (v,)) for x, v in per[0]]) for p in per):
                        line, = ax.plot([p[0] for p in per[0]], [p[1] for p in per[0]], label=blab,
                                        **sp.series_style(0, blab, True))
                        bound_lines.append((blab, [p[1] for p in per[0]], line))
                        per = []
                    for gi, (name, bp) in enumerate(zip(order, per)):
                        st = sp.series_style(0, blab, True)
                        st['color'] = sp.series_style(gi, name)['color']
                        line, = ax.plot([p[0] for p in bp], [p[1] for p in bp], label=f'{blab} {name}', **st)
                        bound_lines.append((f'{blab} {name}', [p[1] for p in bp], line))
        for col, val, label in hlines:
            if col == y:
                ax.axhline(val, color='k', ls=':', lw=1)
                if label:
                    ax.annotate(f'{label} {val:g}', (0.03, val), xycoords=('axes fraction', 'data'), fontsize=6,
                                va='bottom')
        if args.kind == 'bar':
            ax.set_xticks(range(len(xcats)))
            longest = max(max(len(s) for s in c.split('\n')) for c in xcats)
            multi = any('\n' in c for c in xcats)   # --x a,b: stacked labels, kept level
            rot = 30 if not multi and longest * len(xcats) > (45 if len(ys) > 1 else 40) else 0
            ax.set_xticklabels(xcats, rotation=rot, ha='right' if rot else 'center',
                               fontsize=6 if multi and longest * len(xcats) > 40 else None)
            ax.grid(axis='x', visible=False)
        ax.set_xlabel(sp.wrap(args.x if args.xlabel is None else args.xlabel, 2))
        ax.set_ylabel(ylab)
        if args.kind == 'line':
            xv = sorted({num(r['_x']) for r in ok if num(r['_x']) is not None})
            if args.logx:
                sp.log_ticks(ax, xv, 'x')
            elif len(xv) <= 12 and all(v == int(v) for v in xv):
                ax.set_xticks(xv)
        if y in ylims and args.kind == 'line':
            sp.clip_y(ax, ylims[y], run_ys, bound_lines, log=y in args.logy.split(','))
        if y in args.logy.split(','):
            sp.log_y_enough_ticks(ax)
    title = args.hue_title or args.hue
    if args.hue and spread_note:
        title = f'{title}{spread_note}'
    fig.tight_layout()
    sp.legend_and_title(fig, axes, legend_title=title if args.hue else (spread_note.strip(' ()') or None),
                        title=sp.wrap(args.title, len(ys)))
    paths = sp.save(fig, args.out, args.dpi)
    if args.svg:
        fig.savefig(paths[0].rsplit('.', 1)[0] + '.svg')

    if args.table:
        cols = args.cols.split(',') if args.cols else [c for c in [args.hue] + args.x.split(',') + ys if c]
        with open(args.table, 'w') as f:
            f.write('| ' + ' | '.join(cols) + ' |\n|' + '---|' * len(cols) + '\n')
            for r in ok:
                f.write('| ' + ' | '.join(fmt_cell(r.get(c, '')) for c in cols) + ' |\n')
            for r in failed:
                f.write(f"\nFailed: `{r.get('run_id', r.get('config', '?'))}`: {r.get('error') or r.get('status')}\n")
    print(f'wrote {" and ".join(paths)}' + (f' and {args.table}' if args.table else ''))
    return 0


if __name__ == '__main__':
    sys.exit(main())
