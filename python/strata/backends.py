"""MoE block backends: who computes a layer's routed experts.

A backend has ``needs_checkpoint_experts`` (whether the model loads the checkpoint's expert
tensors), ``attach(model)`` (called once the model is built), and
``experts(block, x, ids, weights, pred, step) -> y``: x [N, hidden] (the post-attention norm
output), ids [N, k] int64 and weights [N, k] float32 from the router, pred None or the lookahead
predictions (ids [N, depth, topn] int32, scores) for later MoE layers, step a model.Step; returns
y [N, hidden] = sum_j weights[:, j] * expert_{ids[:, j]}(x).
"""
import re
from typing import Optional

import torch
import torch.nn.functional as F

from ._capi import StrataError
from .moe import group_by_expert


class TorchBackend:
    """The reference: a token loop in float32 over the checkpoint's experts (or any weights put in
    block.w_gu / block.w_down, e.g. the dequantized shards)."""

    needs_checkpoint_experts = True
    name = "torch"
    out_dtype = torch.float32

    def attach(self, model) -> None:
        pass

    def experts(self, block, x, ids, weights, pred, step):
        I = block.w_down.shape[2]
        y = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for t in range(x.shape[0]):
            xt = x[t].float()
            for j in range(ids.shape[1]):
                e = int(ids[t, j])
                gu = block.w_gu[e].float() @ xt
                h = F.silu(gu[:I]) * gu[I:]
                y[t] += float(weights[t, j]) * (block.w_down[e].float() @ h)
        return y


class BatchedBackend:
    """BF16 (the model dtype) experts, each used expert's tokens in one GEMM, not a token loop.
    vectorised (default: where x is a CUDA tensor): the layer's (token, expert) entries grouped
    by expert (one sort), one bmm for gate|up and one for down over the experts routed to (their
    weights gathered, groups padded to the largest), one index_add back: ~20 launches a layer
    whatever top-k is.  Else, and where padding would more than double the rows (a skewed
    prefill), the same GEMMs expert by expert (~6 launches per used expert).  Both give the same
    result.  Not vectorised on the CPU by default: there gathering the used experts' weights (a
    fresh allocation each call) cost more than the loop's launches save."""

    needs_checkpoint_experts = True
    name = "bf16"

    def __init__(self, vectorised: Optional[bool] = None):
        self.vectorised = vectorised

    def attach(self, model) -> None:
        pass

    def experts(self, block, x, ids, weights, pred, step):
        order, se, slot, pos, tok, used, cap = group_by_expert(ids)
        U, rows = used.numel(), tok.numel()
        vec = x.is_cuda if self.vectorised is None else self.vectorised
        if not vec or U * cap > 2 * rows:
            return self._loop_experts(block, x, weights, order, se, tok)
        I = block.w_down.shape[2]
        E = block.w_gu.shape[0]
        w_gu = block.w_gu if U == E else block.w_gu.index_select(0, used)
        w_dn = block.w_down if U == E else block.w_down.index_select(0, used)
        buf = x.new_zeros(U, cap, x.shape[1])
        buf[slot, pos] = x[tok]
        gu = torch.bmm(buf, w_gu.transpose(1, 2))
        h = F.silu(gu[..., :I]) * gu[..., I:]
        out = torch.bmm(h, w_dn.transpose(1, 2))[slot, pos]
        wts = weights.reshape(-1)[order].to(x.dtype).unsqueeze(1)
        return torch.zeros_like(x).index_add_(0, tok, out * wts)

    @staticmethod
    def _loop_experts(block, x, weights, order, se, tok):
        """The same GEMMs one expert at a time: each used expert's tokens through F.linear."""
        I = block.w_down.shape[2]
        counts = torch.bincount(se, minlength=block.w_gu.shape[0]).tolist()
        wts = weights.reshape(-1)[order].to(x.dtype).unsqueeze(1)
        y = torch.zeros_like(x)
        i = 0
        for e, c in enumerate(counts):
            if not c:
                continue
            t = tok[i:i + c]
            gu = F.linear(x[t], block.w_gu[e])
            h = F.silu(gu[:, :I]) * gu[:, I:]
            y.index_add_(0, t, F.linear(h, block.w_down[e]) * wts[i:i + c])
            i += c
        return y


