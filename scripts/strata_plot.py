"""The one plotting style of Strata's figures (every study's plots and tables
go through scripts/plot_results.py, which uses this; a new plotting script
imports it the same way: `sys.path.insert(0, <repo>/scripts)`).

What it fixes, so a paper can print the figures as they are:
  - size: a single panel is one column wide (3.4 in), two or more panels
    span the page (7.0 in); fonts 8 pt, legends 7 pt, one shared legend above
    the panels, never over the data;
  - files: `save(fig, "x.png")` writes x.png (200 dpi) and x.pdf (vector, for the paper);
  - series: each gets its own colour, marker and line style; a series whose
    name ends in `.lua` (the Lua twin of a C policy, whose line lies exactly
    on the C one) gets a hollow, larger marker and a dotted line so both show;
    the bound (a `--ref-hue` such as belady, or a `bound_*` column) is black
    and dashed, labelled as the bound;
  - log axes: a tick at every plotted value (base 2 for sizes) or at 1-2-5
    steps, plain numbers, never a lone 10^3;
  - noise: several seeds per point are drawn as the mean with a min-max band
    (lines) or error bars (bars), and the legend says how many seeds.
"""
import math
import textwrap

COLUMN_IN = 3.4   # one column of a two-column paper
PAGE_IN = 7.0     # the text width
PANEL_H_IN = 2.3

MARKERS = ['o', 's', '^', 'D', 'v', 'P', 'X', '<', '>', '*']
LINESTYLES = ['-', '--', '-.', (0, (3, 1, 1, 1, 1, 1)), (0, (5, 2)), (0, (1, 1))]
BOUND_COLOR = 'black'


def setup():
    """Import matplotlib headless with the house rcParams; returns pyplot."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    plt.rcParams.update({
        'font.size': 8, 'axes.titlesize': 8, 'axes.labelsize': 8,
        'xtick.labelsize': 7, 'ytick.labelsize': 7, 'legend.fontsize': 7,
        'legend.title_fontsize': 7, 'figure.titlesize': 8,
        'lines.linewidth': 1.3, 'lines.markersize': 4.5,
        'axes.grid': True, 'grid.alpha': 0.3, 'grid.linewidth': 0.5,
        'axes.spines.top': False, 'axes.spines.right': False,
        'savefig.bbox': 'tight', 'savefig.pad_inches': 0.03,
        'pdf.fonttype': 42, 'ps.fonttype': 42,   # TrueType in PDFs: editable, accepted by publishers
    })
    return plt


def figure(plt, panels, height=PANEL_H_IN):
    """A figure of `panels` side by side: one column wide for one panel, the
    page width for more."""
    width = COLUMN_IN if panels == 1 else PAGE_IN
    fig, axes = plt.subplots(1, panels, figsize=(width, height), squeeze=False)
    return fig, list(axes[0])


def is_twin(name):
    return str(name).endswith('.lua')


def series_style(i, name, bound=False):
    """Keyword arguments for ax.plot of the i-th series."""
    if bound:
        return dict(color=BOUND_COLOR, ls='--', marker='x', ms=4, lw=1.1, zorder=4)
    color = f'C{i % 10}' if i % 10 != 7 else 'C9'   # C7 is grey: too close to the bound's black
    st = dict(color=color, marker=MARKERS[i % len(MARKERS)], ls=LINESTYLES[i % len(LINESTYLES)], zorder=3)
    if is_twin(name):
        st.update(ls=':', mfc='none', ms=7, mew=1.2, lw=1.6, zorder=5)
    return st


def same_points(a, b):
    """Two series of (x, (mean, ...), ...) points that coincide (one would hide the other)."""
    return len(a) == len(b) and all(p[0] == q[0] and abs(p[1][0] - q[1][0]) <= 1e-9 * max(1.0, abs(p[1][0]))
                                    for p, q in zip(a, b))


def stack_label(text, width=9):
    """A category label part for stacked tick labels: long hyphenated words
    split over two lines ('h200-measured' -> 'h200-\nmeasured')."""
    if len(text) <= width or '-' not in text:
        return text
    head, _, tail = text.partition('-')
    return f'{head}-\n{tail}'


def bar_style(i, name, bound=False):
    hatches = ['', '//', '\\\\', 'xx', '..', '--', '++', 'oo']
    if bound:
        return dict(color='white', edgecolor=BOUND_COLOR, hatch='////', lw=0.8)
    return dict(color=f'C{i % 10}', edgecolor='black', lw=0.4, hatch=hatches[i % len(hatches)] if is_twin(name) else '')


def log_ticks(ax, values, axis='x', base=2):
    """A log axis with a labelled tick at every plotted value (few values:
    budgets, depths), else at 1-2-5 steps; plain numbers, no 10^k."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullLocator
    a = ax.xaxis if axis == 'x' else ax.yaxis
    (ax.set_xscale if axis == 'x' else ax.set_yscale)('log', base=base if len(set(values)) <= 12 else 10)
    vals = sorted({v for v in values if v and v > 0})
    if 0 < len(vals) <= 12:
        a.set_major_locator(FixedLocator(vals))
    else:
        a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_minor_locator(NullLocator())
    a.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))


