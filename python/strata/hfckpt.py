"""The trained model's Hugging Face checkpoint: the Qwen3-MoE `config.json` and tensor names, and
a check of every tensor against the config (a missing or misnamed tensor, a shape that disagrees
with config.json: an error naming the file).  File I/O is strata.safetensors'.  Used by the
trainer (strata.train) and the evaluator (strata.eval); the runner (strata.model) runs it.
"""
import json
import os

from ._capi import StrataError
from .safetensors import SafetensorsFile, save_file


class CheckpointError(StrataError):
    """A checkpoint or corpus that cannot be used; the message names the file."""

    def __init__(self, message, code=-4):
        super().__init__(message, code)


def cli_main(prog, fn, args):
    """Run a tool's main work; a StrataError (a bad file, corpus or checkpoint) prints
    "prog: message" (the message names the file) and exits 2."""
    import sys
    try:
        fn(args)
    except StrataError as e:
        print("%s: %s" % (prog, e), file=sys.stderr)
        return 2
    return 0


def pick_device(name):
    """torch.device for "auto" (cuda when PyTorch sees a GPU), "cpu", "cuda", ..."""
    import torch
    return torch.device(name if name != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))


def read_safetensors(path, names=None):
    """{name: tensor} (views of a private mapping) and the __metadata__ dict; names: only these."""
    sf = SafetensorsFile(path)
    return {n: sf.get(n) for n in sf.keys() if names is None or n in names}, dict(sf.metadata)


def write_safetensors(path, tensors, metadata=None):
    save_file(tensors, path, {str(k): str(v) for k, v in (metadata or {}).items()} or None)


# ---- Qwen3-MoE config and tensor names -----------------------------------------------------

class MoeConfig:
    """The shape of a Qwen3-MoE-style model (every layer sparse, no shared expert)."""
    KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size")

    def __init__(self, vocab_size=256, hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                 num_key_value_heads=4, head_dim=64, num_experts=64, num_experts_per_tok=4,
                 moe_intermediate_size=256, rope_theta=10000.0, rms_norm_eps=1e-6, norm_topk_prob=True,
                 max_position_embeddings=4096, router_aux_loss_coef=0.01, tie_word_embeddings=False):
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.num_hidden_layers = int(num_hidden_layers)
        self.num_attention_heads = int(num_attention_heads)
        self.num_key_value_heads = int(num_key_value_heads)
        self.head_dim = int(head_dim)
        self.num_experts = int(num_experts)
        self.num_experts_per_tok = int(num_experts_per_tok)
        self.moe_intermediate_size = int(moe_intermediate_size)
        self.rope_theta = float(rope_theta)
        self.rms_norm_eps = float(rms_norm_eps)
        self.norm_topk_prob = bool(norm_topk_prob)
        self.max_position_embeddings = int(max_position_embeddings)
        self.router_aux_loss_coef = float(router_aux_loss_coef)
        self.tie_word_embeddings = bool(tie_word_embeddings)

    def to_json(self, extra=None):
        d = {
            "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
            "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
            "intermediate_size": self.moe_intermediate_size * self.num_experts_per_tok,
            "moe_intermediate_size": self.moe_intermediate_size,
            "num_hidden_layers": self.num_hidden_layers, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "head_dim": self.head_dim,
            "num_experts": self.num_experts, "num_experts_per_tok": self.num_experts_per_tok,
            "norm_topk_prob": self.norm_topk_prob, "decoder_sparse_step": 1, "mlp_only_layers": [],
            "hidden_act": "silu", "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings, "attention_bias": False,
            "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None,
            "router_aux_loss_coef": self.router_aux_loss_coef, "output_router_logits": False,
            "tie_word_embeddings": self.tie_word_embeddings, "initializer_range": 0.02,
            "torch_dtype": "bfloat16", "dtype": "bfloat16", "use_cache": True,
            "bos_token_id": None, "eos_token_id": None,
        }
        if extra:
            d["strata_training"] = extra
        return d

    @classmethod
    def from_json(cls, d, path="config.json"):
        if d.get("model_type") not in ("qwen3_moe", "qwen2_moe"):
            raise CheckpointError("%s: model_type %r: this loader reads qwen3_moe checkpoints"
                                  % (path, d.get("model_type")))
        missing = [k for k in cls.KEYS if k not in d]
        if missing:
            raise CheckpointError("%s: missing keys %s" % (path, ", ".join(missing)))
        if d.get("mlp_only_layers") or int(d.get("decoder_sparse_step", 1)) != 1:
            raise CheckpointError("%s: dense layers (mlp_only_layers / decoder_sparse_step) are not supported"
                                  % path)
        rp = d.get("rope_parameters") or {}
        theta = d.get("rope_theta", rp.get("rope_theta", 10000.0))
        c = cls(**{k: d[k] for k in cls.KEYS}, rope_theta=theta, rms_norm_eps=d.get("rms_norm_eps", 1e-6),
                norm_topk_prob=d.get("norm_topk_prob", True),
                max_position_embeddings=d.get("max_position_embeddings", 4096),
                router_aux_loss_coef=d.get("router_aux_loss_coef", 0.01),
                tie_word_embeddings=d.get("tie_word_embeddings", False))
        return c


