#!/usr/bin/env python3
"""Join study 3's pieces: per-format cosines (bench_quant CSV), model sizes
(strata inspect --json, one JSON per line, tagged with split, the tiers'
formats and model), and the simulation rows (results/sim.csv from run.lua),
one row per split and choice of tier formats (hot,warm,cold; q4,warm,cold ...).  Writes summary.csv and
the markdown tables.  No dependencies beyond the standard library.

    combine.py RESULTS_DIR [--gpu DIR] [--e2e SUMMARY.csv]
    combine.py --device DIR     run_device.sh's replay-vs-sim table (DIR/device.csv)

With --gpu (run_device.sh's results: DIR/device.csv) and --e2e (strata.eval's summary.csv of a
run with --tier-formats), frontier.csv / frontier.md join every split x formats point's size,
matrix and end-to-end quality and decode tok/s (calibrated clock and GPU replay) and mark, per
policy (static, cache, fit), the points on the Pareto frontier of (smaller, better cosine by
accesses, faster) and of (better cosine, faster) alone (frontier_plot.py draws it).
"""
import csv
import json
import sys


FMT_BPW = {'hot': 2.8125, 'warm': 2.5625, 'cold': 1.4375, 'q4': 4.5, 'q3': 3.5}
DEFAULT_FORMATS = 'hot,warm,cold'


