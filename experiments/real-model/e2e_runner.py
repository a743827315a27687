#!/usr/bin/env python3
"""Decode tok/s and TTFT of the trained model through the runner (strata.model): the Strata
backend (tiered shards through the engine and the fused kernels) under budgets that force all
three tiers and with every expert in VRAM, for several policies, and the runner's batched BF16
backend (every expert BF16 in VRAM, PyTorch GEMMs) as the peer.  Greedy decode of held-out
prompts; TTFT = the prefill forward until its logits are on the host; decode tok/s over the
generated tokens after the first.  One CSV row per (config, prompt).

    PYTHONPATH=python python3 experiments/real-model/e2e_runner.py --model CKPT --shards Q \
        --text heldout.txt --prompts 4 --prompt-bytes 256 --max-new-tokens 64 --csv runner.csv
"""
import argparse
import csv
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

POLICIES = [("static", "lru", "lookahead:depth=2"), ("static", "lru", "none"), ("cache", "lru", "none"),
            ("cache", "lfu", "none")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--shards", required=True, help="strata quantize output of --model (15/30/55 tiers)")
    ap.add_argument("--text", required=True)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-bytes", type=int, default=256)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--margin", default=16 << 20, type=int, help="bytes added to each tier budget")
    ap.add_argument("--strata", default="build/release/bin/strata")
    ap.add_argument("--csv", required=True)
    a = ap.parse_args()
    import subprocess
    import torch
    from strata.backends import BatchedBackend, StrataBackend
    from strata.model import load
    from strata.record import make_prompts
    from strata.train import load_text
    insp = json.loads(subprocess.check_output([a.strata, "inspect", a.shards, "--json"]))
    tb = [t["extent_bytes"] for t in insp["tiers"]]
    tiers = (tb[0] + a.margin, tb[1] + a.margin)
    allv = (sum(tb) + a.margin, a.margin)
    prompts = make_prompts(load_text([a.text]), a.prompts, a.prompt_bytes)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    runs = [("bf16-all-vram", None, None, None)]
    for pl in POLICIES:
        runs.append(("tiers", pl, tiers, None))
    runs.append(("all-vram", ("static:promote=all", "lru", "none"), allv, None))
    rows = []
    for budget, pol, b, _ in runs:
        if pol is None:
            be = BatchedBackend()
            name = "runner bf16 backend"
        else:
            be = StrataBackend(a.shards, vram=str(b[0]), ram=str(b[1]), place=pol[0], evict=pol[1], prefetch=pol[2])
            name = "place=%s,evict=%s,prefetch=%s" % pol
        m = load(a.model, be, dev)
        for r, p in enumerate(prompts):
            times = []

            def tick(i, tok):
                sync()
                times.append(time.time())
            sync()
            t0 = time.time()
            m.generate([int(x) for x in p], a.max_new_tokens, tick)
            dec = times[-1] - times[0]
            row = {"config": name, "budget": budget, "vram_bytes": b[0] if b else "", "ram_bytes": b[1] if b else "",
                   "prompt": r, "prompt_tokens": len(p), "new_tokens": len(times),
                   "ttft_ms": round((times[0] - t0) * 1e3, 3),
                   "decode_tok_s": round((len(times) - 1) / dec, 3) if dec > 0 else ""}
            if pol is not None:
                st = be.stats()
                for k in ("hits_vram", "hits_ram", "hits_nvme", "bytes_nvme_ram", "bytes_ram_vram", "bytes_nvme_vram"):
                    row[k] = st.get(k, "")
            rows.append(row)
            print(json.dumps(row), flush=True)
        if hasattr(be, "close"):
            be.close()
        del m
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
