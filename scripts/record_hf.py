#!/usr/bin/env python3
"""Record expert routing of a Hugging Face transformers MoE model as a Strata trace (JSONL twin).

Supported families (by config.model_type): mixtral, qwen2_moe, qwen3_moe, olmoe, deepseek_v2,
deepseek_v3 (and models shaped like them: a decoder layer whose `mlp` or `block_sparse_moe` has a
`gate` with a [n_experts, hidden] weight and an `experts` module).

How it records: a forward pre-hook on every MoE layer's router (`gate`) captures the hidden state
the router sees, and the routing is recomputed from the gate weight with the family's rule (the
runner's strata.model.route: softmax top-k, optional renormalisation; DeepSeek-V2's scaled,
group-limited top-k; DeepSeek-V3's sigmoid + correction bias + group-limited top-k), so it does
not depend on what a given transformers version returns from the router.  Where
the model can return its router logits (`output_router_logits`), the test checks both agree.

Lookahead predictions: a pre-hook on layer l's `post_attention_layernorm` captures the residual
stream r_l at the moment layer l's router runs; for d = 1..depth the next MoE layers' own norm and
gate are applied to it: pred[l][d-1] = top-n( gate_{l+d}( norm_{l+d}(r_l) ) ).  That is what a
lookahead prefetcher can know when layer l runs.

Output: one header line, then one JSON object per token (see core/include/strata/trace.h):
  {"req":0,"phase":"prefill","pos":3,"layers":[[e,..],..],"weights":[[w,..],..],
   "pred":[[[e,..],..],..],"pred_w":[[[s,..],..],..]}
Prefill tokens are the prompt (one forward over it); decode tokens are greedy, one per forward with
the KV cache.  Convert with `strata trace convert out.jsonl out.strace`.

Usage:
  python3 scripts/record_hf.py --model mistralai/Mixtral-8x7B-Instruct-v0.1 \
      --prompt "Write a haiku about caches." --max-new-tokens 128 --pred-depth 2 -o mixtral.jsonl
  python3 scripts/record_hf.py --model Qwen/Qwen3-30B-A3B --prompts prompts.txt -o qwen.jsonl
"""
import argparse
import json
import os
import sys


def _moe_blocks(model):
    """[(decoder_layer_index, decoder_layer, moe_block)] for layers with routed experts."""
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise ValueError("cannot find the decoder layers (model.model.layers)")
    out = []
    for i, layer in enumerate(layers):
        for name in ("block_sparse_moe", "mlp", "moe", "feed_forward"):
            blk = getattr(layer, name, None)
            gate = getattr(blk, "gate", None) if blk is not None else None
            w = getattr(gate, "weight", None) if gate is not None else None
            if w is not None and w.dim() == 2 and hasattr(blk, "experts"):
                out.append((i, layer, blk))
                break
    if not out:
        raise ValueError("no MoE layers found (no decoder layer has an mlp/block_sparse_moe with a gate)")
    return out


def routing_rule(config):
    """The runner's description of config's routing rule (strata.model.route reads it): the family's
    rule for the families python/strata knows, else top-k of softmax, renormalised when
    norm_topk_prob."""
    import types
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from strata.model import FAMILIES, Config
    d = config.to_dict()
    if d.get("model_type") in FAMILIES:
        return Config.from_hf(d, "%s config" % d["model_type"], ignore_rope_scaling=True)
    return types.SimpleNamespace(routing="softmax", grouped=False, n_group=1, topk_group=1, routed_scale=1.0,
                                 norm_topk=bool(d.get("norm_topk_prob", False)), mla=False)


class Router:
    """The family's routing rule (strata.model.route, the runner's), applied to any hidden state and
    any MoE layer's gate."""

    def __init__(self, config, blocks):
        self.config = config
        self.kind = getattr(config, "model_type", "")
        self.top_k = int(getattr(config, "num_experts_per_tok", None) or getattr(config, "moe_top_k", 2))
        self.blocks = blocks
        self.n_experts = int(blocks[0][2].gate.weight.shape[0])
        self.rule = routing_rule(config)

    def route(self, moe_idx, x, k):
        """x: [T, hidden] -> (ids [T, k] long, weights [T, k] float), descending weight."""
        import torch
        from strata.model import route
        gate = self.blocks[moe_idx][2].gate
        w = gate.weight
        if self.rule.mla:  # DeepSeek's router runs in float32
            logits = torch.nn.functional.linear(x.float(), w.float())
        else:
            logits = torch.nn.functional.linear(x.to(w.dtype), w).float()
        return route(self.rule, logits, k, getattr(gate, "e_score_correction_bias", None))


