#!/usr/bin/env python3
"""The trained checkpoint in `transformers` (an independent implementation of Qwen3-MoE) against
Strata's runner (strata.model, batched backend) on the same bytes, and the trainer's module
(strata.moe) against both: logits in float32 (TF32 off), max and mean absolute difference,
argmax agreement.  Exit 0 when transformers loads the checkpoint as Qwen3MoeForCausalLM and the
runner's argmax agrees with it on >= 99.9% of positions.

    PYTHONPATH=python python3 experiments/real-model/check_hf.py CKPT TEXT [--json out.json]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("text")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    from strata.backends import BatchedBackend
    from strata.hfckpt import load_checkpoint
    from strata.model import load
    from strata.moe import MoeLM
    from strata.train import load_text, windows
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    w = windows(load_text([a.text]), a.seq, a.windows)
    ids = torch.from_numpy(w[:, :-1].astype(np.int64)).to(dev)
    c, sd, _ = load_checkpoint(a.ckpt)
    runner = load(a.ckpt, BatchedBackend(), str(dev), torch.float32)
    runner.reset(ids.shape[0], ids.shape[1])
    lo = runner.forward(ids).float()
    trainer = MoeLM(c).load_hf_tensors(sd).to(dev).eval()
    with torch.no_grad():
        lt = trainer(ids)["logits"].float()
    res = {"positions": int(ids.numel()),
           "trainer_vs_runner_max_abs_diff": float((lt - lo).abs().max()),
           "trainer_vs_runner_argmax_agreement": float((lt.argmax(-1) == lo.argmax(-1)).float().mean())}
    try:
        import transformers
        from transformers import AutoModelForCausalLM
        res["transformers"] = transformers.__version__
        try:
            hf = AutoModelForCausalLM.from_pretrained(a.ckpt, dtype=torch.float32)
        except TypeError:
            hf = AutoModelForCausalLM.from_pretrained(a.ckpt, torch_dtype=torch.float32)
        res["class"] = type(hf).__name__
        hf.to(dev).eval()
        with torch.no_grad():
            lh = hf(input_ids=ids).logits.float()
        d = (lo - lh).abs()
        res.update(max_abs_diff=float(d.max()), mean_abs_diff=float(d.mean()),
                   logit_scale=float(lh.abs().mean()),
                   argmax_agreement=float((lo.argmax(-1) == lh.argmax(-1)).float().mean()),
                   trainer_vs_hf_max_abs_diff=float((lt - lh).abs().max()))
        res["ok"] = bool(res["class"] == "Qwen3MoeForCausalLM" and res["argmax_agreement"] >= 0.999)
    except Exception as e:  # report, do not hide: the device log shows it
        res["error"] = "%s: %s" % (type(e).__name__, e)
        res["ok"] = False
    print(json.dumps(res))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
