"""A PyTorch MoE decoder that loads Hugging Face checkpoints without `transformers`.

Families (config.json's model_type): mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3.
Decoder layer: RMSNorm -> rotary attention with a KV cache (GQA; Qwen3's per-head and OLMoE's
whole-projection q/k norms; Qwen2's q/k/v biases; DeepSeek's multi-head latent attention in its
plain, decompressed form) -> RMSNorm -> dense MLP or MoE block (router with the family's rule,
routed experts through a backend, shared experts in PyTorch).  Each family means what transformers'
modeling_<family>.py means, including the defaults of keys config.json leaves out (DEFAULTS) and
DeepSeek's details: V2 never renormalises its top-k weights, V3 scores with sigmoid + correction
bias over groups, q_a/kv_a norms use eps 1e-6, attention_bias / mlp_bias (route(), Attention).
tests/python/test_strata.py pins these on hand-computed cases and, where transformers is
installed, compares the logits of every family.  Not implemented: YaRN / other
rope_scaling (DeepSeek-V2/V3's long-context scaling; refused unless --ignore-rope-scaling),
sliding windows, Qwen's decoder_sparse_step patterns are read from the checkpoint itself (a layer
is MoE when its router weight exists).

The routed experts of every MoE layer go through a backend (strata.backends): "torch" (the
reference: a token loop in float32 over the checkpoint's experts), "bf16" (one GEMM per active
expert over its tokens, in the model dtype) or "strata" (tiered shards through the engine and the
fused kernels).  Lookahead predictions: when asked for (pred_depth > 0), at MoE layer l the model
applies MoE layer l+d's post-attention norm and router to layer l's residual stream, d = 1..depth,
and hands the top-n experts to the backend as prefetch hints and to the trace recorder.
"""
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import List, Optional

import torch
import torch.nn.functional as F

from ._capi import StrataError
from .safetensors import Checkpoint

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3")


# Defaults of keys a config.json may leave out: transformers' configuration classes
# (configuration_<family>.py), so a checkpoint means what it means there.
DEFAULTS = {
    "mixtral": {"rms_norm_eps": 1e-5, "rope_theta": 1e6, "num_experts_per_tok": 2},
    "qwen2_moe": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_experts_per_tok": 4},
    "qwen3_moe": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_experts_per_tok": 8},
    "olmoe": {"rms_norm_eps": 1e-5, "rope_theta": 10000.0, "num_experts_per_tok": 8},
    "deepseek_v2": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_experts_per_tok": None,
                    "n_shared_experts": 2, "routed_scaling_factor": 1.0, "topk_method": "greedy",
                    "n_group": None, "topk_group": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128},
    "deepseek_v3": {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "num_experts_per_tok": 8,
                    "n_shared_experts": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
                    "n_group": 8, "topk_group": 4, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "rope_interleave": True},
}
MLA_NORM_EPS = 1e-6  # DeepSeek's q_a_layernorm / kv_a_layernorm: built without rms_norm_eps


