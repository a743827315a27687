"""A Qwen3-MoE decoder in plain PyTorch, shaped for training: every layer's routed experts are
three stacked tensors [E, inter, hidden] / [E, hidden, inter], and the expert computation is
grouped (tokens sorted by expert, one batched GEMM per matrix over experts padded to the
largest expert's token count), so a step costs three bmm calls per layer whatever E is.

The math is Qwen3-MoE's as `transformers` implements it (RMSNorm in float32, q/k RMSNorm per
head before the rotary embedding, grouped-query attention, softmax router over all experts,
top-k, renormalised when norm_topk_prob, SwiGLU experts), so a checkpoint written by
to_hf_tensors() loads as Qwen3MoeForCausalLM.  Works with torch 1.13 (CPU) and 2.x (CUDA).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .hfckpt import MoeConfig, expert_name


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        H, hd = c.hidden_size, c.head_dim
        self.q_proj = nn.Linear(H, c.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(H, c.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(H, c.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * hd, H, bias=False)
        self.q_norm = RMSNorm(hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(hd, c.rms_norm_eps)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        c = self.c
        q = self.q_norm(self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        if hasattr(F, "scaled_dot_product_attention"):
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / math.sqrt(c.head_dim)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            s = s.float().masked_fill(mask, float("-inf"))
            o = (s.softmax(-1).to(v.dtype)) @ v
        return self.o_proj(o.transpose(1, 2).reshape(B, T, -1))


def route(logits, k, renorm):
    """Router logits [N, E] -> (probs [N, E] float, ids [N, k], weights [N, k] float), descending."""
    probs = logits.float().softmax(-1)
    w, idx = probs.topk(k, dim=-1)
    if renorm:
        w = w / w.sum(-1, keepdim=True)
    return probs, idx, w


def group_by_expert(idx):
    """Routing ids [N, k] -> the (token, expert) entries grouped by expert, for batched GEMMs:
    (order, se, slot, pos, tok, used, cap), each per entry in expert order (one stable sort)
    but used and cap: order the entry's index in idx.reshape(-1), se its expert, slot that
    expert's index among used (the experts routed to, ascending), pos its row within the
    expert's group, tok its token; cap the largest group.  One host sync (used, cap)."""
    k = idx.shape[1]
    flat = idx.reshape(-1)
    se, order = torch.sort(flat, stable=True)
    used, counts = torch.unique_consecutive(se, return_counts=True)
    slot = torch.repeat_interleave(torch.arange(used.numel(), device=idx.device), counts, output_size=flat.numel())
    starts = counts.cumsum(0) - counts
    pos = torch.arange(flat.numel(), device=idx.device) - starts[slot]
    tok = torch.div(order, k, rounding_mode="floor")
    return order, se, slot, pos, tok, used, int(counts.max())


def grouped_experts(x, idx, w, wg, wu, wd):
    """x [N, H], idx/w [N, k]; wg/wu [E, I, H], wd [E, H, I] -> [N, H] = sum_j w_j expert_{idx_j}(x)."""
    N, H = x.shape
    E = wg.shape[0]
    order, se, _, pos, tok, _, cap = group_by_expert(idx)
    buf = x.new_zeros(E, cap, H)
    buf[se, pos] = x[tok]
    h = F.silu(torch.bmm(buf, wg.transpose(1, 2))) * torch.bmm(buf, wu.transpose(1, 2))
    y = torch.bmm(h, wd.transpose(1, 2))[se, pos]
    y = (y.float() * w.reshape(-1)[order].unsqueeze(1)).to(x.dtype)
    return torch.zeros_like(x).index_add_(0, tok, y)


class MoeBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        E, I, H = c.num_experts, c.moe_intermediate_size, c.hidden_size
        self.gate = nn.Linear(H, E, bias=False)
        self.w_gate = nn.Parameter(torch.empty(E, I, H))
        self.w_up = nn.Parameter(torch.empty(E, I, H))
        self.w_down = nn.Parameter(torch.empty(E, H, I))

    def forward(self, x):
        """x [B, T, H] -> (y, probs [N, E], ids [N, k])."""
        B, T, H = x.shape
        xf = x.reshape(-1, H)
        probs, idx, w = route(self.gate(xf), self.c.num_experts_per_tok, self.c.norm_topk_prob)
        wg, wu, wd = self.w_gate, self.w_up, self.w_down
        if xf.dtype != wg.dtype:
            wg, wu, wd = wg.to(xf.dtype), wu.to(xf.dtype), wd.to(xf.dtype)
        y = grouped_experts(xf, idx, w, wg, wu, wd)
        return y.view(B, T, H), probs, idx, w


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MoeBlock(c)