class StrataBackend:
    """Routed experts from tiered shards through the Strata engine (any placement / eviction /
    prefetch policy, tier budgets) and the fused kernels (GPU) or the CPU reference.  The shard
    directory is `strata quantize` (or `strata synth`) output of the same model; its shape must
    match the checkpoint's.  Lookahead predictions computed by the model are the prefetch hints
    (pred_depth > 0; default: the lookahead policy's depth, 0 with another prefetch policy)."""

    needs_checkpoint_experts = False
    name = "strata"
    host_routing = True          # the engine reads ids, weights and hints on the host
    accumulates = True           # experts(..., out=) adds into a given buffer
    input_dtype = torch.float32  # the kernels read float32 activations
    out_dtype = torch.float32

    def __init__(self, shards: str, vram="8G", ram="32G", place: str = "static", evict: str = "lru",
                 prefetch: str = "none", gpu: str = "auto", max_tokens: int = 512, options: str = "",
                 pred_depth: Optional[int] = None):
        from .core import Engine, Store, gpu_count
        if gpu == "auto":  # where PyTorch computes: the GPU when both it and libstrata see one
            gpu = "1" if torch.cuda.is_available() and gpu_count() > 0 else "0"
        self.store = Store(shards)
        self.engine = Engine(self.store, vram, ram, place, evict, prefetch, gpu, max_tokens, options)
        self.max_tokens = max_tokens
        if pred_depth is None:  # as deep as a lookahead policy looks: its depth (default 2), or
            pred_depth = 0      # its stage reach when deeper (stage=-1: depth + 1)
            if prefetch.startswith("lookahead"):
                m = re.search(r"depth=(\d+)", prefetch)
                pred_depth = int(m.group(1)) if m else 2
                m = re.search(r"stage=(-?\d+)", prefetch)
                if m:
                    pred_depth = max(pred_depth, pred_depth + 1 if int(m.group(1)) < 0 else int(m.group(1)))
        self.pred_depth = pred_depth
        self.device = "cuda" if self.engine.on_gpu else "cpu"
        self._layers = {}

    def attach(self, model) -> None:
        s, c = self.store.shape, model.cfg
        want = {"n_moe_layers": model.n_moe_layers, "n_experts": c.n_experts, "hidden": c.hidden,
                "inter": c.moe_inter}
        bad = ["%s %d (model %d)" % (k, s[k], v) for k, v in want.items() if s[k] != v]
        if bad:
            raise StrataError("%s: shards do not fit the model: %s" % (self.store.path, ", ".join(bad)), code=-13)
        dev = model.device.type
        if self.engine.on_gpu != (dev == "cuda"):
            raise StrataError("the engine runs on the %s but the model on %s (engine option gpu=%s)" %
                              ("GPU" if self.engine.on_gpu else "host", dev, "0" if dev == "cpu" else "1"),
                              code=-1)
        if self.pred_depth:
            model.pred_depth = self.pred_depth

    def experts(self, block, x, ids, weights, pred, step, out=None):
        """ids / weights / pred on the host (host_routing) or the device; out: None or a zeroed
        float32 [N, hidden] tensor the layer's output is added to (x then float32 too)."""
        xf = x if x.dtype == torch.float32 and x.is_contiguous() else x.float().contiguous()
        y = torch.zeros_like(xf) if out is None else out
        ih = ids.to("cpu", torch.int32).contiguous()
        wh = weights.to("cpu", torch.float32).contiguous()
        hints = None
        if pred is not None:
            # every prediction as it is: the engine skips -1 ids and layers past the last one
            pid, psc = pred
            hints = (self._hint_layers(block.moe_idx, tuple(pid.shape)),
                     pid.to("cpu", torch.int32).contiguous().view(-1), psc.to("cpu", torch.float32).contiguous().view(-1))
        if xf.shape[0] <= self.max_tokens:  # a decode step: one call, no slices
            self.engine.moe_forward(step.index, block.moe_idx, xf, y, ih, wh, hints=hints)
            return y
        for t0 in range(0, xf.shape[0], self.max_tokens):  # long prompts in chunks of max_tokens
            t1 = min(t0 + self.max_tokens, xf.shape[0])
            self.engine.moe_forward(step.index, block.moe_idx, xf[t0:t1], y[t0:t1], ih[t0:t1], wh[t0:t1],
                                    hints=hints if t0 == 0 else None)
        return y

    def _hint_layers(self, m: int, shape):
        """The layer of each prediction [N, D, n] made at MoE layer m: m + 1 .. m + D (cached)."""
        key = (m, shape)
        t = self._layers.get(key)
        if t is None:
            N, D, n = shape
            t = self._layers[key] = (torch.arange(1, D + 1, dtype=torch.int32) + m).view(1, D, 1) \
                .expand(N, D, n).contiguous().view(-1)
        return t

    def stats(self):
        return self.engine.stats()

    def close(self) -> None:
        self.engine.close()
        self.store.close()
