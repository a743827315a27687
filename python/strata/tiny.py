"""Tiny random-weight Hugging Face checkpoints of every supported family (tests, benchmarks).

    python3 -m strata.tiny --family qwen3_moe --out /tmp/tiny [--layers 4 --experts 8 ...]

Writes config.json and model.safetensors with the tensor names the real checkpoints use (and that
`strata quantize --naming auto` reads).  Weights are seeded Gaussians scaled like a trained model's
(std 1/sqrt(fan_in)), so activations stay O(1) through the layers.
"""
import argparse
import json
import os
from typing import Dict, Optional

import torch

from .model import Config, expert_names
from .safetensors import save_file


def config_for(family: str, layers: int = 4, experts: int = 8, top_k: int = 2, hidden: int = 256,
               inter: int = 128, vocab: int = 512, heads: int = 4, kv_heads: int = 2, dense_layers: int = 0,
               shared: int = 0) -> Dict:
    c = {"model_type": family, "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
         "num_attention_heads": heads, "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "max_position_embeddings": 4096, "num_experts_per_tok": top_k,
         "tie_word_embeddings": False, "intermediate_size": inter * 2}
    if family == "mixtral":
        c["num_local_experts"] = experts
    elif family in ("qwen2_moe", "qwen3_moe", "olmoe"):
        c["num_experts"] = experts
        c["moe_intermediate_size"] = inter
        c["norm_topk_prob"] = family == "qwen3_moe"
        if family == "qwen3_moe":
            c["head_dim"] = hidden // heads
        if family == "qwen2_moe":
            c["shared_expert_intermediate_size"] = shared * inter or inter
    else:
        c.update({"n_routed_experts": experts, "moe_intermediate_size": inter, "n_shared_experts": shared or 1,
                  "first_k_dense_replace": dense_layers, "moe_layer_freq": 1, "norm_topk_prob": True,
                  "routed_scaling_factor": 2.5 if family == "deepseek_v3" else 1.0,
                  "n_group": 2 if experts % 2 == 0 else 1, "topk_group": 1,
                  "topk_method": "noaux_tc" if family == "deepseek_v3" else "greedy",
                  "scoring_func": "sigmoid" if family == "deepseek_v3" else "softmax",
                  "q_lora_rank": hidden // 2, "kv_lora_rank": hidden // 4, "qk_nope_head_dim": 32,
                  "qk_rope_head_dim": 16, "v_head_dim": 32, "num_key_value_heads": heads})
    return c


def make_checkpoint(out: str, family: str = "qwen3_moe", seed: int = 1, dtype=torch.bfloat16,
                    config: Optional[Dict] = None, **shape) -> str:
    """Write a random checkpoint of `family` into out (created); returns out."""
    c = config or config_for(family, **shape)
    t = make_tensors(c, seed, dtype)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    save_file(t, os.path.join(out, "model.safetensors"), {"format": "pt"})
    return out


class MemoryCheckpoint:
    """A checkpoint held in memory (config dict + tensors), accepted by strata.load in place of
    a directory: benchmarks build large random models on the GPU without writing them."""

    def __init__(self, config: Dict, tensors: Dict[str, torch.Tensor], path: str = "(memory)"):
        self.config, self.tensors, self.path = config, tensors, path

    def __contains__(self, name: str) -> bool:
        return name in self.tensors

    def get(self, name: str) -> torch.Tensor:
        from ._capi import StrataError
        if name not in self.tensors:
            raise StrataError("%s: checkpoint has no tensor '%s'" % (self.path, name), code=-10)
        return self.tensors[name]

    def maybe(self, name: str):
        return self.tensors.get(name)