def main(res, gpu=None, e2e=None):
    cos = {}
    with open(f'{res}/cosine.csv', newline='') as f:
        for r in csv.DictReader(f):
            cos.setdefault(r['fmt'], {})[r['dist']] = float(r['cosine'])
    dists = sorted({d for v in cos.values() for d in v})
    sizes = {}
    with open(f'{res}/sizes.jsonl') as f:
        for line in f:
            j = json.loads(line)
            sizes[(j['split'], j.get('formats', DEFAULT_FORMATS), j['which'])] = j['card']
    # one row per (split, formats, variant, trace seed): tables use the mean
    # over seeds, speed.csv keeps every seed (the plot draws the spread)
    runs = {}
    choices = []
    with open(f'{res}/sim.csv', newline='') as f:
        for r in csv.DictReader(f):
            key = (r['split'], r.get('formats') or DEFAULT_FORMATS)
            runs.setdefault(key + (r['variant'],), []).append(r)
            if key not in choices:
                choices.append(key)
    sim = {}
    for key, rs in runs.items():
        sim[key] = {c: sum(float(r[c]) for r in rs) / len(rs) for c in ('hit_vram', 'hit_ram', 'hit_nvme',
                                                                          'decode_tok_s')}

    rows = []
    for s, fm in choices:
        fmts = fm.split(',')
        pct = [float(x) / 100 for x in s.split('/')]
        sh = sim[(s, fm, 'shares')]
        acc = [float(sh['hit_vram']), float(sh['hit_ram']), float(sh['hit_nvme'])]
        full, scaled = sizes[(s, fm, 'full')], sizes[(s, fm, 'scaled')]
        row = {
            'split': s,
            'formats': fm,
            'bpw': full['total']['bpw'],
            'full_gb': full['total']['gb'],
            'scaled_mb': scaled['total']['gb'] * 1000,
            'reduction_vs_bf16': full['reduction_vs_bf16'],
            'access_hot': acc[0], 'access_warm': acc[1], 'access_cold': acc[2],
        }
        for d in dists:
            row[f'cos_param_{d}'] = sum(p * cos[t][d] for p, t in zip(pct, fmts))
            row[f'cos_access_{d}'] = sum(a * cos[t][d] for a, t in zip(acc, fmts))
        for v in ('static', 'cache'):
            row[f'tok_s_{v}'] = float(sim[(s, fm, v)]['decode_tok_s'])
            row[f'fast_hit_{v}'] = float(sim[(s, fm, v)]['hit_vram']) + float(sim[(s, fm, v)]['hit_ram'])
        rows.append(row)
    cols = list(rows[0].keys())
    with open(f'{res}/summary.csv', 'w', newline='') as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(rows)
    several = len({fm for _, fm in choices}) > 1
    # long form for the speed plot, one row per trace seed
    with open(f'{res}/speed.csv', 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['split', 'formats', 'policy', 'seed', 'decode_tok_s', 'fast_hit_pct'])
        for s, fm in choices:
            for v in ('static', 'cache'):
                for r in runs[(s, fm, v)]:
                    w.writerow([s, fm, f'{v} {fm}' if several else v, r.get('trace_seed', ''),
                                float(r['decode_tok_s']), 100 * (float(r['hit_vram']) + float(r['hit_ram']))])

    g = 'gauss' if 'gauss' in dists else dists[0]
    with open(f'{res}/quality.csv', 'w', newline='') as f:
        w = csv.writer(f)
        w.writerow(['split', 'formats', 'full_gb', 'bpw', 'weighting', 'cosine'])
        for r in rows:
            for k, lab in (('param', 'by parameters'), ('access', 'by expert accesses')):
                w.writerow([r['split'], r['formats'], r['full_gb'], r['bpw'],
                            f'{lab}, {r["formats"]}' if several else lab, r[f'cos_{k}_{g}']])
    used = []
    for _, fm in choices:
        for t in fm.split(','):
            if t not in used:
                used.append(t)
    with open(f'{res}/cosine.md', 'w') as f:
        f.write('| format | bpw | ' + ' | '.join(f'cosine {d}' for d in dists) + ' |\n|---|---|' + '---|' * len(dists) + '\n')
        for t in [t for t in FMT_BPW if t in cos]:
            f.write(f'| {t} | {FMT_BPW[t]} | ' + ' | '.join(f'{cos[t][d]:.4f}' for d in dists) + ' |\n')
    with open(f'{res}/summary.md', 'w') as f:
        nseed = max(len(v) for v in runs.values())
        f.write(f'(simulation columns: mean over {nseed} trace seed{"s" if nseed > 1 else ""})\n\n')
        f.write('| split h/w/c % | formats h,w,c | bpw | Qwen3-30B-A3B GB | vs BF16 | scaled MB | accesses h/w/c % | '
                f'cosine, by params ({g}) | cosine, by accesses ({g}) | tok/s static | tok/s cache |\n')
        f.write('|---|---|---|---|---|---|---|---|---|---|---|\n')
        for r in rows:
            f.write(f"| {r['split']} | {r['formats']} | {r['bpw']:.4f} | {r['full_gb']:.2f} | {r['reduction_vs_bf16']:.2f}x | "
                    f"{r['scaled_mb']:.0f} | {100*r['access_hot']:.1f}/{100*r['access_warm']:.1f}/{100*r['access_cold']:.1f} | "
                    f"{r[f'cos_param_{g}']:.4f} | {r[f'cos_access_{g}']:.4f} | {r['tok_s_static']:.1f} | "
                    f"{r['tok_s_cache']:.1f} |\n")
    # the fit variants: the whole model in VRAM, tok/s per cost model (kernel speeds)
    fits = sorted({v for (_, _, v) in runs if v.startswith('fit ')})
    with open(f'{res}/fit.md', 'w') as f:
        if fits:
            f.write('| split h/w/c % | formats h,w,c | cosine, by accesses (' + g + ') | ' +
                    ' | '.join(f'tok/s {v[4:]}' for v in fits) + ' |\n|---|---|---|' + '---|' * len(fits) + '\n')
            for r in rows:
                f.write(f"| {r['split']} | {r['formats']} | {r[f'cos_access_{g}']:.4f} | " +
                        ' | '.join(f"{float(sim[(r['split'], r['formats'], v)]['decode_tok_s']):.1f}" for v in fits) +
                        ' |\n')
    frontier(res, rows, sim, fits, g, gpu, e2e)
    print(open(f'{res}/cosine.md').read())
    print(open(f'{res}/summary.md').read())
    print(open(f'{res}/fit.md').read())
    print(open(f'{res}/frontier.md').read())


def e2e_key(r):
    """(split, formats) of a strata.eval summary row: all-q4 is 100/0/0 with the hot tier in q4."""
    fm, split = r.get('formats', ''), r.get('split', '')
    if split:
        return split, fm
    if fm in ('hot', 'warm', 'cold'):
        return '/'.join('100' if t == fm else '0' for t in ('hot', 'warm', 'cold')), DEFAULT_FORMATS
    return '100/0/0', f'{fm},warm,cold'