def expert_name(layer, expert, mat):
    """mat: gate, up or down."""
    return "model.layers.%d.mlp.experts.%d.%s_proj.weight" % (layer, expert, mat)


def expected_shapes(c):
    """{tensor name: shape} of a checkpoint of config c."""
    H, hd = c.hidden_size, c.head_dim
    s = {"model.embed_tokens.weight": (c.vocab_size, H), "model.norm.weight": (H,)}
    if not c.tie_word_embeddings:
        s["lm_head.weight"] = (c.vocab_size, H)
    for l in range(c.num_hidden_layers):
        p = "model.layers.%d." % l
        s[p + "input_layernorm.weight"] = (H,)
        s[p + "post_attention_layernorm.weight"] = (H,)
        s[p + "self_attn.q_proj.weight"] = (c.num_attention_heads * hd, H)
        s[p + "self_attn.k_proj.weight"] = (c.num_key_value_heads * hd, H)
        s[p + "self_attn.v_proj.weight"] = (c.num_key_value_heads * hd, H)
        s[p + "self_attn.o_proj.weight"] = (H, c.num_attention_heads * hd)
        s[p + "self_attn.q_norm.weight"] = (hd,)
        s[p + "self_attn.k_norm.weight"] = (hd,)
        s[p + "mlp.gate.weight"] = (c.num_experts, H)
        for e in range(c.num_experts):
            s[expert_name(l, e, "gate")] = (c.moe_intermediate_size, H)
            s[expert_name(l, e, "up")] = (c.moe_intermediate_size, H)
            s[expert_name(l, e, "down")] = (H, c.moe_intermediate_size)
    return s


def check_tensors(c, tensors, path, allow_missing=False, allow_extra=False):
    """Every tensor of config c present with its shape; no unknown tensor.  Errors name path."""
    want = expected_shapes(c)
    extra = sorted(set(tensors) - set(want))
    if extra and not allow_extra:
        raise CheckpointError("%s: unexpected tensor '%s'%s (not a qwen3_moe tensor of this config)"
                              % (path, extra[0], " and %d more" % (len(extra) - 1) if len(extra) > 1 else ""))
    missing = sorted(set(want) - set(tensors))
    if missing and not allow_missing:
        raise CheckpointError("%s: missing tensor '%s'%s" % (path, missing[0], " and %d more" % (len(missing) - 1)
                                                             if len(missing) > 1 else ""))
    for name, t in tensors.items():
        if name in want and tuple(t.shape) != tuple(want[name]):
            raise CheckpointError("%s: tensor '%s' has shape %s, config.json says %s"
                                  % (path, name, list(t.shape), list(want[name])))


def load_checkpoint(d):
    """(MoeConfig, {name: tensor}, config dict) from a directory with config.json + model.safetensors
    (or model-*.safetensors shards), every tensor checked against the config."""
    cpath = os.path.join(d, "config.json")
    if not os.path.isdir(d):
        raise CheckpointError("%s: not a checkpoint directory" % d)
    try:
        with open(cpath) as f:
            cd = json.load(f)
    except OSError as e:
        raise CheckpointError("%s: %s" % (cpath, e.strerror))
    except ValueError as e:
        raise CheckpointError("%s: bad JSON: %s" % (cpath, e))
    c = MoeConfig.from_json(cd, cpath)
    files = sorted(x for x in os.listdir(d) if x.endswith(".safetensors"))
    if not files:
        raise CheckpointError("%s: no *.safetensors file" % d)
    tensors = {}
    for fn in files:
        t, _ = read_safetensors(os.path.join(d, fn))
        tensors.update(t)
    check_tensors(c, tensors, os.path.join(d, files[0]) if len(files) == 1 else d)
    return c, tensors, cd


def save_checkpoint(d, c, tensors, extra=None):
    os.makedirs(d, exist_ok=True)
    check_tensors(c, tensors, os.path.join(d, "model.safetensors"))
    write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(d, "config.json.tmp"), "w") as f:
        json.dump(c.to_json(extra), f, indent=1)
        f.write("\n")
    os.replace(os.path.join(d, "config.json.tmp"), os.path.join(d, "config.json"))
