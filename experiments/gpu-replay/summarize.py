#!/usr/bin/env python3
"""Summarize the Kimi replay rows: decode tok/s against the bound set by the
bytes each decode token moved over each link, at the calibrated bandwidths.

    summarize.py OUT [PREFIX]   (reads OUT/PREFIX_replay.csv, OUT/PREFIX_sim.csv, OUT/cost_PREFIX.json,
                                 OUT/PREFIX_inspect.json; writes OUT/PREFIX_summary.csv; PREFIX
                                 defaults to kimi; experiments/real-model uses it too)

Per decode token, link time = bytes over the link / its bandwidth:
  NVMe (nvme->ram + nvme->vram bytes at nvme_gbps), PCIe (ram->vram +
  nvme->vram bytes at pcie_gbps), HBM (packed bytes of the routed experts read
  by the kernels at hbm_gbps).  The bound assumes perfect overlap of the links:
  tok/s <= 1 / max(link times); "serial" adds them.  The replay counts bytes
  for the whole run, so the bound is only a decode bound on a decode-only trace
  (run_device.sh's default, KPROMPT=0), after taking out the preload's bytes
  (static placement preloads the hot set into VRAM and the warm set into RAM).
Beside each row: the share of the decode time each link had a move outstanding
("busy") and the disk's mean queue depth meanwhile, as the replay measured them.

Issue 16's goals, from the same call: (1) static + lookahead (default options) at
least as fast as static + none, judged on OUT/PREFIX_pairs.csv (the two replayed
alternately after the warm-up, the order swapped every pair) where it exists: the
geometric mean of the pairs' ratios over balanced orders (the mean of each order's
log-ratios; every pair, each order's mean and the order effect printed),
else on the two rows of PREFIX_replay.csv; (2) the best policy at >= 0.8 of the time
bound (c) (bound_tok_s, the same for every row: same trace, budgets and cost model).
Exits 1 if any row's counter beat its bound (bound_violations: a bound that a policy
beats is a bug).
"""
import csv
import json
import math
import os
import sys


def main():
    out = sys.argv[1]
    pre = sys.argv[2] if len(sys.argv) > 2 else 'kimi'
    cost = json.load(open(os.path.join(out, 'cost_%s.json' % pre)))
    insp = json.load(open(os.path.join(out, '%s_inspect.json' % pre)))
    # mean packed bytes of one routed expert access, weighted by tier share of experts
    tiers = insp['tiers']
    nexp = sum(t['experts'] for t in tiers)
    mean_expert = sum(t['payload_bytes'] for t in tiers) / max(nexp, 1)
    rows = list(csv.DictReader(open(os.path.join(out, '%s_replay.csv' % pre))))
    sims = {r['config']: r for r in csv.DictReader(open(os.path.join(out, '%s_sim.csv' % pre)))} \
        if os.path.exists(os.path.join(out, '%s_sim.csv' % pre)) else {}
    nv, pc, hb = cost['nvme_gbps'] * 1e9, cost['pcie_gbps'] * 1e9, cost.get('hbm_gbps', 4000) * 1e9
    print(f"links: nvme {cost['nvme_gbps']:.2f} GB/s, pcie {cost['pcie_gbps']:.2f} GB/s, hbm {cost.get('hbm_gbps', 0):.0f} GB/s")
    hdr = ('config', 'hit vram', 'hit ram', 'hit nvme', 'eff. hit', 'decode tok/s', 'bound tok/s',
           'ratio', 'serial bound', 'sim tok/s', 'sim/real', 'time bound tok/s', 'of time bound',
           'beaten bounds', 'nvme busy', 'pcie busy', 'nvme qd', 'prefetch reads max MiB')
    print('| ' + ' | '.join(hdr) + ' |')
    print('|' + '---|' * len(hdr))
    res = []
    hot_b, warm_b = tiers[0]['extent_bytes'], tiers[1]['extent_bytes']
    for r in rows:
        tok = float(r['decode_tokens'])
        acc = float(r['accesses'])
        # bytes the preload moved before the first token (cold start) are not decode
        # traffic: static placement preloads the hot set NVMe->VRAM and the warm set
        # NVMe->RAM (both fit the budgets here); cache placement starts empty.
        if r.get('preload_bytes_vram'):
            pre_v, pre_r = float(r['preload_bytes_vram']), float(r['preload_bytes_ram'])
        elif r['config'].startswith('place=static'):
            pre_v, pre_r = hot_b, warm_b
        else:
            pre_v = pre_r = 0.0
        nvme_vram = float(r['bytes_nvme_vram']) - pre_v
        nvme_ram = float(r['bytes_nvme_ram']) - pre_r
        t_nvme = (nvme_ram + nvme_vram) / nv / tok
        t_pcie = (float(r['bytes_ram_vram']) + nvme_vram) / pc / tok
        t_hbm = acc * mean_expert / hb / tok
        bound = 1 / max(t_nvme, t_pcie, t_hbm)
        serial = 1 / (t_nvme + t_pcie + t_hbm)
        dec = float(r['decode_tok_s'])
        eff = float(r['hit_rate_vram']) + float(r['hit_rate_ram'])
        s = sims.get(r['config'])
        sd = float(s['decode_tok_s']) if s else float('nan')
        # the bound for every policy (core/include/strata/bound.h (c)), at the calibrated links
        tb = float(r.get('bound_tok_s') or 'nan')
        cells = (r['config'], f"{float(r['hit_rate_vram']):.3f}", f"{float(r['hit_rate_ram']):.3f}",
                 f"{float(r['hit_rate_nvme']):.3f}", f"{eff:.3f}", f"{dec:.2f}", f"{bound:.2f}",
                 f"{dec / bound:.2f}", f"{serial:.2f}", f"{sd:.2f}", f"{sd / dec:.2f}" if dec else '',
                 f"{tb:.2f}", f"{dec / tb:.3f}" if tb == tb and tb > 0 else '', r.get('bound_violations', ''),
                 # the share of decode time each link had a move outstanding, and the disk's mean
                 # queue depth while busy (replay's decode_* columns; empty before they existed)
                 f"{float(r['decode_nvme_util']):.2f}" if r.get('decode_nvme_util') else '',
                 f"{float(r['decode_pcie_util']):.2f}" if r.get('decode_pcie_util') else '',
                 f"{float(r['decode_nvme_qd']):.1f}" if r.get('decode_nvme_qd') else '',
                 # the prefetch budget at work (--prefetch-inflight): rows of one policy differ here
                 f"{float(r['prefetch_inflight_max_nvme']) / 2**20:.0f}" if r.get('prefetch_inflight_max_nvme') else '')
        print('| ' + ' | '.join(cells) + ' |')
        res.append(dict(zip(hdr, cells)))
    # issue 16's goals: the released policy's lookahead at least as fast as none; the best
    # policy at >= 0.8 of the time bound (the bound is the same for every row: same trace,
    # budgets and cost model)
    la_names = ('place=static,evict=lru,prefetch=lookahead-depth=2', 'place=static,evict=lru,prefetch=lookahead')
    no_name = 'place=static,evict=lru,prefetch=none'
    pairs_path = os.path.join(out, '%s_pairs.csv' % pre)
    if os.path.exists(pairs_path):
        goal1_pairs(list(csv.DictReader(open(pairs_path))), la_names, no_name)
    else:
        by = {x['config']: x for x in res}
        la = by.get(la_names[0]) or by.get(la_names[1])
        no = by.get(no_name)
        if la and no:
            a, b = float(la['decode tok/s']), float(no['decode tok/s'])
            print(f"static + lookahead (default options) / static + none: {a:.2f} / {b:.2f} = {a / b:.3f}"
                  f" ({'met' if a >= b else 'NOT met'}: >= 1; one run each)")
    best = max(res, key=lambda x: float(x['decode tok/s'])) if res else None
    if best and best['of time bound']:
        f = float(best['of time bound'])
        print(f"best policy {best['config']}: {float(best['decode tok/s']):.2f} tok/s = {f:.3f} of the time bound "
              f"(c) {float(best['time bound tok/s']):.2f} ({'met' if f >= 0.8 else 'NOT met'}: >= 0.8)")
        print('each row, of the time bound (c): ' +
              ', '.join(f"{x['config']} {x['of time bound']}" for x in res if x['of time bound']))
    with open(os.path.join(out, '%s_summary.csv' % pre), 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=list(hdr))
        w.writeheader()
        w.writerows(res)
    beaten = [x['config'] for x in res if x['beaten bounds'] not in ('', '0')]
    if beaten:
        print('BOUND BEATEN (a bug in the bound or the counters): ' + ', '.join(beaten))
        sys.exit(1)
    print('no counter beat its bound in any row')