def frontier(res, rows, sim, fits, g, gpu, e2e):
    """frontier.csv / frontier.md: every split x formats point with its size, matrix quality
    (cosine by accesses), end-to-end quality of the trained tiny model where strata.eval measured
    that configuration (e2e: its summary.csv), decode tok/s on the calibrated clock (static, cache,
    fit) and on the GPU machine's real engine (gpu: run_device.sh's device.csv), and whether the
    point is on the Pareto frontier of (smaller, better cosine, faster) per policy."""
    fit = ([v for v in fits if not v.startswith('fit cost-speed')] or fits or [None])[0]
    quality = {}
    if e2e:
        with open(e2e, newline='') as f:
            for r in csv.DictReader(f):
                # the all-one-format models and the popularity splits (not the ranking controls)
                k = e2e_key(r)
                fm = '' if k[1] == DEFAULT_FORMATS else ' ' + k[1]
                if r['config'].startswith('all-') or r['config'] == f'popularity-{k[0]}{fm}':
                    quality[k] = r
    measured = {}
    if gpu:
        with open(f'{gpu}/device.csv', newline='') as f:
            for r in csv.DictReader(f):
                measured.setdefault((r['split'], r['formats']), {})[r['policy']] = float(r['replay_tok_s'])
    pols = ('static', 'cache', 'fit')
    out = []
    for r in rows:
        key = (r['split'], r['formats'])
        hot = r['formats'].split(',')[0]
        if r['split'].startswith('0/') and r['formats'] != DEFAULT_FORMATS and \
                (r['split'], DEFAULT_FORMATS) in {(x['split'], x['formats']) for x in rows}:
            continue  # no hot experts: the same model as the trellis row
        q = quality.get(key, {})
        o = {'split': r['split'], 'formats': r['formats'], 'full_gb': r['full_gb'], 'bpw': r['bpw'],
             'cosine_access': r[f'cos_access_{g}'], 'cosine_param': r[f'cos_param_{g}'],
             'tok_s_static': r['tok_s_static'], 'tok_s_cache': r['tok_s_cache'],
             'tok_s_fit': float(sim[key + (fit,)]['decode_tok_s']) if fit else '',
             'e2e_kld': q.get('kld', ''), 'e2e_top1': q.get('top1', ''), 'e2e_ppl_vs_bf16': q.get('ppl_vs_bf16', '')}
        for p in pols:
            o[f'gpu_tok_s_{p}'] = measured.get(key, {}).get(p, '')
        o['series'] = ('trellis' if r['formats'] == DEFAULT_FORMATS else
                       f'{hot} hot' if r['formats'].endswith(',warm,cold') else r['formats'])
        out.append(o)
    def front(o, keys):
        """o is not dominated on keys (higher is better) by another point."""
        return all(o[k] != '' for k in keys) and not any(
            x is not o and all(x[k] != '' and x[k] >= o[k] for k in keys) and any(x[k] > o[k] for k in keys)
            for x in out)
    for o in out:
        o['neg_gb'] = -o['full_gb']
    for p in pols:
        for o in out:
            o[f'pareto_{p}'] = front(o, ('neg_gb', 'cosine_access', f'tok_s_{p}'))
            o[f'pareto_q_{p}'] = front(o, ('cosine_access', f'tok_s_{p}'))
    for o in out:
        del o['neg_gb']
    cols = list(out[0])
    with open(f'{res}/frontier.csv', 'w', newline='') as f:
        w = csv.DictWriter(f, cols)
        w.writeheader()
        w.writerows(out)
    def f(v, fmt):
        return '-' if v == '' else fmt % float(v)
    with open(f'{res}/frontier.md', 'w') as fo:
        fo.write(f'| split h/w/c % | formats h,w,c | Qwen3-30B-A3B GB | cosine by accesses ({g}) | '
                 'e2e KLD (moe-tiny) | e2e top-1 | tok/s static | tok/s cache | '
                 f'tok/s fit ({fit[4:] if fit else "-"}) | GPU static | GPU cache | GPU fit | frontier s/c/f | '
                 'quality-speed frontier s/c/f |\n')
        fo.write('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n')
        for o in out:
            mark = '/'.join('yes' if o[f'pareto_{p}'] else '-' for p in pols) + ' | ' + \
                '/'.join('yes' if o[f'pareto_q_{p}'] else '-' for p in pols)
            fo.write(f"| {o['split']} | {o['formats']} | {o['full_gb']:.2f} | {o['cosine_access']:.4f} | "
                     f"{f(o['e2e_kld'], '%.4f')} | {f(o['e2e_top1'], '%.3f')} | {o['tok_s_static']:.1f} | "
                     f"{o['tok_s_cache']:.1f} | {f(o['tok_s_fit'], '%.1f')} | {f(o['gpu_tok_s_static'], '%.1f')} | "
                     f"{f(o['gpu_tok_s_cache'], '%.1f')} | {f(o['gpu_tok_s_fit'], '%.1f')} | {mark} |\n")