class Recorder:
    def __init__(self, model, pred_depth=0, pred_topn=None):
        self.model = model
        self.blocks = _moe_blocks(model)
        self.router = Router(model.config, self.blocks)
        self.L = len(self.blocks)
        self.k = self.router.top_k
        self.E = self.router.n_experts
        self.D = int(pred_depth)
        self.N = int(pred_topn or self.k) if self.D else 0
        self.cur = {}
        self.pred = {}
        self.handles = []
        for m, (_, layer, blk) in enumerate(self.blocks):
            self.handles.append(blk.gate.register_forward_pre_hook(self._gate_hook(m), with_kwargs=True))
            if self.D:
                norm = getattr(layer, "post_attention_layernorm", None)
                if norm is not None:
                    self.handles.append(norm.register_forward_pre_hook(self._norm_hook(m), with_kwargs=True))

    def close(self):
        for h in self.handles:
            h.remove()
        self.handles = []

    @staticmethod
    def _first(args, kwargs):
        if args:
            return args[0]
        for key in ("hidden_states", "input", "x"):
            if key in kwargs:
                return kwargs[key]
        return None

    def _gate_hook(self, m):
        def hook(module, args, kwargs):
            x = self._first(args, kwargs)
            if x is None:
                return None
            import torch
            with torch.no_grad():
                x = x.reshape(-1, x.shape[-1])
                self.cur[m] = self.router.route(m, x, self.k)
                if self.D and m not in self.pred:  # no norm hook: predict from the gate input
                    self.pred[m] = self._predict(m, x, normed=True)
            return None
        return hook

    def _norm_hook(self, m):
        def hook(module, args, kwargs):
            r = self._first(args, kwargs)
            if r is None:
                return None
            import torch
            with torch.no_grad():
                self.pred[m] = self._predict(m, r.reshape(-1, r.shape[-1]), normed=False)
            return None
        return hook

    def _predict(self, m, h, normed):
        out = []
        for d in range(1, self.D + 1):
            t = m + d
            if t >= self.L:
                out.append(None)
                continue
            x = h
            if not normed:
                norm = getattr(self.blocks[t][1], "post_attention_layernorm", None)
                if norm is not None:
                    x = norm(h)
            out.append(self.router.route(t, x, self.N))
        return out

    def header(self, name):
        h = {"strata_trace": 1, "layers": self.L, "experts": self.E, "top_k": self.k, "model": name,
             "weights": "f32"}
        if self.D:
            h["pred_depth"] = self.D
            h["pred_topn"] = self.N
        return h

    def take(self, n_tokens):
        """Records for the n_tokens of the last forward: [(layers, weights, pred, pred_w)]."""
        missing = [m for m in range(self.L) if m not in self.cur]
        if missing:
            raise RuntimeError("router hooks did not fire for MoE layers %s" % missing)
        rows = []
        cur = {m: (i.cpu().tolist(), w.cpu().tolist()) for m, (i, w) in self.cur.items()}
        pred = {}
        for m, lst in self.pred.items():
            pred[m] = [None if p is None else (p[0].cpu().tolist(), p[1].cpu().tolist()) for p in lst]
        for t in range(n_tokens):
            layers = [cur[m][0][t] for m in range(self.L)]
            weights = [[round(float(v), 6) for v in cur[m][1][t]] for m in range(self.L)]
            rec = {"layers": layers, "weights": weights}
            if self.D:
                pl, pw = [], []
                for m in range(self.L):
                    dl, dw = [], []
                    for d in range(self.D):
                        p = pred.get(m, [None] * self.D)[d]
                        if p is None:
                            dl.append([])
                            dw.append([])
                        else:
                            dl.append(p[0][t])
                            dw.append([round(float(v), 6) for v in p[1][t]])
                    pl.append(dl)
                    pw.append(dw)
                rec["pred"] = pl
                rec["pred_w"] = pw
            rows.append(rec)
        self.cur = {}
        self.pred = {}
        return rows


