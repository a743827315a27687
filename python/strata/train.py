"""Train a small fine-grained MoE language model (Qwen3-MoE style, byte-level) on Python sources
and write a Hugging Face checkpoint (config.json + model.safetensors) that `strata quantize`,
strata.eval and `transformers` (Qwen3MoeForCausalLM) load.

    python3 -m strata.train --corpus /usr/lib/python3.12 --out ckpt --preset mid --time-budget 240
    python3 -m strata.train --corpus /usr/lib/python3.11 --out tiny --preset tiny --steps 300

The corpus is every *.py file under the --corpus directories (sorted, symlinks not followed);
a file is held out when crc32 of its path relative to its corpus root, mod 100, is below
--heldout-pct (a split by file, stable across machines).  Training samples random windows of the
training bytes; the same seed and --steps give the same checkpoint on the same machine and
torch (--time-budget picks --steps from the measured speed of the first steps, and prints it,
so a run can be repeated exactly).  Reported: held-out bits/byte of the model and of a unigram
byte model fitted to the training bytes (add-one smoothing).
"""
import argparse
import json
import math
import os
import sys
import time
import zlib

import numpy as np

from .hfckpt import CheckpointError, MoeConfig, cli_main, pick_device, save_checkpoint

PRESETS = {
    # 2 layers less than the naive probe of the issue, but 64 experts of 256 (top-6): ~0.3 B
    # parameters, ~30 M active per token
    "mid": dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                num_experts=64, num_experts_per_tok=6, moe_intermediate_size=256),
    # <= 8 MB of BF16: the checkpoint CI runs the whole pipeline on
    "tiny": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                 num_experts=16, num_experts_per_tok=4, moe_intermediate_size=64),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- corpus ----------------------------------------------------------------------------------

def corpus_files(roots, heldout_pct):
    """[(path, relpath, heldout)] for every *.py file under roots, sorted."""
    out = []
    seen = set()
    for root in roots:
        if not os.path.isdir(root):
            raise CheckpointError("%s: corpus directory not found" % root)
        for dp, dns, fns in os.walk(root):
            dns.sort()
            for fn in sorted(fns):
                if not fn.endswith(".py"):
                    continue
                p = os.path.join(dp, fn)
                if os.path.islink(p):
                    continue
                rp = os.path.realpath(p)
                if rp in seen:
                    continue
                seen.add(rp)
                rel = os.path.relpath(p, root)
                out.append((p, rel, zlib.crc32(rel.encode()) % 100 < heldout_pct))
    return out


def load_corpus(roots, heldout_pct=5, max_bytes=0):
    """(train bytes, held-out bytes) as uint8 arrays, files joined by a blank line.
    max_bytes caps each split's size (0: no cap), taking files in path order."""
    if isinstance(roots, str):
        roots = [roots]
    files = corpus_files(roots, heldout_pct)
    parts = {False: [], True: []}
    size = {False: 0, True: 0}
    nfiles = {False: 0, True: 0}
    for p, rel, ho in files:
        cap = max_bytes if not ho else (max(1, max_bytes * heldout_pct // 100) if max_bytes else 0)
        if cap and size[ho] >= cap:
            continue
        try:
            with open(p, "rb") as f:
                b = f.read()
        except OSError:
            continue
        if not b.strip():
            continue
        parts[ho].append(b + b"\n\n")
        size[ho] += len(b) + 2
        nfiles[ho] += 1
    if not nfiles[False] or not nfiles[True]:
        raise CheckpointError("%s: no Python text to train on (%d training and %d held-out files with text)"
                              % (", ".join(roots), nfiles[False], nfiles[True]))
    tr = np.frombuffer(b"".join(parts[False]), dtype=np.uint8)
    he = np.frombuffer(b"".join(parts[True]), dtype=np.uint8)
    return tr, he, nfiles


def load_text(paths):
    """Bytes of text files (a held-out sample shipped with the repo)."""
    parts = []
    for p in paths:
        try:
            with open(p, "rb") as f:
                b = f.read()
        except OSError as e:
            raise CheckpointError("%s: %s" % (p, e.strerror))
        if not b.strip():
            raise CheckpointError("%s: no text" % p)
        parts.append(b)
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def unigram_bpb(train, heldout):
    cnt = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    p = cnt / cnt.sum()
    return float(-np.log2(p[heldout]).mean())


def windows(data, T, n=None):
    """Non-overlapping windows of T+1 bytes (input and shifted target), as a [n, T+1] array."""
    m = (len(data) - 1) // T
    if n is not None:
        m = min(m, n)
    idx = np.arange(m)[:, None] * T + np.arange(T + 1)[None, :]
    return data[idx]


def heldout_bpb(model, data, T, batch, device, autocast, max_windows=None):
    import torch
    w = windows(data, T, max_windows)
    tot, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(w), batch):
            x = torch.from_numpy(w[i:i + batch].astype(np.int64)).to(device)
            with autocast():
                lg = model(x[:, :-1])["logits"]
            loss = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), x[:, 1:].reshape(-1),
                                                     reduction="sum")
            tot += float(loss)
            n += x[:, 1:].numel()
    model.train()
    return tot / max(n, 1) / math.log(2)