def median(v):
    v = sorted(v)
    n = len(v)
    return (v[n // 2] + v[(n - 1) // 2]) / 2 if n else float('nan')


def geomean(v):
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float('nan')


def goal1_pairs(rows, la_names, no_name):
    """Goal (1) on the alternating replays: every pair with its order, the
    geometric mean of the ratios by order, and the verdict on the geometric
    mean over balanced orders (the mean of the two orders' log-ratios, so an
    order effect -- the configuration replayed first tends to be faster --
    weighs the same either way whatever the number of pairs)."""
    la = [(k, r) for k, r in enumerate(rows) if r['config'] in la_names]
    no = [(k, r) for k, r in enumerate(rows) if r['config'] == no_name]
    n = min(len(la), len(no))
    by_order = {'none first': [], 'lookahead first': []}
    for i in range(n):
        a, b = float(la[i][1]['decode_tok_s']), float(no[i][1]['decode_tok_s'])
        order = 'none first' if no[i][0] < la[i][0] else 'lookahead first'
        by_order[order].append(a / b)
        print(f"pair {i + 1} ({order}): static + lookahead {a:.2f} tok/s, static + none {b:.2f} tok/s: {a / b:.3f}")
    if not n:
        print('goal (1): no pairs')
        return
    for order, v in by_order.items():
        print(f"{order}: {len(v)} pairs, geometric mean of the ratios {geomean(v):.3f}")
    gn, gl = geomean(by_order['none first']), geomean(by_order['lookahead first'])
    if by_order['none first'] and by_order['lookahead first']:
        print(f"order effect (lookahead first / none first): {gl / gn:.3f}")
        g, how = math.sqrt(gn * gl), 'geometric mean over balanced orders'
    else:
        g, how = geomean(by_order['none first'] + by_order['lookahead first']), 'geometric mean, ONE ORDER ONLY'
    mr = median([r for v in by_order.values() for r in v])
    print(f"static + lookahead (default options) / static + none, {n} pairs: {how} {g:.3f} "
          f"(median of the ratios {mr:.3f}) ({'met' if g >= 1 else 'NOT met'}: >= 1)")


if __name__ == '__main__':
    main()
