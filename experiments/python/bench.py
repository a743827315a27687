#!/usr/bin/env python3
"""The Python-path figures of issue 20, in one run on a GPU machine (each a ratio measured here):

 1. overhead: one MoE layer call through the Python package (strata.Engine.moe_forward on
    CUDA tensors, PyTorch's current stream) vs the same call from C (tests/bench/bench_api.c),
    back-to-back calls, every expert in VRAM; Qwen3-30B-A3B and Kimi-K3.1 layer shapes
    (`strata synth`, tier formats), T = 1 and 16.  Ratio = Python us/call / C us/call.  Also the
    host-only cost of a call on each path (what a call takes to return while the device works
    behind it) and their difference: the Python package's own per-call cost.
 2. decode: tok/s of the runner (strata.load, batch 1, greedy) with the Strata backend (every
    expert resident in VRAM, tier formats) vs the same runner with the batched BF16 backend
    (one GEMM per active expert), same non-routed weights, Qwen3-30B-A3B shape.
 3. tiers: the Strata backend with budgets that force all three tiers (VRAM = hot set + 256 MiB,
    RAM = warm set + 256 MiB, cold experts read from the shards), decode tok/s vs the bound set
    by the bytes each link moved per decode token (as experiments/gpu-replay computes it:
    NVMe and PCIe bytes at the bandwidths `strata calibrate` measures in this run, HBM bytes of
    the routed experts; tok/s <= 1 / max(link times)).

    python3 experiments/python/bench.py --strata build/release/bin/strata \\
        --bench-api build/release/bench/bench_api --out out/python

The Qwen-shaped model has the real layer shapes (hidden 2048, 32 heads of 128, 4 KV heads,
128 experts of 768, top-8) but --layers MoE layers (default 8 of 48) and a 32000-token
vocabulary, random weights; the Strata backend's shards are `strata synth --codes random` of
the same shape (random tier blocks: the same bytes and instructions as real ones), so both
backends do the same work per token, not the same arithmetic.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import torch  # noqa: E402

import strata  # noqa: E402
from strata.backends import BatchedBackend, StrataBackend  # noqa: E402
from strata.tiny import MemoryCheckpoint, make_tensors  # noqa: E402

QWEN = "qwen3-30b-a3b"
DEV, GPU, DTYPE = "cuda", "1", torch.bfloat16


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()
KIMI = "kimi-k3.1:layers=1,experts=64"


def sh(*cmd, **kw):
    r = subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), r.stdout[-3000:]))
    return r.stdout


def synth(a, spec, d):
    if not os.path.exists(os.path.join(d, "shard-00000.strata")):
        sh(a.strata, "synth", "--preset", spec, "--out", d, "--format", "tiered", "--codes", "random",
           "--threads", "16", "--force")
    return d


def log(*x):
    print(*x, flush=True)


# ---- 1. overhead -------------------------------------------------------------------------------

def py_calls(eng, T, iters, warm):
    """(us per call over iters back-to-back calls and one sync, host us per call: what the first
    min(iters, 64) calls took to return, as bench_api measures both)."""
    E, k, H = eng.store.shape["n_experts"], eng.store.shape["top_k"], eng.hidden
    x = torch.rand(T, H, device=DEV) - 0.5
    y = torch.zeros(T, H, device=DEV)
    w = torch.full((T, k), 1.0 / k)
    ids = [torch.tensor([[(i * 3 * k + t * k + j) % E for j in range(k)] for t in range(T)], dtype=torch.int32)
           for i in range(iters + warm)]
    n_host = min(iters, 64)
    t_host = None
    for i in range(iters + warm):
        if i == warm + n_host:
            t_host = time.perf_counter()
        if i == warm:
            sync()
            t0 = time.perf_counter()
        eng.moe_forward(i, 0, x, y, ids[i], w)
    t_host = t_host or time.perf_counter()
    sync()
    return (time.perf_counter() - t0) / iters * 1e6, (t_host - t0) / n_host * 1e6


def overhead(a, res):
    rows = []
    for name, spec in (("qwen3-30b-a3b", QWEN + ":layers=1"), ("kimi-k3.1 (64 experts)", KIMI)):
        d = synth(a, spec, os.path.join(a.work, name.split()[0] + "-1layer"))
        with strata.Store(d) as s, strata.Engine(s, "8G", "1G", place="static:promote=all", gpu=GPU, max_tokens=64) as eng:
            touch_all(eng)
            for T in (1, 16):
                cs, ps, ch, ph = [], [], [], []
                for rep in range(a.reps):
                    out = json.loads(sh(a.bench_api, d, str(T), str(a.iters), "30").strip().splitlines()[-1])
                    cs.append(out["us_per_call"])
                    ch.append(out["host_us_per_call"])
                    p, h = py_calls(eng, T, a.iters, 30)
                    ps.append(p)
                    ph.append(h)
                c, p = statistics.median(cs), statistics.median(ps)
                hc, hp = statistics.median(ch), statistics.median(ph)
                rows.append({"shape": name, "tokens": T, "c_us": round(c, 2), "python_us": round(p, 2),
                             "ratio": round(p / c, 4), "c_all": cs, "python_all": [round(v, 2) for v in ps],
                             "c_host_us": round(hc, 2), "python_host_us": round(hp, 2),
                             "python_host_extra_us": round(hp - hc, 2), "c_host_all": ch,
                             "python_host_all": [round(v, 2) for v in ph]})
                log("overhead %-24s T=%-2d  C %8.2f us  Python %8.2f us  ratio %.3f | host only: C %.2f us, "
                    "Python %.2f us (+%.2f)" % (name, T, c, p, p / c, hc, hp, hp - hc))
    res["overhead"] = rows


# ---- 2./3. the runner ----------------------------------------------------------------------------

def qwen_config(layers):
    return {"model_type": "qwen3_moe", "vocab_size": 32000, "hidden_size": 2048, "num_hidden_layers": layers,
            "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "rms_norm_eps": 1e-6,
            "rope_theta": 1000000.0, "max_position_embeddings": 4096, "num_experts": 128,
            "num_experts_per_tok": 8, "moe_intermediate_size": 768, "intermediate_size": 6144,
            "norm_topk_prob": True, "tie_word_embeddings": False}


def decode_tok_s(model, n_prompt, n_new, on_step=None):
    """Greedy decode, one sync per token; (tok/s over the decode steps, stats before, after)."""
    prompt = [(i * 7919) % 32000 for i in range(n_prompt)]
    model.reset(1, n_prompt + n_new + 1)
    logits = model.forward(torch.tensor([prompt]))
    sync()
    before = on_step() if on_step else None
    t0 = time.perf_counter()
    for _ in range(n_new):
        nxt = int(logits[0, -1].argmax())
        logits = model.forward(torch.tensor([[nxt]]))
    sync()
    dt = time.perf_counter() - t0
    return n_new / dt, before, (on_step() if on_step else None)


def touch_all(eng):
    """Use every expert of every layer once (zero activations)."""
    E, k, H = eng.store.shape["n_experts"], eng.store.shape["top_k"], eng.hidden
    T = (E + k - 1) // k
    ids = torch.tensor([[(t * k + j) % E for j in range(k)] for t in range(T)], dtype=torch.int32)
    w = torch.zeros(T, k)
    x = torch.zeros(T, H, device=DEV)
    y = torch.zeros(T, H, device=DEV)
    for layer in range(eng.n_moe_layers):
        eng.moe_forward(0, layer, x, y, ids, w)
    sync()


def runner(a, res):
    cfg = qwen_config(a.layers)
    d = synth(a, "%s:layers=%d" % (QWEN, a.layers), os.path.join(a.work, "qwen-%d" % a.layers))
    t0 = time.time()
    tensors = make_tensors(cfg, seed=1, device=DEV)
    log("random checkpoint on the GPU: %.1f s" % (time.time() - t0))
    ck = MemoryCheckpoint(cfg, tensors)
    if "runner" in a.only:
        decode_vs_bf16(a, res, d, ck, tensors)
    else:  # --only tiers: the routed experts come from the shards alone
        for k in [k for k in tensors if ".experts." in k]:
            del tensors[k]
    tiers(a, res, d, ck)


def decode_vs_bf16(a, res, d, ck, tensors):
    # 2. batched BF16 vs Strata with every expert in VRAM
    mb = strata.load(ck, BatchedBackend(), DEV, DTYPE)
    decode_tok_s(mb, 8, 4)
    bf = [decode_tok_s(mb, a.prompt, a.tokens)[0] for _ in range(a.reps)]
    del mb
    for k in [k for k in tensors if ".experts." in k]:
        del tensors[k]
    sync()
    if DEV == "cuda":
        torch.cuda.empty_cache()
    # the tier table keeps warm and cold experts out of VRAM at open; promote=all keeps every
    # expert in VRAM once used, and one pass over all of them makes the whole model resident
    sb = StrataBackend(d, vram="4G", ram="1G", place="static:promote=all", gpu=GPU, max_tokens=64)
    touch_all(sb.engine)
    st0 = sb.stats()
    ms = strata.load(ck, sb, DEV, DTYPE)
    decode_tok_s(ms, 8, 4)
    sv = [decode_tok_s(ms, a.prompt, a.tokens)[0] for _ in range(a.reps)]
    b, s = statistics.median(bf), statistics.median(sv)
    st1 = sb.stats()
    moved = st1["bytes_nvme_ram"] + st1["bytes_nvme_vram"] + st1["bytes_ram_vram"] - \
        (st0["bytes_nvme_ram"] + st0["bytes_nvme_vram"] + st0["bytes_ram_vram"])
    res["decode"] = {"layers": a.layers, "tokens": a.tokens, "bf16_tok_s": round(b, 2), "strata_tok_s": round(s, 2),
                     "ratio": round(s / b, 4), "bf16_all": [round(v, 2) for v in bf],
                     "strata_all": [round(v, 2) for v in sv], "vram_used_bytes": st0["used_vram"],
                     "bytes_moved_while_decoding": moved, "hits_vram_share":
                     round((st1["hits_vram"] - st0["hits_vram"]) / max(st1["accesses"] - st0["accesses"], 1), 4)}
    log("decode  batched bf16 %.2f tok/s, strata (all in VRAM: %.0f MB, %d bytes moved) %.2f tok/s, ratio %.3f" %
        (b, st0["used_vram"] / 1e6, moved, s, s / b))
    del ms
    sb.close()


def tiers(a, res, d, ck):
    """3. all three tiers vs the link bound."""
    cost_path = os.path.join(a.out, "cost.json")
    sh(a.strata, "calibrate", "--model", d, "--bytes", "1G", "-o", cost_path)
    cost = json.load(open(cost_path))
    insp = json.loads(sh(a.strata, "inspect", d, "--json"))
    tiers = insp["tiers"]
    hot, warm = tiers[0]["extent_bytes"], tiers[1]["extent_bytes"]
    nexp = sum(t["experts"] for t in tiers)
    mean_payload = sum(t["payload_bytes"] for t in tiers) / nexp
    vram, ram = hot + (256 << 20), warm + (256 << 20)
    nv, pc, hb = cost["nvme_gbps"] * 1e9, cost["pcie_gbps"] * 1e9, cost.get("hbm_gbps", 3000) * 1e9
    log("links: nvme %.2f GB/s, pcie %.2f GB/s, hbm %.0f GB/s; budgets vram %d ram %d" %
        (nv / 1e9, pc / 1e9, hb / 1e9, vram, ram))
    rows = []
    for pf in a.prefetch:
        sb = StrataBackend(d, vram=vram, ram=ram, place="static", evict="lru", prefetch=pf, gpu=GPU, max_tokens=64)
        m = strata.load(ck, sb, DEV, DTYPE)
        decode_tok_s(m, 8, 4)
        tok_s, s0, s1 = decode_tok_s(m, a.prompt, a.tiers_tokens, sb.stats)
        dl = {k: s1[k] - s0[k] for k in s1 if isinstance(s1[k], (int, float))}
        n = a.tiers_tokens
        t_nvme = (dl["bytes_nvme_ram"] + dl["bytes_nvme_vram"]) / nv / n
        t_pcie = (dl["bytes_ram_vram"] + dl["bytes_nvme_vram"]) / pc / n
        t_hbm = dl["accesses"] * mean_payload / hb / n
        bound = 1 / max(t_nvme, t_pcie, t_hbm)
        acc = max(dl["accesses"], 1)
        row = {"config": sb.engine.name, "decode_tok_s": round(tok_s, 3), "bound_tok_s": round(bound, 3),
               "ratio": round(tok_s / bound, 4), "hit_vram": round(dl["hits_vram"] / acc, 4),
               "hit_ram": round(dl["hits_ram"] / acc, 4), "hit_nvme": round(dl["hits_nvme"] / acc, 4),
               "nvme_mb_per_tok": round((dl["bytes_nvme_ram"] + dl["bytes_nvme_vram"]) / n / 1e6, 3),
               "pcie_mb_per_tok": round((dl["bytes_ram_vram"] + dl["bytes_nvme_vram"]) / n / 1e6, 3),
               "t_nvme_ms": round(t_nvme * 1e3, 3), "t_pcie_ms": round(t_pcie * 1e3, 3),
               "t_hbm_ms": round(t_hbm * 1e3, 3), "stall_ms_per_tok": round(dl["stall_ms"] / n, 3),
               # the share of decode time each link had a move outstanding, the disk's mean queue
               # depth meanwhile, reads and waits for moves per token (the engine's link counters)
               "nvme_busy": round(dl.get("nvme_busy_ms", 0) / 1e3 * tok_s / n, 4),
               "pcie_busy": round(dl.get("pcie_busy_ms", 0) / 1e3 * tok_s / n, 4),
               "nvme_qd": round(dl.get("nvme_qd_ms", 0) / dl["nvme_busy_ms"], 2) if dl.get("nvme_busy_ms") else 0,
               "nvme_reads_per_tok": round(dl.get("nvme_reads", 0) / n, 2),
               "waits_per_tok": round(dl.get("waits", 0) / n, 2)}
        rows.append(row)
        log("tiers   %-52s %.2f tok/s, bound %.2f, ratio %.3f (vram %.2f ram %.2f nvme %.2f; busy nvme %.2f "
            "pcie %.2f, qd %.1f)" % (row["config"], tok_s, bound, tok_s / bound, row["hit_vram"], row["hit_ram"],
                                     row["hit_nvme"], row["nvme_busy"], row["pcie_busy"], row["nvme_qd"]))
        del m
        sb.close()
    res["tiers"] = {"links_gbps": {"nvme": nv / 1e9, "pcie": pc / 1e9, "hbm": hb / 1e9}, "vram_bytes": vram,
                    "ram_bytes": ram, "tokens": a.tiers_tokens, "rows": rows}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--strata", default="build/release/bin/strata")
    ap.add_argument("--bench-api", default="build/release/bench/bench_api")
    ap.add_argument("--work", help="shards are written (and reused) here (default: a new folder under $TMPDIR, "
                    "removed at the end)")
    ap.add_argument("--out", default="out/python", help="results.json and cost.json")
    ap.add_argument("--layers", type=int, default=8, help="MoE layers of the Qwen-shaped model (default 8)")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=48, help="decode tokens per measurement (figure 2)")
    ap.add_argument("--tiers-tokens", type=int, default=48, help="decode tokens per measurement (figure 3)")
    ap.add_argument("--iters", type=int, default=300, help="layer calls per overhead measurement")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (median)")
    ap.add_argument("--prefetch", nargs="+", default=["none", "lookahead:depth=1", "lookahead:depth=2"])
    ap.add_argument("--only", nargs="+", default=["overhead", "runner"], choices=["overhead", "runner", "tiers"],
                    help="overhead: figure 1; runner: figures 2 and 3; tiers: figure 3 alone")
    ap.add_argument("--cpu-smoke", action="store_true", help="run the code paths on the CPU (host engine, float32): "
                    "a check of this script, no figure")
    a = ap.parse_args()
    global DEV, GPU, DTYPE
    if a.cpu_smoke:
        DEV, GPU, DTYPE = "cpu", "0", torch.float32
    elif not torch.cuda.is_available() or strata.gpu_count() == 0:
        print("SKIP bench: no GPU usable by PyTorch and libstrata")
        return 0
    own_work = not a.work
    if own_work:
        a.work = tempfile.mkdtemp(prefix="strata-py-")
    os.makedirs(a.work, exist_ok=True)
    os.makedirs(a.out, exist_ok=True)
    res = {"gpu": torch.cuda.get_device_name(0) if DEV == "cuda" else "none (cpu smoke)", "torch": torch.__version__, "date": time.strftime("%Y-%m-%d")}
    try:
        if "overhead" in a.only:
            overhead(a, res)
        if "runner" in a.only or "tiers" in a.only:
            runner(a, res)
    finally:
        with open(os.path.join(a.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1)
        if own_work:
            shutil.rmtree(a.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