def autocast_for(device):
    import contextlib
    import torch
    if device.type == "cuda":
        return lambda: torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def train(args):
    import torch
    from .moe import MoeLM
    t0 = time.time()
    device = pick_device(args.device)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    tr, he, nfiles = load_corpus(args.corpus, args.heldout_pct, args.max_bytes)
    log("corpus: %d training files (%.1f MB), %d held-out files (%.1f MB)"
        % (nfiles[False], len(tr) / 1e6, nfiles[True], len(he) / 1e6))
    shape = dict(PRESETS[args.preset])
    for kv in args.set or []:
        k, _, v = kv.partition("=")
        if k not in MoeConfig.KEYS:
            raise SystemExit("--set %s: unknown key (one of %s)" % (kv, ", ".join(MoeConfig.KEYS)))
        shape[k] = int(v)
    c = MoeConfig(**shape, router_aux_loss_coef=args.aux, max_position_embeddings=max(4096, args.seq))
    model = MoeLM(c)
    model.init_weights(args.seed)
    model.to(device)
    nparam = sum(p.numel() for p in model.parameters())
    nexp = sum(p.numel() for n, p in model.named_parameters() if ".mlp.w_" in n)
    active = nparam - nexp + nexp * c.num_experts_per_tok // c.num_experts
    log("model: %d layers, hidden %d, %d experts of %d (top-%d): %.1f M parameters, %.1f M active per token"
        % (c.num_hidden_layers, c.hidden_size, c.num_experts, c.moe_intermediate_size, c.num_experts_per_tok,
           nparam / 1e6, active / 1e6))
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    nodecay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    groups = [{"params": decay, "weight_decay": args.wd}, {"params": nodecay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), fused=device.type == "cuda")
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95))
    ac = autocast_for(device)
    data = torch.from_numpy(tr.copy()).to(device)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    T, B = args.seq, args.batch
    ar = torch.arange(T + 1, device=device)

    def batch():
        off = torch.randint(0, len(tr) - T - 1, (B, 1), generator=gen, device=device)
        x = data[off + ar].long()
        return x[:, :-1], x[:, 1:]

    warm = args.warmup
    steps = args.steps

    def lr_at(s):
        if s < warm:
            return args.lr * (s + 1) / warm
        if not steps:
            return args.lr
        p = min(1.0, (s - warm) / max(1, steps - warm))
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p)))

    model.train()
    s = 0
    tcal = None
    # the speed is measured inside the warm-up, whose learning rates do not depend on the step
    # count: --steps N repeats a --time-budget run that chose N exactly
    cal_end = max(2, min(40, warm))
    tstart = time.time()
    last = tstart
    losses = []
    while True:
        if steps and s >= steps:
            break
        if not steps and s == cal_end:  # --time-budget: steps from the speed of steps cal_end/2..cal_end-1
            if device.type == "cuda":
                torch.cuda.synchronize()
            per = (time.time() - tcal) / (cal_end - cal_end // 2)
            steps = max(s + 1, (int((args.time_budget - (time.time() - tstart)) / per) + s) // 10 * 10)
            log("time budget %.0f s: %.3f s/step -> --steps %d" % (args.time_budget, per, steps))
            if steps <= warm:
                warm = max(1, steps // 10)
        if not steps and s == cal_end // 2:
            if device.type == "cuda":
                torch.cuda.synchronize()
            tcal = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        x, y = batch()
        with ac():
            out = model(x)
            lg = out["logits"]
            ce = torch.nn.functional.cross_entropy(lg.reshape(-1, lg.shape[-1]), y.reshape(-1))
            loss = ce + c.router_aux_loss_coef * out["aux"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        s += 1
        if s % 10 == 0:
            losses.append((s, float(ce) / math.log(2), float(out["aux"])))
        now = time.time()
        if now - last > args.log_every or (steps and s == steps):
            last = now
            el = now - tstart
            eta = el / s * (steps - s) if steps else float("nan")
            log("step %d/%s  train %.3f bits/byte  aux %.3f  lr %.2e  %.0f tok/s  %.0fs elapsed, ETA %.0fs"
                % (s, steps or "?", float(ce) / math.log(2), float(out["aux"]), lr_at(s - 1),
                   s * B * T / el, el, eta))
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.time() - tstart
    hb = heldout_bpb(model, he, T, max(1, B // 2), device, ac, args.eval_windows)
    ub = unigram_bpb(tr, he)
    log("held-out: model %.3f bits/byte, unigram %.3f bits/byte (%d steps, %.0f s, %.0f tok/s)"
        % (hb, ub, s, train_s, s * B * T / train_s))
    extra = {"seed": args.seed, "steps": s, "batch": B, "seq": T, "lr": args.lr, "preset": args.preset,
             "corpus": [os.path.abspath(x) for x in args.corpus], "heldout_pct": args.heldout_pct,
             "max_bytes": args.max_bytes, "train_bytes": int(len(tr)), "heldout_bytes": int(len(he)),
             "train_files": nfiles[False], "heldout_files": nfiles[True],
             "heldout_bits_per_byte": round(hb, 4), "unigram_bits_per_byte": round(ub, 4),
             "train_seconds": round(train_s, 1), "tokens_per_s": round(s * B * T / train_s),
             "parameters": nparam, "active_parameters": active, "device": str(device),
             "torch": torch.__version__}
    save_checkpoint(args.out, c, model.cpu().to_hf_tensors(), extra)
    with open(os.path.join(args.out, "train_log.csv"), "w") as f:
        f.write("step,train_bits_per_byte,aux\n")
        for r in losses:
            f.write("%d,%.4f,%.4f\n" % r)
    summary = dict(extra, out=args.out, seconds=round(time.time() - t0, 1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    print(json.dumps({k: summary[k] for k in ("out", "steps", "heldout_bits_per_byte", "unigram_bits_per_byte",
                                              "train_seconds", "tokens_per_s", "parameters")}))
    return summary


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m strata.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", required=True, help="directory of .py files (repeatable)")
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--preset", default="mid", choices=sorted(PRESETS))
    ap.add_argument("--set", action="append", metavar="KEY=N", help="override a config key of the preset")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps (0: from --time-budget)")
    ap.add_argument("--time-budget", type=float, default=240, help="seconds of training when --steps is 0")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=512, help="bytes per training window")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--aux", type=float, default=0.01, help="load-balancing loss coefficient")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--heldout-pct", type=int, default=5)
    ap.add_argument("--max-bytes", type=int, default=0, help="cap on training bytes (0: all)")
    ap.add_argument("--eval-windows", type=int, default=512, help="held-out windows for the final loss")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--log-every", type=float, default=15, help="seconds between progress lines")
    ap.add_argument("--json", help="write the run summary here")
    args = ap.parse_args(argv)
    return cli_main("strata.train", train, args)


if __name__ == "__main__":
    sys.exit(main())