def record(model, prompts, out, max_new_tokens=32, pred_depth=0, pred_topn=None, name="", eos_token_id=None,
           progress=False):
    """prompts: list of token-id lists.  Writes the JSONL twin to out (path or file object).
    Returns the number of tokens written."""
    import torch
    rec = Recorder(model, pred_depth, pred_topn)
    dev = next(model.parameters()).device
    own = isinstance(out, str)
    f = open(out + ".tmp" if own else out, "w") if own else out
    n = 0
    try:
        f.write(json.dumps(rec.header(name or getattr(model.config, "_name_or_path", "")),
                           separators=(",", ":")) + "\n")
        model.eval()
        with torch.no_grad():
            for r, ids in enumerate(prompts):
                ids = torch.tensor([list(ids)], dtype=torch.long, device=dev)
                o = model(input_ids=ids, use_cache=True)
                P = ids.shape[1]
                for t, row in enumerate(rec.take(P)):
                    f.write(json.dumps(dict({"req": r, "phase": "prefill", "pos": t}, **row),
                                       separators=(",", ":")) + "\n")
                    n += 1
                past = o.past_key_values
                for step in range(max_new_tokens):
                    nxt = o.logits[0, -1].argmax()
                    if eos_token_id is not None and int(nxt) == int(eos_token_id):
                        break
                    o = model(input_ids=nxt.view(1, 1), past_key_values=past, use_cache=True)
                    past = o.past_key_values
                    row = rec.take(1)[0]
                    f.write(json.dumps(dict({"req": r, "phase": "decode", "pos": P + step}, **row),
                                       separators=(",", ":")) + "\n")
                    n += 1
                if progress:
                    print("request %d: %d prompt + %d generated tokens" % (r, P, step + 1), file=sys.stderr)
    except BaseException:
        if own:
            f.close()
            import os
            os.unlink(out + ".tmp")
        raise
    finally:
        rec.close()
    if own:
        f.close()
        import os
        os.replace(out + ".tmp", out)
    return n


def _load_prompts(args):
    prompts = list(args.prompt or [])
    if args.prompts:
        with open(args.prompts) as fh:
            for line in fh:
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                if line.lstrip().startswith("{"):
                    obj = json.loads(line)
                    line = obj.get("prompt") or obj.get("text") or obj.get("question")
                    if line is None:
                        raise SystemExit("%s: a JSON line without prompt/text/question" % args.prompts)
                prompts.append(line)
    if not prompts:
        raise SystemExit("give --prompt TEXT (repeatable) or --prompts FILE")
    return prompts


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="hub name or local path")
    ap.add_argument("--prompt", action="append", help="a prompt (repeatable)")
    ap.add_argument("--prompts", help="file: one prompt per line, or JSONL with prompt/text/question")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--pred-depth", type=int, default=2, help="lookahead depth (0: no predictions)")
    ap.add_argument("--pred-topn", type=int, default=None, help="experts predicted per later layer (top_k)")
    ap.add_argument("--chat", action="store_true", help="wrap prompts with the tokenizer's chat template")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    ap.add_argument("--device-map", default="auto")
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--trust-remote-code", action="store_true")
    ap.add_argument("-o", "--output", required=True, help="trace to write (.jsonl)")
    args = ap.parse_args(argv)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model, trust_remote_code=args.trust_remote_code)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=getattr(torch, args.dtype),
                                                 device_map=args.device_map,
                                                 trust_remote_code=args.trust_remote_code)
    ids = []
    for p in _load_prompts(args):
        if args.chat and getattr(tok, "chat_template", None):
            ids.append(tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
        else:
            ids.append(tok(p).input_ids)
    n = record(model, ids, args.output, args.max_new_tokens, args.pred_depth, args.pred_topn, name=args.model,
               eos_token_id=None if args.ignore_eos else tok.eos_token_id, progress=True)
    print("%s: %d tokens" % (args.output, n), file=sys.stderr)


if __name__ == "__main__":
    main()