def log_y_enough_ticks(ax):
    """A log y axis over data spanning less than a decade still gets 4-8
    labelled ticks (1-2-5 steps, or every integer step when that is too few)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, MaxNLocator, NullLocator
    ax.set_yscale('log')
    lo, hi = ax.get_ylim()
    if hi / max(lo, 1e-300) < 8:   # under a decade: evenly spaced round numbers
        ax.yaxis.set_major_locator(FixedLocator([v for v in MaxNLocator(nbins=6).tick_values(lo, hi) if v > 0]))
    else:
        subs = (1.0, 2.0, 5.0) if hi / max(lo, 1e-300) > 30 else (1.0, 2.0, 3.0, 5.0, 7.0)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f'{v:g}'))


def clip_y(ax, lim, run_values, lines, log=False):
    """Set the y range: lim is (lo, hi) (None: matplotlib's), or 'runs': the
    runs' values with a margin, leaving out a bound far above them.  Each of
    lines (label, values, Line2D) that lies above the range is named in a
    note at the top of the panel, so a cut-off bound still reads as one (and
    leaves the legend when none of it shows)."""
    lo, hi = ax.get_ylim()
    if lim == 'runs':
        vals = [v for v in run_values if v is not None and (v > 0 or not log)]
        if vals:
            a, b = min(vals), max(vals)
            if log:
                lo, hi = a / 1.15, b * 1.15
            else:
                pad = 0.08 * (b - a or abs(b) or 1.0)
                lo, hi = a - pad, b + pad
    else:
        lo = lim[0] if lim[0] is not None else lo
        hi = lim[1] if lim[1] is not None else hi
    ax.set_ylim(lo, hi)
    above = [(lab, vs) for lab, vs, _ in lines if vs and max(vs) > hi]
    for lab, vs, line in lines:
        if vs and min(vs) > hi:
            line.set_label('_' + lab)
    if above:
        vmin = min(min(vs) for _, vs in above)
        vmax = max(max(vs) for _, vs in above)
        names = above[0][0] if len(above) == 1 else f'{above[0][0]} .. {above[-1][0]}'
        def fmt(v):
            return f'{v:.4g}' if abs(v) < 1e4 else f'{v:.0f}'
        rng = fmt(vmin) if vmax - vmin <= 1e-9 * abs(vmax) else f'{fmt(vmin)}-{fmt(vmax)}'
        ax.annotate(f'above: {names} at {rng}', (0.02, 0.98), xycoords='axes fraction', ha='left', va='top',
                    fontsize=6, color=BOUND_COLOR, bbox=dict(boxstyle='round,pad=0.2', fc='white', ec='0.7', lw=0.5))


def spread(values):
    """(mean, min, max, n) of a list of numbers."""
    n = len(values)
    m = sum(values) / n
    return m, min(values), max(values), n


def shared_legend(fig, axes, title=None, max_cols=6):
    """One legend for the whole figure, above the panels (handles of the
    first panel that has them, de-duplicated)."""
    handles, labels, seen = [], [], set()
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in seen and not lab.startswith('_'):
                seen.add(lab)
                handles.append(h)
                labels.append(lab)
    if not handles:
        return None
    ncol = min(len(handles), max_cols if len(axes) > 1 else 3)
    return fig.legend(handles, labels, loc='lower center', bbox_to_anchor=(0.5, 1.0), ncol=ncol, frameon=False,
                      title=title, handlelength=2.6, columnspacing=1.2)


def legend_and_title(fig, axes, legend_title=None, title=None):
    """After fig.tight_layout(): the shared legend just above the panels and
    the title just above the legend (placed from the legend's drawn size)."""
    leg = shared_legend(fig, axes, title=legend_title)
    top = max(ax.get_position().y1 for ax in axes)
    if leg is not None:
        leg.set_bbox_to_anchor((0.5, top + 0.01), transform=fig.transFigure)
    if title:
        y = top + 0.02
        if leg is not None:
            fig.canvas.draw()
            y = leg.get_window_extent().transformed(fig.transFigure.inverted()).y1 + 0.005
        fig.suptitle(title, y=y, va='bottom')


def wrap(text, panels):
    """A title or label wrapped to the figure's width."""
    width = 60 if panels == 1 else 120
    return '\n'.join(textwrap.wrap(text, width)) if text else text


def save(fig, out, dpi=200):
    """Write out (PNG at dpi) and the PDF beside it; returns the paths."""
    base = out.rsplit('.', 1)[0] if out.lower().endswith(('.png', '.pdf', '.svg')) else out
    paths = [base + '.png', base + '.pdf']
    fig.savefig(paths[0], dpi=dpi)
    fig.savefig(paths[1])
    return paths


def nice_float(v):
    return f'{v:g}' if abs(v) >= 1e-3 or v == 0 else f'{v:.2e}'


def finite(v):
    return v is not None and not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))
