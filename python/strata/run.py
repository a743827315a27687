"""Run a Hugging Face MoE checkpoint with Strata underneath: greedy generation, perplexity,
routing traces.

  python3 -m strata.run generate --model DIR --prompt-ids 1,2,3 --max-new-tokens 32
  python3 -m strata.run generate --model DIR --backend strata --shards Q --vram 2G --ram 4G \\
      --place static --prefetch lookahead:depth=2 --prompt "text" --record out.strace
  python3 -m strata.run ppl --model DIR --text FILE --ctx 256 --backend bf16

Backends: torch (reference, float32 token loop), bf16 (one GEMM per active expert, model dtype),
strata (experts from the tiered shards of --shards, made by `strata quantize --in DIR --naming
auto`, through the engine; every policy spec the CLI takes).  Text is tokenized as UTF-8 bytes
(ids 0..255) unless --prompt-ids / --ids-file give token ids: there is no tokenizer here.
Results print as one JSON object with --json.
"""
import argparse
import json
import sys
import time

import torch

from . import load
from ._capi import StrataError


def _backend(a):
    from .backends import BatchedBackend, StrataBackend, TorchBackend
    if a.backend == "torch":
        return TorchBackend()
    if a.backend == "bf16":
        return BatchedBackend()
    if not a.shards:
        raise StrataError("--backend strata needs --shards DIR (strata quantize output of --model)", code=-1)
    return StrataBackend(a.shards, a.vram, a.ram, a.place, a.evict, a.prefetch,
                         "1" if a.device.startswith("cuda") else "0", a.max_tokens, a.engine_options,
                         a.pred_depth)


def _dtype(a):
    return {"auto": None, "bf16": torch.bfloat16, "f32": torch.float32, "f16": torch.float16}[a.dtype]


def _tokens(a, text_arg):
    if getattr(a, "prompt_ids", None):
        return [int(x) for x in a.prompt_ids.replace(",", " ").split()]
    if getattr(a, "ids_file", None):
        with open(a.ids_file) as f:
            return [int(x) for x in f.read().split()]
    if text_arg is None:
        raise StrataError("give a prompt (--prompt or --prompt-ids)", code=-1)
    return list(text_arg.encode("utf-8"))


def _common(p):
    p.add_argument("--model", required=True, help="Hugging Face checkpoint directory (config.json + *.safetensors)")
    p.add_argument("--backend", choices=("torch", "bf16", "strata"), default="bf16",
                   help="routed-expert backend (default bf16)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                   help="cpu or cuda (default: cuda when PyTorch sees a GPU)")
    p.add_argument("--dtype", choices=("auto", "bf16", "f16", "f32"), default="auto",
                   help="model dtype (auto: bf16 on cuda, f32 on cpu)")
    p.add_argument("--shards", help="Strata shard directory of the same model (--backend strata)")
    p.add_argument("--vram", default="8G", help="VRAM budget of the engine (default 8G)")
    p.add_argument("--ram", default="16G", help="pinned RAM budget (default 16G)")
    p.add_argument("--place", default="static", help="placement policy spec (default static)")
    p.add_argument("--evict", default="lru", help="eviction policy spec (default lru)")
    p.add_argument("--prefetch", default="none", help="prefetch policy spec, e.g. lookahead:depth=2")
    p.add_argument("--pred-depth", type=int, default=None,
                   help="lookahead depth the model computes (default: the lookahead policy's depth, else 0)")
    p.add_argument("--pred-topn", type=int, default=None, help="experts predicted per later layer (default top_k)")
    p.add_argument("--engine-options", default="", help="more engine options: 'seed=1 verify=1 mover=uring ...'")
    p.add_argument("--max-tokens", type=int, default=512, help="tokens per engine call (longer prompts are chunked)")
    p.add_argument("--record", help="write the routing trace here (.strace or .jsonl)")
    p.add_argument("--ignore-rope-scaling", action="store_true", help="run a rope_scaling model without it")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m strata.run", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="greedy generation of one prompt")
    _common(g)
    g.add_argument("--prompt", help="prompt text (UTF-8 bytes as tokens)")
    g.add_argument("--prompt-ids", help="prompt token ids, comma or space separated")
    g.add_argument("--max-new-tokens", type=int, default=32)
    p = sub.add_parser("ppl", help="perplexity over a text file")
    _common(p)
    p.add_argument("--text", help="text file (UTF-8 bytes as tokens)")
    p.add_argument("--ids-file", help="file of whitespace-separated token ids instead of --text")
    p.add_argument("--ctx", type=int, default=256, help="window length (default 256)")
    p.add_argument("--limit", type=int, default=0, help="score at most this many tokens (0: all)")
    a = ap.parse_args(argv)
    try:
        return _run(a)
    except StrataError as e:
        print("strata.run: %s" % e, file=sys.stderr)
        return 1


def _run(a) -> int:
    backend = _backend(a)
    t0 = time.time()
    m = load(a.model, backend, a.device, _dtype(a), a.ignore_rope_scaling)
    if a.pred_depth is not None:
        m.pred_depth = a.pred_depth
    if a.pred_topn:
        m.pred_topn = a.pred_topn
    load_s = time.time() - t0
    if a.record:
        m.start_recording(a.record, m.pred_depth, m.pred_topn, m.cfg.family)
    res = {"model": a.model, "family": m.cfg.family, "backend": backend.name, "device": a.device,
           "load_s": round(load_s, 3)}
    try:
        if a.cmd == "generate":
            prompt = _tokens(a, a.prompt)
            sync = torch.cuda.synchronize if a.device.startswith("cuda") else (lambda: None)
            times = []

            def tick(i, tok):
                sync()
                times.append(time.time())
            t1 = time.time()
            out = m.generate(prompt, a.max_new_tokens, tick)
            dec = (times[-1] - times[0]) if len(times) > 1 else 0.0
            res.update({"prompt_tokens": len(prompt), "tokens": out, "prefill_s": round(times[0] - t1, 4),
                        "decode_tok_s": round((len(times) - 1) / dec, 3) if dec > 0 else None})
            if not a.json:
                txt = bytes(x for x in out if x < 256).decode("utf-8", "replace")
                print("tokens: %s" % " ".join(map(str, out)))
                print("text:   %r" % txt)
                print("decode: %s tok/s (%d tokens)" % (res["decode_tok_s"], len(out)))
        else:
            if a.text:
                with open(a.text, "rb") as f:
                    toks = list(f.read())
            else:
                toks = _tokens(a, None)
            if a.limit:
                toks = toks[:a.limit + 1]
            r = m.perplexity(toks, a.ctx, _progress if not a.json and sys.stderr.isatty() else None)
            res.update(r)
            if not a.json:
                print("perplexity %.4f over %d tokens (nll %.4f)" % (r["ppl"], r["tokens"], r["nll"]))
    finally:
        if a.record:
            n = m.stop_recording(commit=True)
            res["trace"], res["trace_tokens"] = a.record, n
            if not a.json:
                print("trace:  %s (%d tokens)" % (a.record, n))
    if hasattr(backend, "stats"):
        res["engine"] = backend.stats()
    if a.json:
        print(json.dumps(res))
    return 0


_t0 = [0.0]


def _progress(done, total):
    if not _t0[0]:
        _t0[0] = time.time()
    el = time.time() - _t0[0]
    eta = el / done * (total - done) if done else 0
    print("\rppl: %d/%d tokens, ETA %.0fs " % (done, total, eta), end="" if done < total else "\n",
          file=sys.stderr, flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