class MoeLM(nn.Module):
    def __init__(self, c: MoeConfig):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def init_weights(self, seed):
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        for n, p in self.named_parameters():
            if n.endswith("norm.weight"):
                continue
            with torch.no_grad():
                p.copy_(torch.randn(p.shape, generator=g) * std)
        for l in self.layers:  # scaled residual projections (GPT-2)
            with torch.no_grad():
                s = 1.0 / math.sqrt(2 * self.c.num_hidden_layers)
                l.self_attn.o_proj.weight.mul_(s)
                l.mlp.w_down.mul_(s)

    def rope(self, T, device, dtype):
        t = torch.arange(T, device=device, dtype=torch.float32)
        f = torch.outer(t, self.inv_freq.to(device))
        e = torch.cat((f, f), dim=-1)
        return e.cos().to(dtype)[None, None], e.sin().to(dtype)[None, None]

    def forward(self, ids, want=()):
        """ids [B, T] -> dict: logits [B, T, V] (float), aux (load-balancing loss), and when asked
        ('route' in want) ids/weights per layer [N, k]; ('resid' in want) the residual stream
        entering each layer's MoE block, [N, H] (what a lookahead predictor sees)."""
        c = self.c
        x = self.embed_tokens(ids)
        B, T = ids.shape
        cos, sin = self.rope(T, ids.device, torch.float32)
        aux = x.new_zeros((), dtype=torch.float32)
        out = {"route": [], "resid": []}
        for l in self.layers:
            x = x + l.self_attn(l.input_layernorm(x), cos, sin)
            if "resid" in want:
                out["resid"].append(x.reshape(B * T, -1))
            y, probs, idx, w = l.mlp(l.post_attention_layernorm(x))
            x = x + y
            if "route" in want:
                out["route"].append((idx, w))
            if self.training:
                f = torch.bincount(idx.reshape(-1), minlength=c.num_experts).float() / idx.shape[0]
                aux = aux + c.num_experts * (f * probs.mean(0)).sum()
        out["logits"] = self.lm_head(self.norm(x)).float()
        out["aux"] = aux / len(self.layers)
        return out

    def predict(self, layer, resid, depth, topn):
        """Lookahead: experts layer+depth's own norm and gate pick from layer's residual."""
        t = layer + depth
        if t >= len(self.layers):
            return None
        lt = self.layers[t]
        h = lt.post_attention_layernorm(resid)
        probs, idx, w = route(lt.mlp.gate(h), topn, self.c.norm_topk_prob)
        return idx, w

    # ---- Hugging Face names ----------------------------------------------------------------
    def to_hf_tensors(self, dtype=torch.bfloat16):
        sd = {}
        for n, p in self.named_parameters():
            p = p.detach().cpu()
            if ".mlp.w_" in n:
                li = int(n.split(".")[1])
                mat = {"w_gate": "gate", "w_up": "up", "w_down": "down"}[n.rsplit(".", 1)[1]]
                for e in range(p.shape[0]):
                    sd[expert_name(li, e, mat)] = p[e].to(dtype).clone()
                continue
            if n.startswith("lm_head"):
                key = n
            else:
                key = "model." + n
            sd[key] = p.to(dtype).clone()
        return sd

    def load_hf_tensors(self, sd, experts=None):
        """Load a checked {HF name: tensor} dict; experts: optional {HF expert name: tensor} that
        replaces the routed experts (e.g. dequantized tier formats)."""
        c = self.c
        with torch.no_grad():
            for n, p in self.named_parameters():
                if ".mlp.w_" in n:
                    li = int(n.split(".")[1])
                    mat = {"w_gate": "gate", "w_up": "up", "w_down": "down"}[n.rsplit(".", 1)[1]]
                    for e in range(c.num_experts):
                        name = expert_name(li, e, mat)
                        src = experts[name] if experts is not None and name in experts else sd[name]
                        p[e].copy_(src.to(p.dtype))
                    continue
                key = n if n.startswith("lm_head") else "model." + n
                p.copy_(sd[key].to(p.dtype))
        return self