def make_tensors(c: Dict, seed: int = 1, dtype=torch.bfloat16, device: str = "cpu",
                 experts: bool = True) -> Dict[str, torch.Tensor]:
    """The random tensors of config c (experts=False leaves the routed experts out)."""
    family = c["model_type"]
    cfg = Config.from_hf(c, ignore_rope_scaling=True)  # the family's defaults for keys c leaves out
    g = torch.Generator(device=device).manual_seed(seed)
    H, V, L = c["hidden_size"], c["vocab_size"], c["num_hidden_layers"]
    nh, kvh = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim", H // nh)
    E = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    I = c.get("moe_intermediate_size", c["intermediate_size"])
    t: Dict[str, torch.Tensor] = {}

    def w(name, rows, cols, scale=1.0):
        t[name] = (torch.randn(rows, cols, generator=g, device=device) * (scale / cols ** 0.5)).to(dtype)

    def ones(name, n):
        t[name] = (1.0 + 0.1 * torch.randn(n, generator=g, device=device)).to(dtype)

    def small(name, n, scale, dt=None):
        t[name] = (scale * torch.randn(n, generator=g, device=device)).to(dt or dtype)

    t["model.embed_tokens.weight"] = torch.randn(V, H, generator=g, device=device).to(dtype)
    w("lm_head.weight", V, H)
    ones("model.norm.weight", H)
    dense = c.get("first_k_dense_replace", 0)
    for i in range(L):
        p = "model.layers.%d." % i
        ones(p + "input_layernorm.weight", H)
        ones(p + "post_attention_layernorm.weight", H)
        a = p + "self_attn."
        if cfg.mla:
            qd, qr, kr = cfg.qk_nope_dim + cfg.qk_rope_dim, cfg.q_lora_rank, cfg.kv_lora_rank
            if qr:
                w(a + "q_a_proj.weight", qr, H)
                ones(a + "q_a_layernorm.weight", qr)
                w(a + "q_b_proj.weight", nh * qd, qr)
            else:
                w(a + "q_proj.weight", nh * qd, H)
            w(a + "kv_a_proj_with_mqa.weight", kr + cfg.qk_rope_dim, H)
            ones(a + "kv_a_layernorm.weight", kr)
            w(a + "kv_b_proj.weight", nh * (cfg.qk_nope_dim + cfg.v_head_dim), kr)
            w(a + "o_proj.weight", H, nh * cfg.v_head_dim)
            if cfg.attn_bias:
                for n, d in (("q_a_proj", qr), ("kv_a_proj_with_mqa", kr + cfg.qk_rope_dim), ("o_proj", H)):
                    if d:
                        small(a + n + ".bias", d, 0.1)
        else:
            w(a + "q_proj.weight", nh * hd, H)
            w(a + "k_proj.weight", kvh * hd, H)
            w(a + "v_proj.weight", kvh * hd, H)
            w(a + "o_proj.weight", H, nh * hd)
            if family == "qwen2_moe":
                for n, d in (("q", nh * hd), ("k", kvh * hd), ("v", kvh * hd)):
                    small(a + n + "_proj.bias", d, 0.02)
            if family == "qwen3_moe":
                ones(a + "q_norm.weight", hd)
                ones(a + "k_norm.weight", hd)
            if family == "olmoe":
                ones(a + "q_norm.weight", nh * hd)
                ones(a + "k_norm.weight", kvh * hd)
        if i < dense:
            Id = c["intermediate_size"]
            w(p + "mlp.gate_proj.weight", Id, H)
            w(p + "mlp.up_proj.weight", Id, H)
            w(p + "mlp.down_proj.weight", H, Id)
            if cfg.mlp_bias:
                for n, d in (("gate", Id), ("up", Id), ("down", H)):
                    small(p + "mlp.%s_proj.bias" % n, d, 0.1)
            continue
        m = p + ("block_sparse_moe." if family == "mixtral" else "mlp.")
        w(m + "gate.weight", E, H, 4.0)  # a router with some confidence
        if family == "deepseek_v3":
            small(m + "gate.e_score_correction_bias", E, 0.3, torch.float32)  # moves the choice
        for e in range(E if experts else 0):
            gn, un, dn = expert_names(family, i, e)
            w(gn, I, H)
            w(un, I, H)
            w(dn, H, I)
        if family == "qwen2_moe":
            Is = c["shared_expert_intermediate_size"]
            for n, r, cc in (("gate", Is, H), ("up", Is, H), ("down", H, Is)):
                w(m + "shared_expert.%s_proj.weight" % n, r, cc)
            w(m + "shared_expert_gate.weight", 1, H)
        if cfg.mla and cfg.shared_inter:
            Is = cfg.shared_inter
            for n, r, cc in (("gate", Is, H), ("up", Is, H), ("down", H, Is)):
                w(m + "shared_experts.%s_proj.weight" % n, r, cc)
                if cfg.mlp_bias:
                    small(m + "shared_experts.%s_proj.bias" % n, r, 0.1)
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m strata.tiny", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="checkpoint directory to write")
    ap.add_argument("--family", default="qwen3_moe", help="mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, "
                    "deepseek_v3 (default qwen3_moe)")
    for k, v in (("layers", 4), ("experts", 8), ("top-k", 2), ("hidden", 256), ("inter", 128), ("vocab", 512),
                 ("heads", 4), ("kv-heads", 2), ("dense-layers", 0), ("seed", 1)):
        ap.add_argument("--" + k, type=int, default=v, help="default %d" % v)
    a = ap.parse_args(argv)
    make_checkpoint(a.out, a.family, a.seed, layers=a.layers, experts=a.experts, top_k=a.top_k, hidden=a.hidden,
                    inter=a.inter, vocab=a.vocab, heads=a.heads, kv_heads=a.kv_heads, dense_layers=a.dense_layers)
    print("wrote %s (%s)" % (a.out, a.family))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