def read_rows(path):
    """{(split, formats, policy): row} of one of run_device.sh's CSVs (empty if missing)."""
    try:
        with open(path, newline='') as f:
            return {(r['split'], r['formats'], r['policy']): r for r in csv.DictReader(f)}
    except FileNotFoundError:
        return {}


def device(d):
    """run_device.sh's table: per split, formats and policy the real engine's decode tok/s
    (replay.csv), the simulator's on this call's calibration (sim_gpu.csv) and on the study's
    committed clock (sim_study.csv), each against the trellis formats of the same split and
    policy; writes device.csv and prints device.md's text."""
    rep, sim, study = (read_rows(f'{d}/{n}.csv') for n in ('replay', 'sim_gpu', 'sim_study'))
    if not rep:
        sys.exit(f'{d}/replay.csv: no replay rows (see {d}/run.log)')
    hits = ('hits_vram', 'hits_ram', 'hits_nvme', 'bytes_nvme_ram', 'bytes_ram_vram', 'bytes_nvme_vram')
    rows = []
    for key, r in rep.items():
        s, fm, pol = key
        base = rep.get((s, DEFAULT_FORMATS, pol))
        tok = float(r['decode_tok_s'])
        row = {'split': s, 'formats': fm, 'policy': pol, 'replay_tok_s': tok,
               'hit_vram': float(r['hit_rate_vram']), 'hit_ram': float(r['hit_rate_ram']),
               'hit_nvme': float(r['hit_rate_nvme']),
               'replay_vs_trellis': tok / float(base['decode_tok_s']) if base else ''}
        for lab, src in (('sim', sim), ('sim_study', study)):
            x = src.get(key)
            b = src.get((s, DEFAULT_FORMATS, pol))
            row[f'{lab}_tok_s'] = float(x['decode_tok_s']) if x else ''
            row[f'{lab}_over_replay'] = float(x['decode_tok_s']) / tok if x and tok else ''
            row[f'{lab}_vs_trellis'] = float(x['decode_tok_s']) / float(b['decode_tok_s']) if x and b else ''
        row['same_counters'] = all(sim[key][k] == r[k] for k in hits) if key in sim else ''
        rows.append(row)
    with open(f'{d}/device.csv', 'w', newline='') as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    try:
        with open(f'{d}/cost_gpu.json') as f:
            c = json.load(f)
        print(f"calibrate ({c.get('machine', '?')}): nvme {c['nvme_gbps']:.2f} GB/s, pcie {c['pcie_gbps']:.1f} GB/s, "
              f"kernels {c['kernel_fixed_us']:.1f} us + {c['kernel_us_per_mb']:.3f} us/MB, "
              f"kernel_speed_q4 {c.get('kernel_speed_q4', 1):.3f}, kernel_speed_q3 {c.get('kernel_speed_q3', 1):.3f}\n")
    except (OSError, KeyError, ValueError):
        print(f'{d}/cost_gpu.json: none (calibrate failed; sims on the study clock)\n')

    def num(v, fmt):
        return '-' if v == '' else fmt % v
    print('| split | formats | policy | VRAM/RAM/NVMe hits | replay tok/s | vs trellis | sim tok/s (this call) | '
          'sim/replay | sim vs trellis | sim tok/s (study clock) | same counters |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['split']} | {r['formats']} | {r['policy']} | {r['hit_vram']:.3f}/{r['hit_ram']:.3f}/"
              f"{r['hit_nvme']:.3f} | {r['replay_tok_s']:.1f} | {num(r['replay_vs_trellis'], '%.2f')} | "
              f"{num(r['sim_tok_s'], '%.1f')} | {num(r['sim_over_replay'], '%.2f')} | "
              f"{num(r['sim_vs_trellis'], '%.2f')} | {num(r['sim_study_tok_s'], '%.1f')} | {r['same_counters']} |")


if __name__ == '__main__':
    if len(sys.argv) == 3 and sys.argv[1] == '--device':
        device(sys.argv[2])
    elif len(sys.argv) >= 2 and not sys.argv[1].startswith('-'):
        opts = dict(zip(sys.argv[2::2], sys.argv[3::2]))
        if len(sys.argv) % 2 or set(opts) - {'--gpu', '--e2e'}:
            print(__doc__, file=sys.stderr)
            sys.exit(2)
        main(sys.argv[1], opts.get('--gpu'), opts.get('--e2e'))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
