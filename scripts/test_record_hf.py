#!/usr/bin/env python3
"""Test scripts/record_hf.py on tiny randomly initialised MoE models (no download).

Skips with a message (exit 0) where torch or transformers is missing.  For each family the
installed transformers knows (Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V2/V3), it records two
prompts with lookahead predictions and checks: the header shape; one record per prompt token
(prefill) and per generated token (decode) with the right positions; expert ids in range and
distinct; weights descending; where the model returns its router logits, the recorded top-k equals
theirs; predictions of depth 1 are scored from the next layer's gate; and, if the strata binary is
built, that `strata trace convert` reads the file.

  python3 scripts/test_record_hf.py [--strata build/release/bin/strata]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def skip(msg):
    print("SKIP test_record_hf: %s" % msg)
    sys.exit(0)


try:
    import torch
except ImportError:
    skip("torch is not installed")
try:
    import transformers
except ImportError:
    skip("transformers is not installed")

import record_hf  # noqa: E402

COMMON = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=128)


def families():
    out = []
    if hasattr(transformers, "MixtralConfig"):
        out.append(("mixtral", lambda: transformers.MixtralConfig(num_local_experts=6, num_experts_per_tok=2,
                                                                    **COMMON)))
    if hasattr(transformers, "Qwen2MoeConfig"):
        out.append(("qwen2_moe", lambda: transformers.Qwen2MoeConfig(
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=16,
            norm_topk_prob=True, **COMMON)))
    if hasattr(transformers, "Qwen3MoeConfig"):
        out.append(("qwen3_moe", lambda: transformers.Qwen3MoeConfig(
            num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, head_dim=8, **COMMON)))
    if hasattr(transformers, "OlmoeConfig"):
        out.append(("olmoe", lambda: transformers.OlmoeConfig(num_experts=8, num_experts_per_tok=2, **COMMON)))
    mla = dict(COMMON, num_key_value_heads=COMMON["num_attention_heads"])  # MLA: a key per head
    if hasattr(transformers, "DeepseekV2Config"):
        out.append(("deepseek_v2", lambda: transformers.DeepseekV2Config(
            n_routed_experts=8, num_experts_per_tok=2, topk_method="group_limited_greedy", n_group=2, topk_group=1,
            routed_scaling_factor=2.0, moe_intermediate_size=16, first_k_dense_replace=1, n_shared_experts=1,
            q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8, **mla)))
    if hasattr(transformers, "DeepseekV3Config"):
        out.append(("deepseek_v3", lambda: transformers.DeepseekV3Config(
            n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, moe_intermediate_size=16,
            first_k_dense_replace=1, n_shared_experts=1, q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=4,
            qk_nope_head_dim=4, v_head_dim=8, **mla)))
    return out


def check_family(name, make_config, strata):
    torch.manual_seed(0)
    cfg = make_config()
    try:
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    except Exception as e:  # a family this version cannot build from a config
        print("  %s: cannot build a tiny model (%s): skipped" % (name, e))
        return 0
    model.eval()
    # random gates are nearly uniform: scale them so routing is decisive and ties are rare
    with torch.no_grad():
        for _, _, blk in record_hf._moe_blocks(model):
            blk.gate.weight.mul_(20.0)
    prompts = [[1, 5, 7, 9, 11], [3, 4, 8]]
    new = 4
    path = os.path.join(tempfile.mkdtemp(prefix="strata-rec-"), "%s.jsonl" % name)
    n = record_hf.record(model, prompts, path, max_new_tokens=new, pred_depth=2, name="tiny-" + name)
    lines = [json.loads(x) for x in open(path)]
    hdr, recs = lines[0], lines[1:]
    L = len(record_hf._moe_blocks(model))
    assert hdr["strata_trace"] == 1 and hdr["layers"] == L, hdr
    assert hdr["pred_depth"] == 2 and hdr["pred_topn"] == hdr["top_k"], hdr
    E, k = hdr["experts"], hdr["top_k"]
    assert n == len(recs) == sum(len(p) for p in prompts) + new * len(prompts), (n, len(recs))
    i = 0
    for r, p in enumerate(prompts):
        for t in range(len(p)):
            assert recs[i]["req"] == r and recs[i]["phase"] == "prefill" and recs[i]["pos"] == t, recs[i]
            i += 1
        for s in range(new):
            assert recs[i]["phase"] == "decode" and recs[i]["pos"] == len(p) + s, recs[i]
            i += 1
    for rec in recs:
        assert len(rec["layers"]) == L
        for ids, ws in zip(rec["layers"], rec["weights"]):
            assert len(ids) == k and len(set(ids)) == k and all(0 <= e < E for e in ids), ids
            assert all(ws[j] >= ws[j + 1] - 1e-6 for j in range(k - 1)), ws
        assert rec["pred"][L - 1] == [[], []], rec["pred"][L - 1]
        for m in range(L - 1):
            assert len(rec["pred"][m][0]) == k
    # compare with the model's own router logits where it returns them (prefill of prompt 0)
    checked = "no router logits from this model"
    try:
        out = model(input_ids=torch.tensor([prompts[0]]), output_router_logits=True)
        rl = getattr(out, "router_logits", None)
    except Exception as e:  # this version's forward takes no output_router_logits
        print("  %s: no router logits (%s)" % (name, type(e).__name__))
        rl = None
    if rl and not name.startswith("deepseek"):  # group-limited: not the top-k of the logits
        rl = [x for x in rl if x is not None]
        assert len(rl) == L, (len(rl), L)
        for m in range(L):
            top = rl[m].reshape(-1, E).float().topk(k, dim=-1).indices.tolist()
            for t in range(len(prompts[0])):
                assert sorted(top[t]) == sorted(recs[t]["layers"][m]), (m, t, top[t], recs[t]["layers"][m])
        checked = "routing matches the model's router logits"
    if strata:
        dst = path.replace(".jsonl", ".strace")
        subprocess.run([strata, "trace", "convert", path, dst], check=True)
        res = subprocess.run([strata, "trace", "stats", dst], check=True, capture_output=True, text=True)
        assert "recorded predictions" in res.stdout, res.stdout
        checked += "; strata reads it"
    print("  %s: %d MoE layers x %d experts, top-%d, %d tokens: ok (%s)" % (name, L, E, k, n, checked))
    return 1


def main():
    strata = None
    if "--strata" in sys.argv:
        strata = sys.argv[sys.argv.index("--strata") + 1]
    else:
        for mode in ("release", "debug", "asan"):
            p = os.path.join(HERE, "..", "build", mode, "bin", "strata")
            if os.access(p, os.X_OK):
                strata = p
                break
    print("test_record_hf: transformers %s, torch %s" % (transformers.__version__, torch.__version__))
    fams = families()
    if not fams:
        skip("this transformers has none of the MoE families")
    done = sum(check_family(n, f, strata) for n, f in fams)
    if not done:
        skip("no family could be built")
    print("test_record_hf: %d families passed" % done)


if __name__ == "__main__":
    main()
