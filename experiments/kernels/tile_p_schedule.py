#!/usr/bin/env python3
"""Event model of the hand-over in kernels/moe_prefill_sm90.cuh:tile_p
(prefill=sm90p, sm90p1, sm90p3): one producer entity (NPT threads: packed-row
copies into a 2-slot block ring, activation copies into 4 buffers two K steps
ahead, decode into the buffer's A tile) and one MMA entity (256 threads), named
barriers FULL[b] / EMPTY[b] counted in threads as the hardware does (so a
barrier that two producer arrivals could complete is caught), cp.async groups
and wgmma groups finishing after random latencies.  Checks, for every seed:
no deadlock; every wgmma reads the A tile decoded and the activations landed
for its own step; no copy or decode writes a buffer a wgmma still reads; every
decode reads its own block, landed.  Intra-producer ordering (BAR_PROD) is
not modelled: the producer is one sequential program.  The same for
prefill=sm90pc (mc): the MMA entity stages the activations NB - 1 steps ahead
(its own cp.async groups), the producer only the raw blocks and the decode,
waiting EMPTY before it rewrites a buffer's A tile.  prefill=sm90ph has
sm90pc's hand-over unchanged (its row-exponent scan precedes the producer's
first decode, and a down tile with a flagged token waits for its first
activation copies and stages them again before the loop: both outside the
modelled loop).  prefill=sm90pp / sm90pp2 (tile_pp, persistent): the
CTA's tiles through one ring with global step and raw-block counters, the
next tile's raw block 0 issued during the tile's last block, the tile's last
step released after wgmma.wait_group 0 (then an epilogue of random length),
one or two steps per FULL hand-over.  --mutate runs known broken schedules,
which must fail (the model's own check).

    /usr/bin/python3 experiments/kernels/tile_p_schedule.py [--seeds N] [--mutate]
"""
import argparse
import random


class Broken(Exception):
    pass


