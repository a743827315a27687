"""Quality of a MoE checkpoint on Strata's tier formats, against its BF16 weights.

    python3 -m strata.eval --model CKPT --strata build/release/bin/strata --corpus /usr/lib/python3.12 \
        --out out/eval [--shards 3] [--windows 32] [--seq 512]
    python3 -m strata.eval --model tests/data/moe-tiny --heldout-text tests/data/moe-tiny/heldout.txt \
        --profile-text tests/data/moe-tiny/train-sample.txt --strata build/release/bin/strata --out out/eval
    python3 -m strata.eval --model tests/data/moe-tiny --heldout-text tests/data/moe-tiny/heldout.txt \
        --on-miss-gates 0.05,0.1,0.2,1 --out out/on-miss     # precision on miss (below)

With --on-miss-gates, instead: the quality cost of precision on miss (HOBBIT-style; the engine's
on_miss=lowbit option, strata/engine.h).  The checkpoint is quantized 15/30/55 with a low-bit (cold
format) copy beside each hot/warm expert (`strata quantize --lowbit-copies`); held-out windows are
decoded token by token (one token per engine step, as in generation; teacher-forced) through the
runner's Strata backend, with a VRAM budget of --on-miss-vram (a share of all expert bytes), no RAM
tier (every miss reads NVMe), place=cache, evict=lru: once with on_miss=full and once per gate
threshold G with on_miss=lowbit:gate=G (a miss on an expert whose gate weight is below G computes
from its copy).  Each run is compared with the BF16 model (KLD, top-1, top-5, perplexity) and with
the on_miss=full run; engine counters say how often copies served and the bytes they saved.
Writes OUT/on_miss.csv and OUT/on_miss.json.

Steps, all recorded in OUT:
 1. profile: the BF16 model routes windows of training text; per (layer, expert) top-k counts ->
    counts.csv (the popularity `strata quantize --counts` ranks by);
 2. quantize (`strata quantize --naming auto`) all experts hot, all warm, all cold, and 15/30/55
    tiered by that popularity (shards kept in OUT/q-popularity for replay), then
    `strata dequantize` each: the BF16 weights the tier formats give;
 3. the random control: 15/30/55 with each layer's experts ranked at random (seeds 1..N), the
    same number of experts per tier and so the same bytes; its weights are composed per expert
    from the all-hot / all-warm / all-cold files (quantization is per expert), and the same
    composition of the popularity tier table is checked bit for bit against the real tiered
    shards' dequantized weights;
 4. evaluate every configuration on --shards disjoint shards of held-out text (next-byte
    prediction over windows of --seq bytes): perplexity (per byte) and bits/byte, and against the
    BF16 model: mean KL(P_bf16 || P_config) in nats, top-1 agreement (same argmax), top-5
    agreement (the BF16 argmax is in the config's top 5);
 5. results.csv (one row per configuration and shard), summary.csv / summary.json (mean, min, max
    over shards), goals.json (the issue's goals, met or not), quality.pdf / quality.png.

Format per tier (--tier-formats 'q4,warm,cold;q3,warm,cold' [--tier-splits 15/30/55,30/40/30]): step 2
also quantizes every expert in each added format (all-q4, all-q3) and each split by popularity with
the trellis formats and with each choice (popularity-30/40/30, popularity-15/30/55 q4,warm,cold, ...);
each of those is quantized for real and its dequantized shards are checked bit for bit against the
composition of the per-format files and against the tier rule.  Every row carries its split, the
tiers' formats, its packed expert bytes and bits per weight (extents incl. padding / routed
parameters), so quality can be read against size (experiments/bits-vs-tiers).
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from .hfckpt import CheckpointError, cli_main, expert_name, load_checkpoint, pick_device, read_safetensors
from .train import load_corpus, load_text, log, windows

SPLIT = (15, 30, 55)
TRELLIS = ("hot", "warm", "cold")  # the tier formats; --tier-formats adds choices like q4,warm,cold


def parse_splits(spec):
    """--tier-splits 15/30/55,30/40/30 -> [(15, 30, 55), (30, 40, 30)] (percent of each layer's experts)."""
    out = []
    for item in filter(None, spec.split(",")):
        try:
            v = tuple(int(x) for x in item.split("/"))
        except ValueError:
            v = ()
        if len(v) != 3 or min(v) < 0 or sum(v) != 100:
            raise CheckpointError("--tier-splits %s: '%s' is not H/W/C percent summing to 100" % (spec, item))
        out.append(v)
    return out


def parse_formats(spec):
    """--tier-formats 'q4,warm,cold;q3,warm,cold' -> [('q4', 'warm', 'cold'), ...] (hot tier first;
    strata quantize --formats checks the names)."""
    out = []
    for item in filter(None, spec.split(";")):
        v = tuple(x.strip() for x in item.split(","))
        if len(v) != 3 or not all(v):
            raise CheckpointError("--tier-formats %s: '%s' is not three formats H,W,C" % (spec, item))
        out.append(v)
    return out


def tiered_name(split, formats):
    """popularity-15/30/55 (the trellis formats) or popularity-30/40/30 q4,warm,cold."""
    n = "popularity-%d/%d/%d" % split
    return n if tuple(formats) == TRELLIS else "%s %s" % (n, ",".join(formats))


def split_counts(n, split=SPLIT):
    """Experts per tier in a layer of n: strata's rule (docs/quantize.md), round halves up."""
    nh = int(math.floor(n * split[0] / 100.0 + 0.5))
    nhw = int(math.floor(n * (split[0] + split[1]) / 100.0 + 0.5))
    return nh, nhw - nh, n - nhw


def tier_table(counts, split=SPLIT):
    """counts [L, E] -> tiers [L, E] (0 hot, 1 warm, 2 cold): per layer by count, ties lower id."""
    L, E = counts.shape
    nh, nw, _ = split_counts(E, split)
    t = np.full((L, E), 2, dtype=np.int64)
    for l in range(L):
        order = sorted(range(E), key=lambda e: (-counts[l, e], e))
        for r, e in enumerate(order):
            t[l, e] = 0 if r < nh else (1 if r < nh + nw else 2)
    return t


class _CountingBackend:
    """The runner's batched BF16 backend, counting each MoE layer's routed experts."""

    def __init__(self, n_layers, n_experts):
        from .backends import BatchedBackend
        self.inner = BatchedBackend()
        self.needs_checkpoint_experts = True
        self.name = "bf16"
        self.counts = np.zeros((n_layers, n_experts), dtype=np.int64)
        self.mass = np.zeros((n_layers, n_experts), dtype=np.float64)
        self.counting = False

    def attach(self, model):
        self.inner.attach(model)

    def experts(self, block, x, ids, weights, pred, step):
        if self.counting:
            import torch
            self.counts[block.moe_idx] += np.bincount(ids.reshape(-1).cpu().numpy(),
                                                      minlength=self.counts.shape[1])
            # router probability mass: the softmax over all experts, summed over the tokens
            p = torch.nn.functional.linear(x.to(block.router.weight.dtype), block.router.weight).float()
            self.mass[block.moe_idx] += p.softmax(-1).sum(0).double().cpu().numpy()
        return self.inner.experts(block, x, ids, weights, pred, step)


def build_model(ckpt, device):
    """(MoeConfig, runner) for a checked checkpoint: the runner (strata.model) with the batched
    BF16 backend, BF16 on CUDA, float32 on the CPU."""
    import torch
    from .model import load
    c, _, _ = load_checkpoint(ckpt)
    be = _CountingBackend(c.num_hidden_layers, c.num_experts)
    m = load(ckpt, be, str(device), torch.bfloat16 if device.type == "cuda" else torch.float32)
    m.orig_experts = [(blk.w_gu, blk.w_down) for _, blk, _ in m.moe]
    return c, m


def set_experts(model, c, experts):
    """Routed experts of every MoE layer from {HF name: tensor} (None: the checkpoint's own)."""
    import torch
    for li, (_, blk, _) in enumerate(model.moe):
        if experts is None:
            blk.w_gu, blk.w_down = model.orig_experts[li]
            continue
        gu, dn = [], []
        for e in range(c.num_experts):
            gu.append(torch.cat((experts[expert_name(li, e, "gate")], experts[expert_name(li, e, "up")]), 0))
            dn.append(experts[expert_name(li, e, "down")])
        blk.w_gu = torch.stack(gu).to(model.device, model.dtype)
        blk.w_down = torch.stack(dn).to(model.device, model.dtype)


def forward_logits(model, x):
    """Teacher-forced logits [B, T, V] of windows x [B, T] (a fresh KV cache)."""
    model.reset(x.shape[0], x.shape[1])
    return model.forward(x)


def profile_counts(model, data, seq, n_windows, batch, device):
    import torch
    w = windows(data, seq, n_windows)
    be = model.backend
    be.counts[:] = 0
    be.mass[:] = 0
    be.counting = True
    try:
        for i in range(0, len(w), batch):
            forward_logits(model, torch.from_numpy(w[i:i + batch, :-1].astype(np.int64)))
    finally:
        be.counting = False
    return be.counts.copy(), be.mass.copy(), int(w.shape[0] * seq)


def run(cmd, what):
    t = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode:
        raise CheckpointError("%s failed (exit %d): %s\n%s" % (what, p.returncode, " ".join(cmd), p.stderr.strip()))
    return p.stdout, time.time() - t


def quantize(strata, ckpt, out, split, counts_csv, threads, formats=TRELLIS):
    cmd = [strata, "quantize", "--in", ckpt, "--naming", "auto", "--out", out, "--split", split, "--json",
           "--no-progress", "--formats", ",".join(formats)]
    if counts_csv:
        cmd += ["--counts", counts_csv]
    if threads:
        cmd += ["--threads", str(threads)]
    o, secs = run(cmd, "strata quantize")
    rep = json.loads(o)
    deq = out + ".safetensors"
    run([strata, "dequantize", "--model", out, "--out", deq, "--no-progress"], "strata dequantize")
    return rep, deq


def expert_set(c, path):
    names = {expert_name(l, e, m) for l in range(c.num_hidden_layers) for e in range(c.num_experts)
             for m in ("gate", "up", "down")}
    t, meta = read_safetensors(path, names)
    miss = names - set(t)
    if miss:
        raise CheckpointError("%s: missing expert tensor '%s'" % (path, sorted(miss)[0]))
    return t, meta


def compose(c, sets, tiers):
    """Experts of tier table tiers [L, E] from the per-format sets [hot, warm, cold]."""
    out = {}
    for l in range(c.num_hidden_layers):
        for e in range(c.num_experts):
            src = sets[int(tiers[l, e])]
            for m in ("gate", "up", "down"):
                n = expert_name(l, e, m)
                out[n] = src[n]
    return out


def shard_windows(data, seq, n_shards, per_shard):
    w = windows(data, seq)
    if len(w) < n_shards:
        raise CheckpointError("held-out text: %d bytes make %d windows of %d, fewer than --shards %d"
                              % (len(data), len(w), seq, n_shards))
    per = min(per_shard, len(w) // n_shards)
    return [w[s * per:(s + 1) * per] for s in range(n_shards)]


def logits_of(model, w, batch, device):
    import torch
    outs = []
    for i in range(0, len(w), batch):
        x = torch.from_numpy(w[i:i + batch, :-1].astype(np.int64))
        lg = forward_logits(model, x)
        outs.append(lg.float().reshape(-1, lg.shape[-1]).to(device))
    return torch.cat(outs)


def metrics(lg, ref, tgt):
    """lg, ref: [N, V] float logits (config, BF16); tgt: [N] next bytes."""
    lp = lg.log_softmax(-1)
    rp = ref.log_softmax(-1)
    nll = float(-lp.gather(1, tgt[:, None]).mean())
    kld = float((rp.exp() * (rp - lp)).sum(-1).mean())
    a1 = ref.argmax(-1)
    top1 = float((lg.argmax(-1) == a1).float().mean())
    top5 = float((lg.topk(5, dim=-1).indices == a1[:, None]).any(-1).float().mean())
    return {"ppl": math.exp(nll), "bits_per_byte": nll / math.log(2), "kld": max(kld, 0.0),
            "top1": top1, "top5": top5, "tokens": int(tgt.numel())}


def evaluate(args):
    import torch
    t0 = time.time()
    choices = parse_formats(args.tier_formats)
    splits = parse_splits(args.tier_splits)
    device = pick_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    c, model = build_model(args.model, device)
    if args.heldout_text:
        he = load_text(args.heldout_text)
        tr = load_text(args.profile_text) if args.profile_text else None
    else:
        if not args.corpus:
            with open(os.path.join(args.model, "config.json")) as f:
                info = json.load(f).get("strata_training", {})
            args.corpus = info.get("corpus")
            if not args.corpus:
                raise CheckpointError("%s/config.json: no strata_training.corpus; give --corpus or --heldout-text"
                                      % args.model)
        tr, he, _ = load_corpus(args.corpus, args.heldout_pct, args.max_bytes)
    if tr is None:
        raise CheckpointError("--heldout-text needs --profile-text (training text to rank experts by)")
    with open(os.path.join(args.out, "heldout-sample.txt"), "wb") as f:  # prompts for strata.record
        f.write(he[:65536].tobytes())
    # 1. popularity from training text
    counts, mass, ptoks = profile_counts(model, tr, args.seq, args.profile_windows, args.batch, device)
    write_counts(os.path.join(args.out, "counts.csv"), counts, "%d")
    write_counts(os.path.join(args.out, "mass.csv"), mass, "%.6f")
    # the ranking the popularity shards are quantized by (strata quantize --counts takes either file)
    rank = counts if args.rank_by == "count" else mass
    ccsv = os.path.join(args.out, "counts.csv" if args.rank_by == "count" else "mass.csv")
    share = np.sort(counts, axis=1)[:, ::-1] / counts.sum(1, keepdims=True)
    nh = split_counts(c.num_experts)[0]
    log("profile: %d training bytes routed; the %d hottest experts of a layer take %.1f%% of its load "
        "(uniform %.1f%%); Gini of the per-layer counts %.3f" % (
            ptoks, nh, 100 * share[:, :nh].sum(1).mean(), 100.0 * nh / c.num_experts, gini(counts)))
    # 2. quantize and dequantize: every expert in each format (the per-format sets), then the
    # popularity-tiered shards, checked against the rule and the per-format sets
    qz = {}
    fsets, fbytes = {}, {}
    for f in list(TRELLIS) + [f for fm in choices for f in fm]:
        if f in fsets:
            continue
        fm = TRELLIS if f in TRELLIS else (f,) + TRELLIS[1:]
        split = ",".join("100" if t == (TRELLIS.index(f) if f in TRELLIS else 0) else "0" for t in range(3))
        rep, deq = quantize(args.strata, args.model, os.path.join(args.out, "q-" + f), split, None, args.qthreads,
                            fm)
        qz[f] = rep
        fsets[f] = expert_set(c, deq)[0]
        t = [x for x in rep["tiers"] if x["experts"]][0]
        fbytes[f] = t["extent_bytes"] // t["experts"]
        log("quantized all %s: %.1f s" % (f, rep.get("seconds", 0)))
    sets = [fsets[f] for f in TRELLIS]
    params = 3 * c.num_hidden_layers * c.num_experts * c.hidden_size * c.moe_intermediate_size
    # per configuration: its split, the tiers' formats and its packed expert bytes (bpw below)
    info = {"bf16": {"split": "", "formats": "bf16", "expert_bytes": 2 * params}}
    for f in fsets:
        info["all-" + f] = {"split": "", "formats": f, "expert_bytes": fbytes[f] * c.num_experts *
                            c.num_hidden_layers}

    def tiered(split, formats):
        """Experts of split by popularity in the tiers' formats: quantized for real, its dequantized
        weights checked against the composition per expert of the per-format sets (quantization
        is per expert) and its tier table against the rule the controls use; (composition, tiers)."""
        name = tiered_name(split, formats)
        tiers = tier_table(rank, split)
        comp = compose(c, [fsets[f] for f in formats], tiers)
        nb = int(sum(fbytes[formats[t]] * int((tiers == t).sum()) for t in range(3)))
        out = os.path.join(args.out, "q-popularity" if name == "popularity-15/30/55" else
                           "q-" + name.replace("/", "-").replace(" ", "-").replace(",", "-"))
        rep, deq = quantize(args.strata, args.model, out, ",".join(map(str, split)), ccsv, args.qthreads, formats)
        qz[name] = rep
        real_set, meta = expert_set(c, deq)
        c_tiers = np.array([int(ch) for ch in meta.get("strata.tiers", "")], dtype=np.int64)
        if c_tiers.size != tiers.size or (c_tiers.reshape(tiers.shape) != tiers).any():
            raise CheckpointError("%s: strata's tier table differs from the rule the controls use" % deq)
        bad = [n for n in comp if not torch.equal(comp[n], real_set[n])]
        if bad:
            raise CheckpointError("%s: tensor '%s' differs from the same format's all-expert shards (%d tensors)"
                                  % (deq, bad[0], len(bad)))
        got = sum(t["extent_bytes"] for t in rep["tiers"])
        if got != nb:
            raise CheckpointError("%s: %d bytes of expert extents, %d from the per-format sizes" % (out, got, nb))
        log("%s: shards == composition of the all-%s files (%d tensors, bit for bit), %.3f bpw"
            % (name, "/".join(formats), len(comp), 8.0 * nb / params))
        info[name] = {"split": "%d/%d/%d" % split, "formats": ",".join(formats), "expert_bytes": nb}
        return comp, tiers

    pop_set, tiers_pop = tiered(SPLIT, TRELLIS)
    rho = expert_stats(c, model, sets, counts, mass, os.path.join(args.out, "experts.csv"))
    configs = [("bf16", None, None), ("all-hot", sets[0], None), ("all-warm", sets[1], None),
               ("all-cold", sets[2], None), ("popularity-15/30/55", pop_set, tiers_pop)]
    # the other popularity measure (router probability mass when ranked by top-k count, and the
    # reverse), composed: whether the choice of measure matters
    other = "mass" if args.rank_by == "count" else "count"
    tiers_oth = tier_table(mass if other == "mass" else counts)
    configs.append(("popularity-%s-15/30/55" % other, compose(c, sets, tiers_oth), tiers_oth))
    # the opposite ranking (least used experts hot): whether popularity is the axis that matters
    tiers_inv = tier_table(-rank)
    configs.append(("inverse-popularity-15/30/55", compose(c, sets, tiers_inv), tiers_inv))
    for s in range(1, args.random_seeds + 1):
        rng = np.random.RandomState(s)
        rc = np.stack([rng.permutation(c.num_experts) for _ in range(c.num_hidden_layers)])
        tr_t = tier_table(rc)
        configs.append(("random-15/30/55-s%d" % s, compose(c, sets, tr_t), tr_t))
    # equal bytes: every ranking of 15/30/55 has the same experts per tier in every layer, and so
    # the same packed bytes (quantization is per expert, one size per format)
    for n, _, tt in configs[5:]:
        info[n] = dict(info["popularity-15/30/55"],
                       expert_bytes=int(sum(fbytes[TRELLIS[t]] * int((tt == t).sum()) for t in range(3))))
    cfg_bytes = {n: info[n]["expert_bytes"] for n, _, tt in configs if tt is not None}
    pop_bytes = sum(t["extent_bytes"] for t in qz["popularity-15/30/55"]["tiers"])
    if set(cfg_bytes.values()) != {pop_bytes}:
        raise CheckpointError("tiered configurations differ in bytes: %s (the popularity shards: %d)"
                              % (cfg_bytes, pop_bytes))
    log("every ranking of 15/30/55: %d bytes of expert extents (%.3f bpw incl. padding)"
        % (pop_bytes, 8.0 * pop_bytes / params))
    # format per tier (--tier-formats, --tier-splits): every expert in each added format, and
    # each split by popularity with the trellis formats and with each choice, quantized for real
    configs += [("all-" + f, fsets[f], None) for f in fsets if f not in TRELLIS]
    for split in splits:
        for fm in [TRELLIS] + choices:
            if (split, fm) != (SPLIT, TRELLIS):
                configs.append((tiered_name(split, fm),) + tiered(split, fm))
    for n in info:
        info[n]["bpw"] = 8.0 * info[n]["expert_bytes"] / params
    # 3. evaluate
    shards = shard_windows(he, args.seq, args.shards, args.windows)
    tgts = [torch.from_numpy(w[:, 1:].astype(np.int64)).reshape(-1).to(device) for w in shards]
    refs = [logits_of(model, w, args.batch, device) for w in shards]
    bppl = [metrics(refs[s], refs[s], tgts[s])["ppl"] for s in range(len(shards))]
    rows = []
    for name, experts, tiers in configs:
        set_experts(model, c, experts)
        for s, w in enumerate(shards):
            lg = refs[s] if experts is None else logits_of(model, w, args.batch, device)
            m = metrics(lg, refs[s], tgts[s])
            m.update(config=name, shard=s, bf16_ppl=bppl[s], hot_share=None if tiers is None else float(
                counts[tiers == 0].sum() / counts.sum()), cold_share=None if tiers is None else float(
                counts[tiers == 2].sum() / counts.sum()), **info[name])
            rows.append(m)
        r0 = [r for r in rows if r["config"] == name]
        log("%-22s ppl %.4f  kld %.4f  top1 %.4f  top5 %.4f" % (
            name, np.mean([r["ppl"] for r in r0]), np.mean([r["kld"] for r in r0]),
            np.mean([r["top1"] for r in r0]), np.mean([r["top5"] for r in r0])))
    set_experts(model, c, None)
    if args.engine_windows:
        # the same tiered shards through the runner's Strata backend (engine + fused kernels on a
        # GPU, the CPU reference otherwise): the path a deployment runs, against the BF16 files
        import torch
        from .backends import StrataBackend
        from .model import load
        be = StrataBackend(os.path.join(args.out, "q-popularity"), vram="2G", ram="2G")
        em = load(args.model, be, be.device, torch.bfloat16 if be.device == "cuda" else torch.float32)
        w = shards[0][:args.engine_windows]
        n = w.shape[0] * args.seq
        m = metrics(logits_of(em, w, args.batch, device), refs[0][:n], tgts[0][:n])
        m.update(config="popularity-15/30/55-engine", shard=0, hot_share=None, cold_share=None,
                 **info["popularity-15/30/55"],
                 bf16_ppl=metrics(refs[0][:n], refs[0][:n], tgts[0][:n])["ppl"])
        rows.append(m)
        be.close()
        log("%-22s ppl %.4f  kld %.4f  top1 %.4f  top5 %.4f  (shard 0, %d windows, engine on the %s)" % (
            "popularity via engine", m["ppl"], m["kld"], m["top1"], m["top5"], len(w), be.device))
    cols = ["config", "split", "formats", "shard", "tokens", "ppl", "bf16_ppl", "bits_per_byte", "kld", "top1",
            "top5", "hot_share", "cold_share", "expert_bytes", "bpw"]
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=cols)
        wr.writeheader()
        for r in rows:
            wr.writerow({k: ("" if r[k] is None else (round(r[k], 6) if isinstance(r[k], float) else r[k]))
                         for k in cols})
    summ = summarize(rows, [n for n, _, _ in configs] +
                     (["popularity-15/30/55-engine"] if args.engine_windows else []))
    goals = check_goals(summ, rows, args.random_seeds)
    qrep = qz["popularity-15/30/55"]
    qs = qrep.get("seconds") or 0
    goals["quantize_mb_per_s"] = round(qrep.get("input_bytes", 0) / qs / 1e6, 1) if qs else None
    goals["quantize_threads"] = args.qthreads or os.cpu_count()
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump({"summary": summ, "goals": goals, "quantize": qz, "profile_tokens": ptoks,
                   "hot_share_of_load": float(share[:, :nh].sum(1).mean()), "gini": gini(counts),
                   "rank_by": args.rank_by, "spearman_use_cold_error": rho, "model": os.path.abspath(args.model),
                   "seconds": round(time.time() - t0, 1)}, f, indent=1)
    with open(os.path.join(args.out, "summary.csv"), "w", newline="") as f:
        keys = ["config"] + [k + s for k in ("ppl", "kld", "top1", "top5") for s in ("", "_min", "_max")] + \
            ["ppl_vs_bf16", "split", "formats", "expert_bytes", "bpw"]
        wr = csv.DictWriter(f, fieldnames=keys)
        wr.writeheader()
        for r in summ:
            wr.writerow({k: (round(r[k], 6) if isinstance(r[k], float) else r[k]) for k in keys})
    with open(os.path.join(args.out, "goals.json"), "w") as f:
        json.dump(goals, f, indent=1)
    plot(summ, rows, os.path.join(args.out, "quality"), args.title)
    log("wrote %s (results.csv, summary.csv, summary.json, goals.json, quality.pdf/png) in %.0f s"
        % (args.out, time.time() - t0))
    print(json.dumps(goals))
    return summ, goals


def expert_stats(c, model, sets, counts, mass, path):
    """experts.csv: per (layer, expert) its use (top-k count, router mass), the RMS of its BF16
    weights and the relative error ||W_q - W|| / ||W|| of each format; logs the mean over layers
    of the Spearman correlation between use and the cold format's error (does a rarely used
    expert lose more to the format?)."""
    err = np.zeros((3,) + counts.shape)
    rms = np.zeros(counts.shape)
    for l in range(c.num_hidden_layers):
        gu, dn = model.orig_experts[l]
        I = c.moe_intermediate_size
        for e in range(c.num_experts):
            ref = {"gate": gu[e, :I], "up": gu[e, I:], "down": dn[e]}
            den = sum(float(ref[m].float().pow(2).sum()) for m in ref)
            n = sum(ref[m].numel() for m in ref)
            rms[l, e] = math.sqrt(den / n)
            for t in range(3):
                num = sum(float((sets[t][expert_name(l, e, m)].to(ref[m].device).float() - ref[m].float()).pow(2).sum())
                          for m in ref)
                err[t, l, e] = math.sqrt(num / den) if den > 0 else 0.0
    with open(path, "w") as f:
        f.write("layer,expert,count,mass,weight_rms,rel_err_hot,rel_err_warm,rel_err_cold\n")
        for l in range(c.num_hidden_layers):
            for e in range(c.num_experts):
                f.write("%d,%d,%d,%.6f,%.6g,%.6f,%.6f,%.6f\n" % (l, e, counts[l, e], mass[l, e], rms[l, e],
                                                               err[0, l, e], err[1, l, e], err[2, l, e]))

    def rank(v):
        r = np.empty(len(v))
        r[np.argsort(v, kind="stable")] = np.arange(len(v))
        return r

    rho = [float(np.corrcoef(rank(counts[l]), rank(err[2, l]))[0, 1]) for l in range(c.num_hidden_layers)]
    rho_rms = [float(np.corrcoef(rank(counts[l]), rank(rms[l]))[0, 1]) for l in range(c.num_hidden_layers)]
    log("experts: relative error hot %.4f warm %.4f cold %.4f (mean); Spearman(use, cold error) per layer "
        "mean %.3f [%.3f, %.3f], Spearman(use, weight RMS) %.3f" % (
            err[0].mean(), err[1].mean(), err[2].mean(), np.mean(rho), min(rho), max(rho), np.mean(rho_rms)))
    return float(np.mean(rho))


def write_counts(path, v, fmt):
    """counts.csv / mass.csv: one row per (MoE layer, expert), the format strata quantize --counts reads."""
    with open(path, "w") as f:
        f.write("layer,expert,count\n")
        for l in range(v.shape[0]):
            for e in range(v.shape[1]):
                f.write(("%d,%d," + fmt + "\n") % (l, e, v[l, e]))


def gini(counts):
    """Mean over layers of the Gini coefficient of the experts' counts (0: uniform)."""
    g = []
    for row in np.asarray(counts, dtype=np.float64):
        x = np.sort(row)
        n, s = len(x), x.sum()
        g.append(0.0 if s == 0 else float((2 * np.arange(1, n + 1) - n - 1).dot(x) / (n * s)))
    return float(np.mean(g))


def decode_logits(model, w):
    """Logits [n*T, V] of windows w [n, T+1], fed one token per forward call (a decode step each,
    a fresh KV cache per window): the engine sees one token's routing per step."""
    import torch
    outs = []
    for row in w:
        x = torch.from_numpy(row[:-1].astype(np.int64))[None, :]
        model.reset(1, x.shape[1])
        outs += [model.forward(x[:, t:t + 1]).float().reshape(1, -1) for t in range(x.shape[1])]
    return torch.cat(outs)


def evaluate_on_miss(args):
    """--on-miss-gates: the quality cost of computing low-gate misses from the low-bit copies."""
    import torch
    from .backends import StrataBackend
    from .model import load
    t0 = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        gates = [float(g) for g in args.on_miss_gates.split(",")]
    except ValueError:
        raise CheckpointError("--on-miss-gates %s: a comma-separated list of gate thresholds" % args.on_miss_gates)
    if not gates or any(not 0 <= g <= 1 for g in gates):
        raise CheckpointError("--on-miss-gates %s: thresholds lie in [0, 1]" % args.on_miss_gates)
    if not args.heldout_text:
        raise CheckpointError("--on-miss-gates needs --heldout-text (the windows decoded token by token)")
    os.makedirs(args.out, exist_ok=True)
    device = torch.device("cpu")  # the engine's host path: one token per step, CPU is fast enough here
    c, ref_model = build_model(args.model, device)
    he = load_text(args.heldout_text)
    w = windows(he, args.seq, args.windows)
    if len(w) < args.windows:
        raise CheckpointError("%s: %d bytes make %d windows of %d, fewer than --windows %d"
                              % (args.heldout_text[0], len(he), len(w), args.seq, args.windows))
    tgt = torch.from_numpy(w[:, 1:].astype(np.int64)).reshape(-1)
    ref = logits_of(ref_model, w, args.batch, device)
    q = os.path.join(args.out, "q-lowbit")
    cmd = [args.strata, "quantize", "--in", args.model, "--naming", "auto", "--out", q, "--split", "15,30,55",
           "--lowbit-copies", "--force", "--json", "--no-progress"]
    if args.qthreads:
        cmd += ["--threads", str(args.qthreads)]
    run(cmd, "strata quantize")
    card, _ = run([args.strata, "inspect", q, "--json"], "strata inspect")
    card = json.loads(card)
    all_bytes = card["total"]["extent_bytes"]
    vram = max(int(all_bytes * args.on_miss_vram) // 4096 * 4096, 4096)
    log("quantized 15/30/55 with %d low-bit copies (%.1f KiB beside %.1f KiB of experts); VRAM budget %.1f KiB "
        "(%.0f%% of the experts), no RAM tier" % (card["lowbit_copies"], card["lowbit_copy_bytes"] / 1024.0,
                                                  all_bytes / 1024.0, vram / 1024.0, 100 * args.on_miss_vram))
    rows, full = [], None
    for g in [None] + gates:
        spec = "full" if g is None else "lowbit:gate=%g" % g
        be = StrataBackend(q, vram=str(vram), ram="0", place="cache", evict="lru", gpu="0",
                           options="on_miss=%s scratch_slots=%d" % (spec, c.num_experts))
        try:
            m = load(args.model, be, "cpu", torch.float32)
            lg = decode_logits(m, w)
            st = be.stats()
        finally:
            be.close()
        r = metrics(lg, ref, tgt)
        if full is None:
            full = lg
        vs = metrics(lg, full, tgt)
        r.update(on_miss=spec, gate=g, kld_vs_full=vs["kld"], top1_vs_full=vs["top1"],
                 accesses=st["accesses"], misses=st["hits_nvme"], substituted=st["substituted"],
                 substituted_share=st["substituted"] / max(st["accesses"], 1),
                 substituted_of_misses=st["substituted"] / max(st["hits_nvme"], 1),
                 bytes_moved=st["bytes_nvme_vram"] + st["bytes_nvme_ram"] + st["bytes_ram_vram"],
                 substitute_bytes_saved=st["substitute_bytes_saved"], hit_rate_vram=st["hits_vram"] /
                 max(st["accesses"], 1), config=st["config"])
        rows.append(r)
        log("%-18s kld %.5f top1 %.4f top5 %.4f ppl %.4f | vs full: kld %.5f top1 %.4f | substituted %d of %d "
            "misses (%.1f%% of accesses), %.1f KiB saved" % (
                spec, r["kld"], r["top1"], r["top5"], r["ppl"], r["kld_vs_full"], r["top1_vs_full"],
                r["substituted"], r["misses"], 100 * r["substituted_share"], r["substitute_bytes_saved"] / 1024.0))
    cols = ["on_miss", "gate", "tokens", "kld", "top1", "top5", "ppl", "bits_per_byte", "kld_vs_full",
            "top1_vs_full", "accesses", "misses", "substituted", "substituted_share", "substituted_of_misses",
            "bytes_moved", "substitute_bytes_saved", "hit_rate_vram", "config"]
    with open(os.path.join(args.out, "on_miss.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        wr.writeheader()
        for r in rows:
            wr.writerow({k: ("" if r[k] is None else (round(r[k], 6) if isinstance(r[k], float) else r[k]))
                         for k in cols})
    out = {"rows": rows, "model": os.path.abspath(args.model), "windows": int(len(w)), "seq": args.seq,
           "vram_bytes": vram, "expert_bytes": all_bytes, "lowbit_copies": card["lowbit_copies"],
           "seconds": round(time.time() - t0, 1)}
    with open(os.path.join(args.out, "on_miss.json"), "w") as f:
        json.dump(out, f, indent=1)
    log("wrote %s (on_miss.csv, on_miss.json) in %.0f s" % (args.out, time.time() - t0))
    return rows


def summarize(rows, names):
    out = []
    for n in names:
        rr = [r for r in rows if r["config"] == n]
        d = {"config": n}
        for k in ("ppl", "kld", "top1", "top5"):
            v = [r[k] for r in rr]
            d[k], d[k + "_min"], d[k + "_max"] = float(np.mean(v)), float(np.min(v)), float(np.max(v))
        d["ppl_vs_bf16"] = float(np.mean([r["ppl"] / r["bf16_ppl"] for r in rr])) - 1  # same tokens
        d.update({k: rr[0][k] for k in ("split", "formats", "expert_bytes", "bpw")})
        out.append(d)
    return out


def check_goals(summ, rows, nseeds):
    by = {r["config"]: r for r in summ}
    pop = by["popularity-15/30/55"]
    shards = sorted({r["shard"] for r in rows})
    per = []
    for s in shards:
        p = [r for r in rows if r["shard"] == s and r["config"] == "popularity-15/30/55"][0]
        rs = [r for r in rows if r["shard"] == s and r["config"].startswith("random-")]
        per.append({"shard": s, "kld_pop": p["kld"], "kld_random": [r["kld"] for r in rs],
                    "top1_pop": p["top1"], "top1_random": [r["top1"] for r in rs],
                    "pop_beats_all_random": bool(all(p["kld"] < r["kld"] and p["top1"] > r["top1"] for r in rs))})
    rnd = [r for r in summ if r["config"].startswith("random-")]

    def wins(name):
        """(KLD wins, top-1 wins, pairs) of configuration name against every (shard, random seed)."""
        kw = tw = n = 0
        for s in shards:
            p = [r for r in rows if r["shard"] == s and r["config"] == name]
            if not p:
                return None
            for r in rows:
                if r["shard"] == s and r["config"].startswith("random-"):
                    kw += p[0]["kld"] < r["kld"]
                    tw += p[0]["top1"] > r["top1"]
                    n += 1
        return "%d of %d" % (kw, n), "%d of %d" % (tw, n)

    others = {n: wins(n) for n in by if n.startswith(("popularity-", "inverse-")) and "engine" not in n
              and n != "popularity-15/30/55" and by[n]["split"] == "15/30/55" and by[n]["formats"] == "hot,warm,cold"}
    return {
        "vs_random": {n: {"kld": w[0], "top1": w[1], "kld_mean": by[n]["kld"], "top1_mean": by[n]["top1"]}
                      for n, w in others.items() if w},
        "popularity_beats_random": bool(all(x["pop_beats_all_random"] for x in per)),
        "popularity_beats_random_kld": "%d of %d" % (sum(x["kld_pop"] < k for x in per for k in x["kld_random"]),
                                                    sum(len(x["kld_random"]) for x in per)),
        "popularity_beats_random_top1": "%d of %d" % (sum(x["top1_pop"] > k for x in per for k in x["top1_random"]),
                                                     sum(len(x["top1_random"]) for x in per)),
        "per_shard": per,
        "random_kld_mean": float(np.mean([r["kld"] for r in rnd])),
        "random_top1_mean": float(np.mean([r["top1"] for r in rnd])),
        "tiered_top1": pop["top1"], "tiered_top5": pop["top5"], "tiered_ppl_vs_bf16": pop["ppl_vs_bf16"],
        "tiered_kld": pop["kld"],
        "inverse_popularity_kld": by.get("inverse-popularity-15/30/55", {}).get("kld"),
        "inverse_popularity_top1": by.get("inverse-popularity-15/30/55", {}).get("top1"),
        "top1_ge_0.90": bool(pop["top1"] >= 0.90), "top5_ge_0.99": bool(pop["top5"] >= 0.99),
        "ppl_within_5pct": bool(pop["ppl_vs_bf16"] <= 0.05), "shards": len(shards), "random_seeds": nseeds,
    }


def plot(summ, rows, base, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("no matplotlib: no plot")
        return
    # the rankings of 15/30/55 and the all-one-format models (the format-per-tier splits: the
    # bits-vs-tiers study's frontier figure)
    names = [r["config"] for r in summ if r["config"] != "bf16" and not r["config"].endswith("-engine")
             and (r["split"] == "" or (r["split"] == "15/30/55" and r["formats"] == "hot,warm,cold"))]
    rnd = [n for n in names if n.startswith("random-")]
    show = [n for n in names if not n.startswith("random-")] + (["random-15/30/55"] if rnd else [])

    def stat(k, n):
        sel = [r for r in rows if (r["config"] in rnd if n == "random-15/30/55" else r["config"] == n)]
        v = [r[k] / r["bf16_ppl"] if k == "ppl" else r[k] for r in sel]  # ppl: ratio on the same shard
        return np.mean(v), np.min(v), np.max(v)

    plt.rcParams.update({"font.size": 7, "axes.titlesize": 7, "axes.labelsize": 7})
    fig, axes = plt.subplots(1, 3, figsize=(3.4, 2.0))
    labels = [n.replace("-15/30/55", "").replace("-", " ").replace("inverse popularity", "inverse")
              .replace("popularity", "popular") for n in show]
    colors = ["#bbbbbb" if n.startswith("all") else ("#9467bd" if n.startswith("popularity-mass") or
              n.startswith("popularity-count") else "#d62728" if n.startswith("pop") else
              ("#ff7f0e" if n.startswith("inverse") else "#1f77b4")) for n in show]
    for ax, (k, lab) in zip(axes, (("kld", "mean KLD (nats)"), ("top1", "top-1 agreement"),
                                   ("ppl", "perplexity / BF16"))):
        st = [stat(k, n) for n in show]
        m = np.array([x[0] for x in st])
        lo = np.array([x[1] for x in st])
        hi = np.array([x[2] for x in st])
        ax.bar(range(len(show)), m, color=colors, yerr=[m - lo, hi - m], capsize=1.5, error_kw={"lw": 0.6})
        ax.set_xticks(range(len(show)))
        ax.set_xticklabels(labels, rotation=90, fontsize=5)
        ax.set_title(lab)
        if k == "kld":
            ax.set_yscale("log")
        if k == "top1":
            ax.set_ylim(max(0, float(lo.min()) - 0.05), 1.0)
            ax.axhline(0.9, color="k", lw=0.5, ls="--")
        if k == "ppl":
            ax.set_ylim(1.0, max(1.06, float(hi.max()) * 1.01))
            ax.axhline(1.05, color="k", lw=0.5, ls="--")
        ax.tick_params(labelsize=5)
    fig.suptitle((title + "\n" if title else "") + "15/30/55 tiers ranked as named; whiskers: min-max over shards",
                 fontsize=5.5)
    fig.tight_layout(pad=0.3)
    fig.savefig(base + ".pdf")
    fig.savefig(base + ".png", dpi=200)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m strata.eval", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + model.safetensors)")
    ap.add_argument("--strata", default="build/release/bin/strata", help="the strata program")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--corpus", action="append", help="corpus directories (default: the checkpoint's own)")
    ap.add_argument("--heldout-pct", type=int, default=5)
    ap.add_argument("--max-bytes", type=int, default=0)
    ap.add_argument("--heldout-text", action="append", help="held-out text file(s) instead of --corpus")
    ap.add_argument("--profile-text", action="append", help="training text file(s) to rank experts by")
    ap.add_argument("--shards", type=int, default=3, help="disjoint held-out shards (the spread)")
    ap.add_argument("--windows", type=int, default=32, help="windows per shard")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--profile-windows", type=int, default=256)
    ap.add_argument("--random-seeds", type=int, default=3)
    ap.add_argument("--tier-formats", default="",
                    help="format per tier: ;-separated choices of the hot,warm,cold tiers' formats evaluated "
                         "beside the trellis ones (e.g. 'q4,warm,cold;q3,warm,cold'): every expert in each "
                         "added format, and each --tier-splits split by popularity in each choice")
    ap.add_argument("--tier-splits", default="15/30/55",
                    help="with --tier-formats: popularity splits H/W/C, comma-separated, each also with the "
                         "trellis formats (default 15/30/55)")
    ap.add_argument("--rank-by", choices=("count", "mass"), default="count",
                    help="popularity: top-k selections per expert (count) or the router's softmax "
                         "probability summed over tokens (mass); the other is evaluated too")
    ap.add_argument("--engine-windows", type=int, default=4,
                    help="windows of shard 0 run through the Strata backend too (0: skip)")
    ap.add_argument("--qthreads", type=int, default=0, help="strata quantize --threads (0: all CPUs)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--title", default="")
    ap.add_argument("--on-miss-gates", default="",
                    help="instead of the tier study: precision on miss at these gate thresholds (e.g. 0.05,0.1,0.2)")
    ap.add_argument("--on-miss-vram", type=float, default=0.25,
                    help="--on-miss-gates: VRAM budget as a share of all expert bytes (default 0.25)")
    args = ap.parse_args(argv)
    if args.on_miss_gates:
        if args.windows == 32 and args.seq == 512:  # the tier study's defaults: too long token by token
            args.windows, args.seq = 4, 256
        return cli_main("strata.eval", evaluate_on_miss, args)
    return cli_main("strata.eval", evaluate, args)


if __name__ == "__main__":
    sys.exit(main())
