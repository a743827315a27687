#!/usr/bin/env python3
"""The format-per-tier frontier (combine.py's frontier.csv): four panels, one point per split x
choice of the tiers' formats, the release's 15/30/55 trellis point starred:
  size against matrix quality (cosine by expert accesses);
  size against end-to-end quality (KLD of the trained tiny model, where strata.eval measured it);
  quality against decode tok/s at the study's budgets (static placement): the calibrated clock
  (filled) and the GPU machine's real engine (hollow, where run_device.sh measured it);
  the same with every expert in VRAM (fit).

    scripts/plot.sh --script experiments/bits-vs-tiers/frontier_plot.py RESULTS/frontier.csv OUT.png
"""
import csv
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'scripts'))
import strata_plot as sp  # noqa: E402

RELEASE = ('15/30/55', 'hot,warm,cold')


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def main(path, out):
    with open(path, newline='') as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f'{path}: no rows')
    series = []
    for r in rows:
        if r['series'] not in series:
            series.append(r['series'])
    plt = sp.setup()
    fig, axes = sp.figure(plt, 4, height=2.4)
    panels = (
        ('full_gb', 'cosine_access', None, 'routed experts (GB)', 'cosine by expert accesses', 'size vs matrix quality'),
        ('full_gb', 'e2e_kld', None, 'routed experts (GB)', 'KLD vs BF16 (nats)', 'end to end (moe-tiny, CPU)'),
        ('cosine_access', 'tok_s_static', 'gpu_tok_s_static', 'cosine by expert accesses', 'decode tok/s',
         'static, VRAM 256 MiB / RAM 512 MiB'),
        ('cosine_access', 'tok_s_fit', 'gpu_tok_s_fit', 'cosine by expert accesses', 'decode tok/s',
         'fit: every expert in VRAM'),
    )
    for ax, (xc, yc, gc, xl, yl, title) in zip(axes, panels):
        for i, s in enumerate(series):
            st = sp.series_style(i, s)
            pts = sorted((num(r[xc]), num(r[yc]), r) for r in rows if r['series'] == s
                         and num(r[xc]) is not None and num(r[yc]) is not None)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s,
                        **dict(st, ls='-' if xc == 'full_gb' else 'none'))
            if gc:
                gp = [(num(r[xc]), num(r[gc])) for r in rows if r['series'] == s and num(r[gc]) is not None]
                if gp:
                    ax.plot([p[0] for p in gp], [p[1] for p in gp], ls='none', marker=st['marker'],
                            color=st['color'], mfc='none', ms=7, mew=1.1, label=f'{s}, GPU replay')
        for r in rows:
            if (r['split'], r['formats']) != RELEASE:
                continue
            for c in (yc, gc):
                if c and num(r[xc]) is not None and num(r[c]) is not None:
                    ax.plot([num(r[xc])], [num(r[c])], marker='*', ms=11, color='black', mfc='gold', ls='none',
                            zorder=6, label='release (15/30/55 trellis)' if c == yc else None)
        if yc == 'cosine_access':  # the splits, once
            for r in rows:
                if r['series'] == 'trellis':
                    ax.annotate(r['split'], (num(r[xc]), num(r[yc])), fontsize=5, xytext=(3, -6),
                                textcoords='offset points')
        if yc != 'cosine_access':
            sp.log_y_enough_ticks(ax)
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(title, fontsize=7)
    # one legend entry per label
    handles, labels = [], []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.tight_layout()
    fig.legend(handles, labels, loc='lower center', bbox_to_anchor=(0.5, 0.98), ncol=7, frameon=False,
               columnspacing=1.0, handletextpad=0.4)
    sp.save(fig, out)
    print(f'wrote {out} and {os.path.splitext(out)[0]}.pdf')


if __name__ == '__main__':
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1], sys.argv[2])