@dataclass
class Config:
    family: str
    vocab: int
    hidden: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_theta: float
    eps: float
    n_experts: int
    top_k: int
    moe_inter: int
    dense_inter: int
    shared_inter: int = 0           # all shared experts of a layer together (0: none)
    shared_gate: bool = False       # Qwen2-MoE: sigmoid(shared_expert_gate x) scales them
    norm_topk: bool = False         # renormalise the top-k weights (never for DeepSeek-V2: route())
    routing: str = "softmax"        # "softmax" (top-k of softmax), "deepseek_v2", "deepseek_v3"
    grouped: bool = False           # DeepSeek-V2 topk_method=group_limited_greedy (V3: always)
    n_group: int = 1
    topk_group: int = 1
    routed_scale: float = 1.0
    qk_norm: str = ""               # "", "head" (Qwen3), "full" (OLMoE)
    qkv_bias: bool = False
    attn_bias: bool = False         # DeepSeek attention_bias: q_a_proj, kv_a_proj_with_mqa, o_proj
    mlp_bias: bool = False          # DeepSeek-V2 mlp_bias: dense MLPs and shared experts
    tie_embeddings: bool = False
    mla: bool = False
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    rope_interleave: bool = False
    max_pos: int = 4096
    raw: dict = field(default_factory=dict)

    @staticmethod
    def from_hf(c: dict, path: str = "config.json", ignore_rope_scaling: bool = False) -> "Config":
        fam = c.get("model_type", "")
        if fam not in FAMILIES:
            raise StrataError("%s: model_type '%s' is not one of %s" % (path, fam, ", ".join(FAMILIES)), code=-11)
        dflt = DEFAULTS[fam]

        def g(key, default=None):
            v = c.get(key)
            return v if v is not None else dflt.get(key, default)

        def bad(msg):
            return StrataError("%s: %s" % (path, msg), code=-11)
        rp = c.get("rope_parameters") or {}  # transformers 5 keeps rope_theta / rope_type here
        rs = c.get("rope_scaling") or (rp if rp.get("rope_type", "default") != "default" else None)
        if rs and not ignore_rope_scaling and (rs.get("type") or rs.get("rope_type")) not in (None, "default"):
            raise bad("rope_scaling %s is not implemented (pass ignore_rope_scaling to run without it, exact "
                      "only within the original context)" % (rs,))
        missing = [k for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads") if k not in c]
        if not (g("moe_intermediate_size") or g("intermediate_size")):
            missing.append("moe_intermediate_size or intermediate_size")
        if missing:
            raise bad("no %s" % ", ".join(missing))
        H = int(c["hidden_size"])
        nh = int(c["num_attention_heads"])
        top_k = g("num_experts_per_tok")
        if top_k is None:
            raise bad("num_experts_per_tok is not set")
        cfg = Config(
            family=fam, vocab=int(c["vocab_size"]), hidden=H, n_layers=int(c["num_hidden_layers"]), n_heads=nh,
            n_kv_heads=int(g("num_key_value_heads") or nh), head_dim=int(g("head_dim") or H // nh),
            rope_theta=float(c.get("rope_theta") or rp.get("rope_theta") or dflt["rope_theta"]),
            eps=float(g("rms_norm_eps")),
            n_experts=int(g("num_local_experts") or g("num_experts") or g("n_routed_experts") or 0),
            top_k=int(top_k),
            moe_inter=int(g("moe_intermediate_size") or g("intermediate_size")),
            dense_inter=int(g("intermediate_size") or 0),
            tie_embeddings=bool(g("tie_word_embeddings", False)),
            max_pos=int(g("max_position_embeddings", 4096)), raw=c)
        cfg.norm_topk = fam == "mixtral" or bool(g("norm_topk_prob", False))
        if fam == "qwen2_moe":
            cfg.qkv_bias = True
            cfg.shared_inter = int(g("shared_expert_intermediate_size") or 0)
            cfg.shared_gate = cfg.shared_inter > 0
        if fam == "qwen3_moe":
            cfg.qk_norm = "head"
        if fam == "olmoe":
            cfg.qk_norm = "full"
        if fam.startswith("deepseek"):
            cfg.routing = fam
            cfg.shared_inter = int(g("n_shared_experts") or 0) * cfg.moe_inter
            cfg.routed_scale = float(g("routed_scaling_factor"))
            cfg.attn_bias = bool(g("attention_bias", False))
            cfg.mlp_bias = fam == "deepseek_v2" and bool(g("mlp_bias", False))
            if fam == "deepseek_v2":
                # transformers' DeepseekV2Moe: softmax, greedy or group-limited top-k, times
                # routed_scaling_factor, never renormalised (norm_topk_prob is not read)
                cfg.norm_topk = False
                method = g("topk_method")
                if method not in ("greedy", "group_limited_greedy"):
                    raise bad("topk_method '%s': DeepSeek-V2 routes with greedy or group_limited_greedy" % method)
                cfg.grouped = method == "group_limited_greedy"
            else:
                cfg.grouped = True  # noaux_tc: sigmoid + correction bias, top-2 sums per group
            if cfg.grouped:
                if g("n_group") is None or g("topk_group") is None:
                    raise bad("topk_method %s needs n_group and topk_group" % g("topk_method", "noaux_tc"))
                cfg.n_group, cfg.topk_group = int(g("n_group")), int(g("topk_group"))
                if cfg.n_group < 1 or cfg.n_experts % cfg.n_group or not 1 <= cfg.topk_group <= cfg.n_group:
                    raise bad("n_group %d / topk_group %d do not fit %d experts (n_group must divide them, "
                              "1 <= topk_group <= n_group)"
                              % (cfg.n_group, cfg.topk_group, cfg.n_experts))
                if fam == "deepseek_v3" and cfg.n_experts // cfg.n_group < 2:
                    raise bad("n_group %d leaves groups of fewer than 2 experts (a group scores its top 2)"
                              % cfg.n_group)
            cfg.mla = True
            # absent: transformers' 1536 (a q_a/q_b pair); null: one q_proj.  The weights decide.
            cfg.q_lora_rank = int(c["q_lora_rank"] or 0) if "q_lora_rank" in c else 1536
            cfg.kv_lora_rank = int(g("kv_lora_rank"))
            cfg.qk_nope_dim = int(g("qk_nope_head_dim"))
            cfg.qk_rope_dim = int(g("qk_rope_head_dim"))
            cfg.v_head_dim = int(g("v_head_dim"))
            cfg.head_dim = cfg.qk_rope_dim
            # V2 rotates (even, odd) pairs as complex numbers, always; V3 does when rope_interleave
            cfg.rope_interleave = fam == "deepseek_v2" or bool(g("rope_interleave"))
        return cfg


def expert_names(family: str, layer: int, e: int):
    """(gate, up, down) tensor names of routed expert e of decoder layer `layer` (the names
    `strata quantize --naming auto` reads)."""
    if family == "mixtral":
        p = "model.layers.%d.block_sparse_moe.experts.%d." % (layer, e)
        return p + "w1.weight", p + "w3.weight", p + "w2.weight"
    p = "model.layers.%d.mlp.experts.%d." % (layer, e)
    return p + "gate_proj.weight", p + "up_proj.weight", p + "down_proj.weight"


def router_name(family: str, layer: int) -> str:
    return "model.layers.%d.%s.gate.weight" % (layer, "block_sparse_moe" if family == "mixtral" else "mlp")


_rms_norm = getattr(F, "rms_norm", None)  # PyTorch >= 2.4


class RMSNorm(torch.nn.Module):
    def __init__(self, w: torch.Tensor, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(w, requires_grad=False)
        self.wf = w.float()  # the weight as every call multiplies by it (once, not per call)
        self.eps = eps

    def forward(self, x):
        if _rms_norm is not None:  # the same float32 formula, one fused call where PyTorch has it
            return _rms_norm(x.float(), (x.shape[-1],), self.wf, self.eps).to(x.dtype)
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * self.wf).to(x.dtype)


def _rot_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rope:
    """Rotary embedding; cos / sin of every position up to the longest seen, computed once in
    float64 per device (the values a per-call computation gives), sliced per call."""

    def __init__(self, dim: int, theta: float, interleave: bool):
        self.dim, self.theta, self.interleave = dim, theta, interleave
        self.inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        self.tables = {}

    def table(self, n: int, device):
        """(cos, sin) [>= n, dim] float32 on device."""
        key = str(device)
        t = self.tables.get(key)
        if t is None or t[0].shape[0] < n:
            m = max(n, 2 * t[0].shape[0] if t is not None else 256)
            f = torch.outer(torch.arange(m, dtype=torch.float64), self.inv)
            emb = torch.cat((f, f), dim=-1)
            t = self.tables[key] = (emb.cos().to(device, torch.float32), emb.sin().to(device, torch.float32))
        return t

    def apply(self, x, pos0: int, pos=None):
        """x [B, h, T, dim] -> rotated, positions pos0 .. pos0 + T - 1 (or the positions in the
        device tensor pos, [T]: no host work, as a CUDA graph replays it)."""
        T = x.shape[2]
        if pos is None:
            cos, sin = (c[pos0:pos0 + T] for c in self.table(pos0 + T, x.device))
        else:
            cos, sin = (c.index_select(0, pos) for c in self.tables[str(x.device)])
        xf = x.float()
        if self.interleave:  # DeepSeek: pairs (0,1), (2,3), ... -> halves
            B, h, T_, d = xf.shape
            xf = xf.view(B, h, T_, d // 2, 2).transpose(4, 3).reshape(B, h, T_, d)
        return (xf * cos + _rot_half(xf) * sin).to(x.dtype)


class KVCache:
    """Preallocated keys and values of every layer: [B, heads, max_len, dim]."""

    def __init__(self, n_layers: int, batch: int, kv_heads: int, k_dim: int, v_dim: int, max_len: int,
                 device, dtype):
        self.k = [torch.zeros(batch, kv_heads, max_len, k_dim, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(batch, kv_heads, max_len, v_dim, device=device, dtype=dtype) for _ in range(n_layers)]
        self.len = 0
        self.max_len = max_len

    def put_at(self, layer: int, k, v, pos):
        """Write positions pos (device int64 [T]) and return the whole cache of the layer (a
        CUDA graph's static view; positions past the request are masked by the caller)."""
        self.k[layer].index_copy_(2, pos, k)
        self.v[layer].index_copy_(2, pos, v)
        return self.k[layer], self.v[layer]

    def put(self, layer: int, k, v, pos0: int):
        T = k.shape[2]
        if pos0 + T > self.max_len:
            raise StrataError("KV cache of %d positions is full (need %d)" % (self.max_len, pos0 + T), code=-13)
        self.k[layer][:, :, pos0:pos0 + T] = k
        self.v[layer][:, :, pos0:pos0 + T] = v
        return self.k[layer][:, :, :pos0 + T], self.v[layer][:, :, :pos0 + T]


def _attend(q, k, v, pos0: int, scale: float, pos=None):
    """q [B, h, T, d], k/v [B, kvh, S, d] (S = pos0 + T), causal.  Grouped-query attention
    without copying k and v per head: the query heads sharing a KV head form one matrix.
    pos: device positions [T] of the queries (k/v then hold the whole cache, masked past them)."""
    B, h, T, d = q.shape
    kvh, S = k.shape[1], k.shape[2]
    rep = h // kvh
    qf = q.float().reshape(B, kvh, rep * T, d)
    s = torch.matmul(qf, k.float().transpose(-1, -2)) * scale  # [B, kvh, rep * T, S]
    j = None
    if pos is not None:
        j = torch.arange(S, device=q.device)
        i = pos.view(1, T, 1)
    elif T > 1:
        j = torch.arange(S, device=q.device)
        i = torch.arange(T, device=q.device).view(1, T, 1) + pos0
    if j is not None:
        s = s.view(B, kvh, rep, T, S).masked_fill(j.view(1, 1, S) > i, float("-inf")).view(B, kvh, rep * T, S)
    p = torch.softmax(s, dim=-1)
    return torch.matmul(p, v.float()).view(B, h, T, -1).to(q.dtype)


class Attention(torch.nn.Module):
    def __init__(self, cfg: Config, get, prefix: str, layer: int):
        super().__init__()
        self.cfg, self.layer = cfg, layer
        self.w = {}
        P = lambda n: get(prefix + n)  # noqa: E731
        if cfg.mla:
            for n in ("q_a_proj", "q_b_proj", "q_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"):
                t = get(prefix + n + ".weight", optional=True)
                if t is not None:
                    self.w[n] = t
            if "q_a_proj" not in self.w and "q_proj" not in self.w:
                P("q_proj.weight")  # neither form of the query projection: name the one missing
            if cfg.attn_bias:
                for n in ("q_a_proj", "kv_a_proj_with_mqa", "o_proj"):
                    if n in self.w or n != "q_a_proj":
                        self.w[n + ".bias"] = P(n + ".bias")
            self.q_a_norm = RMSNorm(P("q_a_layernorm.weight"), MLA_NORM_EPS) if "q_a_proj" in self.w else None
            self.kv_a_norm = RMSNorm(P("kv_a_layernorm.weight"), MLA_NORM_EPS)
            self.rope = Rope(cfg.qk_rope_dim, cfg.rope_theta, cfg.rope_interleave)
            self.scale = (cfg.qk_nope_dim + cfg.qk_rope_dim) ** -0.5
            return
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            self.w[n] = P(n + ".weight")
            if cfg.qkv_bias and n != "o_proj":
                self.w[n + ".bias"] = P(n + ".bias")
        self.q_norm = RMSNorm(P("q_norm.weight"), cfg.eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(P("k_norm.weight"), cfg.eps) if cfg.qk_norm else None
        self.rope = Rope(cfg.head_dim, cfg.rope_theta, False)
        self.scale = cfg.head_dim ** -0.5

    def _lin(self, x, n):
        return F.linear(x, self.w[n], self.w.get(n + ".bias"))

    def forward(self, x, cache: KVCache, pos0: int, pos=None):
        """pos: None, or the positions as a device tensor [T] (then nothing here reads pos0 and
        the whole cache is attended, masked past pos: what a CUDA graph can replay)."""
        c = self.cfg
        B, T, _ = x.shape
        if c.mla:
            return self._mla(x, cache, pos0)
        q, k, v = self._lin(x, "q_proj"), self._lin(x, "k_proj"), self._lin(x, "v_proj")
        if c.qk_norm == "full":
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(B, T, c.n_heads, c.head_dim).transpose(1, 2)
        k = k.view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        v = v.view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        if c.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rope.apply(q, pos0, pos), self.rope.apply(k, pos0, pos)
        K, V = cache.put(self.layer, k, v, pos0) if pos is None else cache.put_at(self.layer, k, v, pos)
        o = _attend(q, K, V, pos0, self.scale, pos)
        return self._lin(o.transpose(1, 2).reshape(B, T, -1), "o_proj")

    def _mla(self, x, cache: KVCache, pos0: int):
        c = self.cfg
        B, T, _ = x.shape
        if "q_a_proj" in self.w:
            q = F.linear(self.q_a_norm(self._lin(x, "q_a_proj")), self.w["q_b_proj"])
        else:
            q = F.linear(x, self.w["q_proj"])
        q = q.view(B, T, c.n_heads, c.qk_nope_dim + c.qk_rope_dim).transpose(1, 2)
        q_nope, q_pe = q.split([c.qk_nope_dim, c.qk_rope_dim], dim=-1)
        ckv = self._lin(x, "kv_a_proj_with_mqa")
        ckv, k_pe = ckv.split([c.kv_lora_rank, c.qk_rope_dim], dim=-1)
        k_pe = k_pe.view(B, T, 1, c.qk_rope_dim).transpose(1, 2)
        kv = F.linear(self.kv_a_norm(ckv), self.w["kv_b_proj"])
        kv = kv.view(B, T, c.n_heads, c.qk_nope_dim + c.v_head_dim).transpose(1, 2)
        k_nope, v = kv.split([c.qk_nope_dim, c.v_head_dim], dim=-1)
        q_pe, k_pe = self.rope.apply(q_pe, pos0), self.rope.apply(k_pe, pos0)
        q = torch.cat((q_nope, q_pe), dim=-1)
        k = torch.cat((k_nope, k_pe.expand(B, c.n_heads, T, c.qk_rope_dim)), dim=-1)
        K, V = cache.put(self.layer, k, v.contiguous(), pos0)
        o = _attend(q, K, V, pos0, self.scale)
        return self._lin(o.transpose(1, 2).reshape(B, T, -1), "o_proj")


def swiglu(x, gate, up, down, bias=None):
    """down(silu(gate x) * up x); bias: None or the (gate, up, down) biases."""
    bg, bu, bd = bias or (None, None, None)
    return F.linear(F.silu(F.linear(x, gate, bg)) * F.linear(x, up, bu), down, bd)


def route(cfg: Config, logits, k: int, bias=None):
    """The family's routing rule on router logits [N, E] (float32) -> (ids [N, k] int64,
    weights [N, k] float32), descending weight.  As transformers computes it:
      softmax    (Mixtral, Qwen2/3-MoE, OLMoE): top-k of softmax, renormalised when norm_topk
                 (always for Mixtral);
      deepseek_v2: softmax; greedy top-k, or group_limited_greedy (keep the topk_group groups of
                 highest max score, others' scores set to 0); times routed_scaling_factor; never
                 renormalised (DeepseekV2Moe does not read norm_topk_prob);
      deepseek_v3: sigmoid; choice = score + e_score_correction_bias (0 when absent); keep the
                 topk_group groups of highest top-2 sum of choice, others' choice set to 0; top-k
                 of choice; weights = the chosen sigmoid scores, renormalised (sum + 1e-20) when
                 norm_topk_prob, times routed_scaling_factor."""
    N, E = logits.shape
    k = min(k, E)
    v3 = cfg.routing == "deepseek_v3"
    scores = logits.sigmoid() if v3 else logits.softmax(dim=-1)
    choice = scores + bias.float() if v3 and bias is not None else scores
    if cfg.grouped and cfg.n_group > 1:
        grp = choice.view(N, cfg.n_group, -1)
        gs = grp.topk(2, dim=-1).values.sum(-1) if v3 else grp.max(dim=-1).values
        keep = torch.zeros_like(gs).scatter_(1, gs.topk(cfg.topk_group, dim=-1).indices, 1.0)
        choice = choice.masked_fill((keep.unsqueeze(-1).expand_as(grp) == 0).reshape(N, E), 0.0)
    w, idx = choice.topk(k, dim=-1)
    if cfg.routing == "softmax":  # top-k of the scores themselves: already in descending order
        if cfg.norm_topk and k > 1:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        return idx, w
    if v3:
        w = scores.gather(1, idx)
    if cfg.norm_topk and k > 1:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    if cfg.routing != "softmax":
        w = w * cfg.routed_scale
    order = w.argsort(dim=-1, descending=True)
    return idx.gather(1, order), w.gather(1, order)


class Router:
    """The family's routing rule (route()) over one MoE layer's router weight."""

    def __init__(self, cfg: Config, weight, bias=None):
        self.cfg, self.weight, self.bias = cfg, weight, bias

    def __call__(self, x, k: int):
        """x [N, hidden] -> (ids [N, k] int64, weights [N, k] float32), descending weight."""
        if self.cfg.mla:  # DeepSeek's router runs in float32 whatever the model dtype
            logits = F.linear(x.float(), self.weight.float())
        else:
            logits = F.linear(x.to(self.weight.dtype), self.weight).float()
        return route(self.cfg, logits, k, self.bias)


class MoEBlock(torch.nn.Module):
    def __init__(self, cfg: Config, get, layer: int, moe_idx: int, load_experts: bool):
        super().__init__()
        self.cfg, self.layer, self.moe_idx = cfg, layer, moe_idx
        fam = cfg.family
        pre = "model.layers.%d.%s." % (layer, "block_sparse_moe" if fam == "mixtral" else "mlp")
        self.router = Router(cfg, get(pre + "gate.weight"), get(pre + "gate.e_score_correction_bias", optional=True))
        self.shared = self.shared_bias = None
        if cfg.shared_inter:
            sp = pre + ("shared_expert." if fam == "qwen2_moe" else "shared_experts.")
            self.shared = [get(sp + n + "_proj.weight") for n in ("gate", "up", "down")]
            self.shared_bias = [get(sp + n + "_proj.bias") for n in ("gate", "up", "down")] if cfg.mlp_bias else None
        self.shared_gate = get(pre + "shared_expert_gate.weight") if cfg.shared_gate else None
        # routed experts, stacked: gate|up [E, 2I, H] and down [E, H, I] (model dtype)
        self.w_gu = self.w_down = None
        if load_experts:
            gu, dn = [], []
            for e in range(cfg.n_experts):
                g, u, d = (get(n) for n in expert_names(fam, layer, e))
                gu.append(torch.cat((g, u), 0))
                dn.append(d)
            self.w_gu, self.w_down = torch.stack(gu), torch.stack(dn)

    def shared_out(self, x):
        if self.shared is None:
            return None
        y = swiglu(x, *self.shared, bias=self.shared_bias)
        if self.shared_gate is not None:
            y = torch.sigmoid(F.linear(x, self.shared_gate)) * y
        return y


class Step:
    """What one forward pass tells the backends and the recorder."""

    def __init__(self, index: int, pos0: int, decode: bool):
        self.index, self.pos0, self.decode = index, pos0, decode


class _Packed:
    """One MoE layer's routing (ids, weights, lookahead ids and scores) in one int32 buffer on
    the device and its pinned copy on the host: one transfer and one wait per layer."""

    def __init__(self, N: int, k: int, pshape, device):
        self.N, self.k, self.pshape = N, k, pshape
        npd = 0 if pshape is None else pshape[0] * pshape[1] * pshape[2]
        self.cut = [0, N * k, 2 * N * k, 2 * N * k + npd, 2 * N * k + 2 * npd]
        self.dev = torch.empty(self.cut[-1], dtype=torch.int32, device=device)
        self.cuda = self.dev.is_cuda
        self.hbuf = torch.empty(self.cut[-1], dtype=torch.int32, pin_memory=True) if self.cuda else self.dev

    def _parts(self, buf):
        c = self.cut
        sel = buf[c[0]:c[1]].view(self.N, self.k)
        w = buf[c[1]:c[2]].view(torch.float32).view(self.N, self.k)
        if self.pshape is None:
            return sel, w, None
        return sel, w, (buf[c[2]:c[3]].view(self.pshape), buf[c[3]:c[4]].view(torch.float32).view(self.pshape))

    def fill(self, sel, w, pred):
        """Write the device tensors into the buffer (device work only: a CUDA graph holds it)."""
        s, ww, p = self._parts(self.dev)
        s.copy_(sel)
        ww.copy_(w)
        if p is not None:
            p[0].copy_(pred[0])
            p[1].copy_(pred[1])
        return self

    def host(self):
        """(ids int32, weights float32, None or (pred ids, pred scores)) on the host, after
        one copy and one wait for the device."""
        if self.cuda:
            self.hbuf.copy_(self.dev, non_blocking=True)
            torch.cuda.current_stream(self.dev.device).synchronize()
        return self._parts(self.hbuf)


class _StaticDecode:
    """A decode step (T = 1) of a fixed batch over a fixed KV cache as fixed device work between
    the host's reads of each MoE layer's routing: stretch j runs the layers up to MoE layer j's
    router (the previous MoE layer's output added first), stretch M the rest and the logits.
    Positions and token ids live in device tensors and attention covers the whole cache
    (masked past the position), so on CUDA each stretch is captured once as a CUDA graph and
    replayed: one launch instead of ~90 per layer, and the host's wait per MoE layer is the
    only one (the routing's transfer, _Packed).  Attention's work differs from the plain
    forward only by the masked, zero-weight positions."""

    def __init__(self, m: "MoEModel", B: int, key):
        self.m, self.key, self.cache = m, key, m.cache
        dev = m.embed.device
        self.graphs = m.static_decode == "graph"
        self.ids = torch.zeros(B, 1, dtype=torch.long, device=dev)
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)
        # every tensor a graph reads stays referenced here: the cache above, the rope tables
        self.tables = [attn.rope.table(m.cache.max_len, dev) for attn, *_ in m.layers]
        self.segs, first = [], 0
        for li, layer in enumerate(m.layers):
            if isinstance(layer[3], MoEBlock):
                self.segs.append((first, li, layer[3]))
                first = li + 1
        self.segs.append((first, len(m.layers), None))
        b = m.backend
        self.in_dtype = getattr(b, "input_dtype", None) or m.dtype
        ydt = getattr(b, "out_dtype", None) or m.dtype
        self.y = [torch.zeros(B, m.cfg.hidden, dtype=ydt, device=dev) for _ in self.segs[:-1]]
        pshape = (B, m.pred_depth, m.pred_topn) if m.pred_depth else None
        self.packs = [_Packed(B, m.cfg.top_k, pshape, dev) for _ in self.segs[:-1]] if m._host_routing() else None
        self.out = [None] * len(self.segs)
        self.g = [None] * len(self.segs)
        self.pool = None
        self.graph_error = None

    def _run(self, j):
        m = self.m
        first, end, mlp = self.segs[j]
        if j == 0:
            x = F.embedding(self.ids, m.embed)
        else:
            o = self.out[j - 1]
            y = self.y[j - 1] if o["s"] is None else self.y[j - 1] + o["s"]
            x = o["x"] + y.view_as(o["x"]).to(o["x"].dtype)
        h = None
        for li in range(first, end + (mlp is not None)):
            attn, n1, n2, f = m.layers[li]
            x = x + attn(n1(x), m.cache, 0, self.pos)
            h = n2(x)
            if li < end:
                x = x + swiglu(h, *f[:3], bias=f[3])
        if mlp is None:
            return {"logits": F.linear(m.norm(x), m.lm_head).float()}
        flat = h.reshape(-1, h.shape[-1])
        dev = m._route(mlp, flat, x)
        self.y[j].zero_()
        if self.packs is not None:
            self.packs[j].fill(*dev)
        return {"x": x, "flat": flat.to(self.in_dtype).contiguous(), "dev": dev, "s": mlp.shared_out(flat)}

    def _replay(self, j):
        if not self.graphs:
            self.out[j] = self._run(j)
            return
        if self.g[j] is None:  # warm up on a side stream (lazy initialisation), then capture
            cur = torch.cuda.current_stream()
            side = torch.cuda.Stream()
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                self._run(j)
            cur.wait_stream(side)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            g = torch.cuda.CUDAGraph()
            try:
                with torch.cuda.graph(g, pool=self.pool, capture_error_mode="thread_local"):
                    self.out[j] = self._run(j)
            except RuntimeError as ex:  # this PyTorch cannot capture it: the same work without graphs
                self.graphs, self.graph_error = False, str(ex)
                warnings.warn("decode without CUDA graphs: capture failed: %s" % ex)
                torch.cuda.synchronize()
                self.out[j] = self._run(j)
                return
            self.g[j] = g
        self.g[j].replay()

    def step(self, ids, step):
        m = self.m
        self.ids.copy_(ids)
        self.pos.fill_(step.pos0)
        for j, (_, _, mlp) in enumerate(self.segs):
            self._replay(j)
            if mlp is None:
                break
            o = self.out[j]
            m._after_route(mlp, o["flat"], o["dev"], self.packs[j].host() if self.packs else None, step,
                           out=self.y[j])
        # a graph's output is its static buffer, overwritten by the next replay: the caller
        # gets its own copy (it may keep every step's logits)
        return self.out[-1]["logits"].clone() if self.graphs else self.out[-1]["logits"]


class MoEModel(torch.nn.Module):
    """The decoder.  forward(ids [B, T]) -> logits [B, T, vocab] with the KV cache advanced."""

    def __init__(self, cfg: Config, ckpt: Checkpoint, backend, device="cpu", dtype=torch.float32):
        super().__init__()
        self.cfg, self.device, self.dtype = cfg, torch.device(device), dtype
        self.backend = backend
        load_experts = backend.needs_checkpoint_experts

        def get(name, optional=False):
            t = ckpt.maybe(name) if optional else ckpt.get(name)
            if t is None:
                return None
            if t.dtype.is_floating_point:
                t = t.to(self.device, self.dtype if t.dim() > 1 or name.endswith(".bias") else torch.float32)
            return t
        self.embed = get("model.embed_tokens.weight")
        self.norm = RMSNorm(get("model.norm.weight"), cfg.eps)
        self.lm_head = self.embed if cfg.tie_embeddings and "lm_head.weight" not in ckpt else get("lm_head.weight")
        self.layers = []
        self.moe = []
        for i in range(cfg.n_layers):
            p = "model.layers.%d." % i
            attn = Attention(cfg, get, p + "self_attn.", i)
            n1 = RMSNorm(get(p + "input_layernorm.weight"), cfg.eps)
            n2 = RMSNorm(get(p + "post_attention_layernorm.weight"), cfg.eps)
            if router_name(cfg.family, i) in ckpt:
                mlp = MoEBlock(cfg, get, i, len(self.moe), load_experts)
                self.moe.append((i, mlp, n2))
            else:
                mlp = [get(p + "mlp.%s_proj.weight" % n) for n in ("gate", "up", "down")]
                mlp.append([get(p + "mlp.%s_proj.bias" % n) for n in ("gate", "up", "down")] if cfg.mlp_bias else None)
            self.layers.append((attn, n1, n2, mlp))
        if not self.moe:
            raise StrataError("%s: no MoE layer (no router weight such as '%s')" %
                              (ckpt.path, router_name(cfg.family, 0)), code=-13)
        self.cache: Optional[KVCache] = None
        self.steps = 0
        self.pred_depth = 0
        self.pred_topn = cfg.top_k
        self.recorder = None
        self.req = 0
        # decode steps (T = 1) as fixed device work between the MoE layers' routing reads:
        # "graph" (CUDA: one CUDA graph per stretch, the default there), "eager" (the same work
        # without graphs: how the CPU checks it), "off" (the plain forward; the CPU's default)
        env = os.environ.get("STRATA_STATIC_DECODE")
        self.static_decode = env or ("graph" if self.device.type == "cuda" else "off")
        if self.static_decode not in ("graph", "eager", "off"):
            raise StrataError("STRATA_STATIC_DECODE=%s: graph, eager or off" % self.static_decode, code=-1)
        self._plan = None
        self._packs = {}
        backend.attach(self)

    @property
    def n_moe_layers(self) -> int:
        return len(self.moe)

    def reset(self, batch: int = 1, max_len: int = 2048) -> None:
        """A fresh KV cache (a new request); the cache's memory is kept when it is of the same
        batch and at least max_len long (a decode plan over it stays valid)."""
        c = self.cfg
        if self.cache is not None and self.cache.k[0].shape[0] == batch and self.cache.max_len >= max_len:
            self.cache.len = 0
            return
        if c.mla:
            kd, vd, kvh = c.qk_nope_dim + c.qk_rope_dim, c.v_head_dim, c.n_heads
        else:
            kd = vd = c.head_dim
            kvh = c.n_kv_heads
        self.cache = KVCache(c.n_layers, batch, kvh, kd, vd, max_len, self.device, self.dtype)

    def _predict(self, m: int, resid):
        """Lookahead: MoE layer m+d's norm and router on layer m's residual, d = 1..depth.
        -> (ids [N, depth, topn] int32 with -1 past the last layer, scores float32), on the
        residual's device."""
        N = resid.shape[0]
        D, n = self.pred_depth, self.pred_topn
        ids = torch.full((N, D, n), -1, dtype=torch.int32, device=resid.device)
        sc = torch.zeros((N, D, n), dtype=torch.float32, device=resid.device)
        for d in range(1, D + 1):
            if m + d >= len(self.moe):
                break
            _, blk, norm = self.moe[m + d]
            i, w = blk.router(norm(resid), n)
            ids[:, d - 1, :i.shape[1]] = i
            sc[:, d - 1, :w.shape[1]] = w
        return ids, sc

    def _route(self, mlp, flat, x):
        """A MoE layer's routing and lookahead predictions, on the device."""
        sel, w = mlp.router(flat, self.cfg.top_k)
        pred = self._predict(mlp.moe_idx, x.reshape(-1, x.shape[-1])) if self.pred_depth else None
        return sel, w, pred

    def _host_routing(self):
        """Whether the routing must reach the host each MoE layer (the Strata engine or the trace
        recorder reads it there)."""
        return getattr(self.backend, "host_routing", False) or self.recorder is not None

    def _experts(self, mlp, flat, sel, w, pred, step, out=None):
        """The backend's routed experts; with out (zeros, the backend's out_dtype) the result
        lands there."""
        if out is not None and getattr(self.backend, "accumulates", False):
            self.backend.experts(mlp, flat, sel, w, pred, step, out=out)
            return out
        y = self.backend.experts(mlp, flat, sel, w, pred, step)
        return y if out is None else out.copy_(y)

    def _pack(self, m: int, dev):
        sel, _, pred = dev
        key = (m, tuple(sel.shape), None if pred is None else tuple(pred[0].shape), str(sel.device))
        p = self._packs.get(key)
        if p is None:
            p = self._packs[key] = _Packed(sel.shape[0], sel.shape[1], key[2], sel.device)
        return p

    def _after_route(self, mlp, flat, dev, host, step, out=None):
        """Run the backend and the recorder on one MoE layer's routing: dev the device tensors
        (sel, w, pred), host None or their host copies (_Packed.host())."""
        sel, w, pred = host if host is not None and getattr(self.backend, "host_routing", False) else dev
        y = self._experts(mlp, flat, sel, w, pred, step, out)
        if self.recorder is not None:
            hs, hw, hp = host
            self.recorder.layer(mlp.moe_idx, hs, hw, None if hp is None else hp[0], None if hp is None else hp[1])
        return y

    @torch.no_grad()
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.cache is None:
            self.reset(ids.shape[0])
        B, T = ids.shape
        pos0 = self.cache.len
        step = Step(self.steps, pos0, decode=pos0 > 0 and T == 1)
        if step.decode and self.static_decode != "off" and not self.cfg.mla:
            logits = self._decode_static(ids, step)
        else:
            logits = self._forward_eager(ids, step)
        self.cache.len = pos0 + T
        if self.recorder is not None:
            if B != 1:
                raise StrataError("trace recording takes batch 1 (one request per trace stream)", code=-13)
            self.recorder.step(self.req, pos0, step.decode)
        self.steps += 1
        return logits

    def _forward_eager(self, ids, step):
        pos0 = step.pos0
        x = F.embedding(ids.to(self.device), self.embed)
        host = self._host_routing()
        for attn, n1, n2, mlp in self.layers:
            x = x + attn(n1(x), self.cache, pos0)
            h = n2(x)
            if isinstance(mlp, MoEBlock):
                flat = h.reshape(-1, h.shape[-1])
                dev = self._route(mlp, flat, x)
                hr = self._pack(mlp.moe_idx, dev).fill(*dev).host() if host else None
                y = self._after_route(mlp, flat, dev, hr, step)
                s = mlp.shared_out(flat)
                if s is not None:
                    y = y + s
                x = x + y.view_as(x).to(x.dtype)
            else:
                x = x + swiglu(h, *mlp[:3], bias=mlp[3])
        return F.linear(self.norm(x), self.lm_head).float()

    def _decode_static(self, ids, step):
        B = ids.shape[0]
        key = (B, self.pred_depth, self.pred_topn, self._host_routing(), self.static_decode)
        if self._plan is None or self._plan.key != key or self._plan.cache is not self.cache:
            self._plan = None
            self._plan = _StaticDecode(self, B, key)
        return self._plan.step(ids, step)

    def start_recording(self, path: str, pred_depth: int = 0, pred_topn: Optional[int] = None,
                        model_name: str = "") -> None:
        """Record every following step's routing (and lookahead predictions) to path."""
        from .core import Recorder
        if pred_depth:
            self.pred_depth, self.pred_topn = pred_depth, pred_topn or self.cfg.top_k
        self.recorder = Recorder(path, len(self.moe), self.cfg.n_experts, self.cfg.top_k,
                                 self.pred_depth, self.pred_topn if self.pred_depth else 0, model_name or None)

    def stop_recording(self, commit: bool = True) -> int:
        r, self.recorder = self.recorder, None
        n = r.count if r else 0
        if r:
            r.finish(commit)
        return n

    @torch.no_grad()
    def generate(self, prompt: List[int], max_new_tokens: int, on_token=None) -> List[int]:
        """Greedy decoding of one request: prefill, then one token per step."""
        self.reset(1, len(prompt) + max_new_tokens + 1)
        logits = self.forward(torch.tensor([prompt], dtype=torch.long))
        out = []
        for i in range(max_new_tokens):
            nxt = int(logits[0, -1].argmax())
            out.append(nxt)
            if on_token:
                on_token(i, nxt)
            if i + 1 < max_new_tokens:
                logits = self.forward(torch.tensor([[nxt]], dtype=torch.long))
        self.req += 1
        return out

    @torch.no_grad()
    def perplexity(self, tokens: List[int], ctx: int = 256, progress=None) -> dict:
        """exp(mean NLL) of tokens, in windows of ctx tokens (each a fresh request)."""
        nll, n = 0.0, 0
        for w0 in range(0, max(len(tokens) - 1, 0), ctx):
            seg = tokens[w0:w0 + ctx + 1]
            if len(seg) < 2:
                break
            self.reset(1, len(seg))
            logits = self.forward(torch.tensor([seg[:-1]], dtype=torch.long))
            lp = torch.log_softmax(logits[0], dim=-1)
            tgt = torch.tensor(seg[1:], dtype=torch.long, device=lp.device)
            nll -= float(lp.gather(1, tgt.unsqueeze(1)).sum())
            n += len(seg) - 1
            self.req += 1
            if progress:
                progress(w0 + len(seg) - 1, len(tokens) - 1)
        if not n:
            raise StrataError("perplexity: fewer than 2 tokens", code=-1)
        return {"tokens": n, "nll": nll / n, "ppl": math.exp(nll / n)}


def load(path, backend=None, device: Optional[str] = None, dtype=None,
         ignore_rope_scaling: bool = False) -> MoEModel:
    """Load a Hugging Face checkpoint directory with a backend (default: the torch reference).
    device: default the backend's (a StrataBackend's engine) or cuda when PyTorch has a GPU;
    dtype: default bf16 on cuda, float32 on cpu."""
    from .backends import TorchBackend
    if device is None:
        device = getattr(backend, "device", None) or ("cuda" if torch.cuda.is_available() else "cpu")
    ckpt = Checkpoint(path) if isinstance(path, str) else path  # or an object like tiny.MemoryCheckpoint
    cfg = Config.from_hf(ckpt.config, ckpt.path + "/config.json", ignore_rope_scaling)
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    return MoEModel(cfg, ckpt, backend or TorchBackend(), device, dtype)