def run(np_, nk, seed, nb=4, p=2, nr=2, raw_at=0, wg_wait=1, cp_wait=1, mc=False, mc_early=False, tiles=None,
        s=1, pp_keep_last=False, pp_early_last=False):
    rnd = random.Random(seed)
    pp = tiles is not None  # prefill=sm90pp / sm90pp2: the CTA's tiles (K steps each) in one ring
    G = sum(tiles) if pp else nk
    npt = 128 * np_
    nthr = 256 + npt
    a = [None] * nb          # step decoded into buffer b's A tile
    bt = [None] * nb         # ('inflight' | 'landed', step) of buffer b's activations
    raw = [None] * nr        # ('inflight' | 'landed', block) of raw slot
    wgmma = []               # (done time, step)
    # cp.async groups and the open group of each entity (cp.async counts per thread)
    grp = {'P': ([], []), 'C': ([], [])}
    who = ['P']
    clock = [0]
    bars = {}

    def check_free(buf, what):
        for done, st in wgmma:
            if st % nb == buf and done > clock[0]:
                raise Broken(f"{what} into buffer {buf} while the wgmma of step {st} reads it")

    def issue_act(s):
        check_free(s % nb, f"activations of step {s}")
        bt[s % nb] = ('inflight', s)
        grp[who[0]][1].append(('B', s % nb, s, clock[0] + rnd.randint(1, 30)))

    def issue_raw(b):
        raw[b % nr] = ('inflight', b)
        grp[who[0]][1].append(('R', b % nr, b, clock[0] + rnd.randint(1, 30)))

    def commit():
        groups, cur = grp[who[0]]
        groups.append(list(cur))
        cur.clear()

    def land(n):  # cp.async.wait_group n
        groups = grp[who[0]][0]
        done = groups[:len(groups) - n] if n else groups[:]
        last = max([c[3] for g in done for c in g], default=0)
        if last > clock[0]:
            yield ('time', last)
        for g in done:
            for kind, i, v, _ in g:
                arr = bt if kind == 'B' else raw
                if arr[i] == ('inflight', v):
                    arr[i] = ('landed', v)

    def decode_pp(g, blk):  # global step g from global raw block blk (the FULL arrive is the caller's)
        if raw[blk % nr] != ('landed', blk):
            raise Broken(f"decode of step {g} finds raw slot {raw[blk % nr]}, wants block {blk}")
        check_free(g % nb, f"decode of step {g}")
        yield ('time', clock[0] + rnd.randint(1, 20))
        check_free(g % nb, f"decode of step {g}")
        a[g % nb] = g

    def decode(ks):  # step ks into its buffer's A tile, then FULL
        yield from decode_pp(ks, ks >> 2)
        yield ('arrive', 1 + ks % nb, npt)

    def producer_pp():
        # prefill=sm90pp: global step g and raw block gb over the CTA's tiles; the
        # next tile's block 0 issued while the tile's last block is decoded; s
        # steps per FULL hand-over (sm90pp2: 2)
        nblk = sum(t // 4 for t in tiles)
        g = gb = 0
        issue_raw(0)
        commit()
        for nk_t in tiles:
            for k0 in range(0, nk_t, s):
                for u in range(s):
                    ks = k0 + u
                    if ks & 3 == 0:
                        yield from land(0)
                        if gb + 1 < nblk:
                            issue_raw(gb + 1)
                        commit()
                    if g + u >= nb:
                        yield ('sync', 1 + nb + (g + u) % nb, npt)
                    yield from decode_pp(g + u, gb)
                    if ks & 3 == 3:
                        gb += 1
                for u in range(s):
                    yield ('arrive', 1 + (g + u) % nb, npt)
                g += s
        yield from land(0)

    def consumer_pp():
        for st in range(nb - 1):
            if st < G:
                issue_act(st)
            commit()
        g = 0
        for nk_t in tiles:
            for ks in range(nk_t):
                bi = g % nb
                yield from land(nb - 1 - cp_wait)
                yield ('sync', 1 + bi, 256)
                if a[bi] != g or bt[bi] != ('landed', g):
                    raise Broken(f"wgmma of step {g} reads A of step {a[bi]}, activations {bt[bi]}")
                wgmma.append((clock[0] + rnd.randint(5, 40), g))
                if len(wgmma) > wg_wait and wgmma[-1 - wg_wait][0] > clock[0]:
                    yield ('time', max(w[0] for w in wgmma[:len(wgmma) - wg_wait]))
                if ks >= 1 and g - 1 + nb < G:
                    yield ('arrive', 1 + nb + (g - 1) % nb, 256)
                if g + nb - 1 < G:
                    issue_act(g + nb - 1)
                commit()
                g += 1
            # the tile's last step goes back after wgmma.wait_group 0, then the epilogue
            if pp_early_last and g - 1 + nb < G:
                yield ('arrive', 1 + nb + (g - 1) % nb, 256)
            if wgmma and max(w[0] for w in wgmma) > clock[0]:
                yield ('time', max(w[0] for w in wgmma))
            if not pp_keep_last and not pp_early_last and g - 1 + nb < G:
                yield ('arrive', 1 + nb + (g - 1) % nb, 256)
            yield ('time', clock[0] + rnd.randint(1, 60))

    def producer_mc():
        # prefill=sm90pc: raw blocks and decode only, up to nb - 1 steps ahead
        issue_raw(0)
        commit()
        for ks in range(nk):
            if ks & 3 == 0:
                yield from land(0)
                if (ks >> 2) + 1 < nk // 4:
                    issue_raw((ks >> 2) + 1)
                commit()
            if ks >= nb:
                yield ('sync', 1 + nb + ks % nb, npt)
            yield from decode(ks)
        yield from land(0)

    def producer():
        if mc:
            yield from producer_mc()
            return
        issue_raw(0)
        issue_act(0)
        commit()
        if nk > 1:
            issue_act(1)
        commit()
        for ks in range(nk):
            yield from land(cp_wait)
            yield from decode(ks)
            s2 = ks + p
            if s2 < nk:
                if s2 >= nb:
                    yield ('sync', 1 + nb + s2 % nb, npt)
                issue_act(s2)
            if (ks & 3) == raw_at and (ks >> 2) + 1 < nk // 4:
                issue_raw((ks >> 2) + 1)
            commit()
        yield from land(0)

    def consumer():
        # prefill=sm90pc: the MMA warpgroups stage the activations nb - 1 steps ahead
        for st in range(nb - 1 if mc else 0):
            if st < nk:
                issue_act(st)
            commit()
        for ks in range(nk):
            bi = ks % nb
            if mc:
                yield from land(nb - 1 - cp_wait)
            yield ('sync', 1 + bi, 256)
            if a[bi] != ks or bt[bi] != ('landed', ks):
                raise Broken(f"wgmma of step {ks} reads A of step {a[bi]}, activations {bt[bi]}")
            wgmma.append((clock[0] + rnd.randint(5, 40), ks))
            if mc and mc_early and ks + nb - 1 < nk:
                issue_act(ks + nb - 1)
            if len(wgmma) > wg_wait and wgmma[-1 - wg_wait][0] > clock[0]:
                yield ('time', max(w[0] for w in wgmma[:len(wgmma) - wg_wait]))
            if ks >= 1 and ks - 1 + nb < nk:
                yield ('arrive', 1 + nb + (ks - 1) % nb, 256)
            if mc and not mc_early:
                if ks + nb - 1 < nk:
                    issue_act(ks + nb - 1)
                commit()
            elif mc:
                commit()
        if wgmma:
            yield ('time', max(w[0] for w in wgmma))

    procs = {'P': producer_pp(), 'C': consumer_pp()} if pp else {'P': producer(), 'C': consumer()}
    state = {k: ('run',) for k in procs}
    done = set()
    while len(done) < 2:
        runnable = [k for k in procs if k not in done and state[k][0] == 'run']
        if not runnable:
            timed = [state[k][1] for k in procs if k not in done and state[k][0] == 'time']
            if not timed:
                raise Broken(f"deadlock: {state}")
            clock[0] = max(clock[0], min(timed))
            for k in procs:
                if k not in done and state[k][0] == 'time' and state[k][1] <= clock[0]:
                    state[k] = ('run',)
            continue
        k = rnd.choice(runnable)
        who[0] = k
        try:
            ev = next(procs[k])
        except StopIteration:
            done.add(k)
            continue
        if ev[0] == 'time':
            state[k] = ('time', ev[1]) if ev[1] > clock[0] else ('run',)
            continue
        kind, bid, n = ev
        bar = bars.setdefault(bid, 0) + n
        if bar > nthr:
            raise Broken(f"barrier {bid} over-arrived")
        if kind == 'sync':
            state[k] = ('bar', bid)
        if bar == nthr:
            bar = 0
            for k2 in procs:
                if state[k2] == ('bar', bid):
                    state[k2] = ('run',)
        bars[bid] = bar


def sweep(seeds, nps=(1, 2, 3), **kw):
    bad = []
    for np_ in nps:
        for nk in (4, 8, 12, 16, 28, 112):
            for seed in range(seeds):
                try:
                    run(np_, nk, seed, **kw)
                except Broken as e:
                    bad.append((np_, nk, seed, str(e)))
    return bad


PP_TILES = ([4], [8], [4, 4], [8, 4, 12], [4, 4, 4, 4, 4, 4, 4], [28, 28, 24], [24] * 7, [112, 112, 112])


def sweep_pp(seeds, **kw):
    bad = []
    for tiles in PP_TILES:
        for seed in range(seeds):
            try:
                run(2, 0, seed, mc=True, tiles=tiles, **kw)
            except Broken as e:
                bad.append((2, sum(tiles), seed, str(e)))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--seeds', type=int, default=200, help='random schedules per (producers, K steps)')
    ap.add_argument('--mutate', action='store_true', help='also run broken schedules, which must fail')
    args = ap.parse_args()
    bad = sweep(args.seeds)
    print(f"tile_p schedule: {3 * 6 * args.seeds} runs, {len(bad)} failures")
    bad_mc = sweep(args.seeds, nps=(2,), mc=True)
    print(f"tile_p schedule, activations by the MMA warpgroups (sm90pc): {6 * args.seeds} runs, "
          f"{len(bad_mc)} failures")
    for b in (bad + bad_mc)[:5]:
        print("  NP=%d nk=%d seed=%d: %s" % b)
    bad_pp = sweep_pp(args.seeds) + sweep_pp(args.seeds, s=2)
    print(f"tile_pp schedule, persistent (sm90pp, sm90pp2): {2 * len(PP_TILES) * args.seeds} runs, "
          f"{len(bad_pp)} failures")
    for b in bad_pp[:5]:
        print("  NP=%d steps=%d seed=%d: %s" % b)
    ok = not bad and not bad_mc and not bad_pp
    if args.mutate:
        for name, kw in (("staging distance 3 with 4 buffers", dict(p=3)),
                         ("2 buffers", dict(nb=2)),
                         ("one raw slot", dict(nr=1)),
                         ("buffer returned before its wgmma finished", dict(wg_wait=99)),
                         ("decode before its copies landed", dict(cp_wait=2)),
                         ("sm90pc: activations staged before the wgmma wait", dict(mc=True, mc_early=True)),
                         ("sm90pc: wgmma before its activations landed", dict(mc=True, cp_wait=0)),
                         ("sm90pc: one raw slot", dict(mc=True, nr=1)),
                         ("sm90pc: buffer returned before its wgmma finished", dict(mc=True, wg_wait=99))):
            n = len(sweep(max(args.seeds // 10, 5), **kw))
            print(f"mutation '{name}': {n} failures")
            ok = ok and n > 0
        for name, kw in (("sm90pp: a tile's last step never goes back", dict(pp_keep_last=True)),
                         ("sm90pp: a tile's last step goes back before its wgmmas finished",
                          dict(pp_early_last=True)),
                         ("sm90pp: one raw slot", dict(nr=1)),
                         ("sm90pp2: one raw slot", dict(nr=1, s=2)),
                         ("sm90pp2: wgmma before its activations landed", dict(cp_wait=0, s=2)),
                         ("sm90pp: buffer returned before its wgmma finished", dict(wg_wait=99)),
                         ("sm90pp with 4 steps per hand-over (S >= NB - 1)", dict(s=4))):
            n = len(sweep_pp(max(args.seeds // 10, 5), **kw))
            print(f"mutation '{name}': {n} failures")
            ok = ok and n > 0
    raise SystemExit(0 if ok else 1)


if __name__ == '__main__':
    main()
