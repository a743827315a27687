"""Strata from Python and PyTorch.

A thin layer over libstrata.so's C ABI (core/include/libstrata.h, through ctypes: no compiled
extension) plus a PyTorch MoE runner that loads Hugging Face checkpoints without `transformers`.

Stable API (kept across changes; new things are added, not renamed):

  Low level (strata.core):
    Store(path)                                  a shard directory; .shape, .expert_format(l, e),
                                                 .dequantize(l, e) -> (gate, up, down) float32
    Engine(store, vram="8G", ram="32G", place="static", evict="lru", prefetch="none",
           gpu="auto", max_tokens=256, options="")
      .moe_forward(token, moe_layer, x, y, ids, weights, stream=None, hints=None)
                                                 y += routed experts of x (zero copy; CUDA
                                                 tensors on the GPU path, on the caller's stream)
      .stats() -> dict, .on_gpu, .name, .close()
    Recorder(path, n_moe_layers, n_experts, top_k, pred_depth=0, pred_topn=0, model=None)
      .layer(moe_layer, ids, weights, pred_ids, pred_scores), .step(req, pos0, decode), .finish()
    StrataError                                  every failure; .code, .status, str() = C message

  Runner (strata.model, strata.backends):
    load(path, backend=None, device="cpu", dtype=None) -> MoEModel
    TorchBackend()                               reference (float32 token loop)
    BatchedBackend()                             batched GEMMs over the experts routed to, model dtype
    StrataBackend(shards, vram, ram, place, evict, prefetch, gpu, max_tokens, options, pred_depth)
    MoEModel: forward(ids) -> logits, generate(prompt_ids, max_new_tokens) -> ids,
              perplexity(ids, ctx) -> {"ppl", "nll", "tokens"}, reset(batch, max_len),
              start_recording(path, pred_depth, pred_topn), stop_recording(), .cfg, .moe
    python3 -m strata.run --help                 generate / ppl / --record from the shell
    python3 -m strata.tiny --help                tiny random checkpoints of every family

Five lines that put Strata under a model (tests/python/test_readme.py runs them):

    import strata
    backend = strata.StrataBackend("q/", vram="1G", ram="2G", prefetch="lookahead:depth=2")
    model = strata.load("hf-model/", backend)
    print(model.generate([1, 2, 3], max_new_tokens=16))
    print(backend.stats()["hits_vram"])
"""
try:
    import torch  # noqa: F401
except ImportError as _e:
    raise ImportError("the strata package needs PyTorch, which this Python (%s) lacks: use Debian's "
                      "/usr/bin/python3 with python3-torch (apt-get install python3-torch) or a Python that has "
                      "torch" % __import__("sys").executable) from _e
from ._capi import StrataError  # noqa: E402
from .backends import BatchedBackend, StrataBackend, TorchBackend
from .core import Engine, Recorder, Store, gpu_count, parse_size
from .model import Config, MoEModel, load

__all__ = ["StrataError", "Store", "Engine", "Recorder", "gpu_count", "parse_size", "load", "Config", "MoEModel",
           "TorchBackend", "BatchedBackend", "StrataBackend"]
__version__ = "1.0"
