"""The Python package and the PyTorch runner (pytest; tests/run-tests.sh runs and counts them).

Needs a libstrata.so ($STRATA_LIB, else the build tree's) and the strata CLI ($STRATA_BIN, else
build/release/bin/strata).  GPU cases skip with a message where PyTorch or libstrata sees no GPU.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import torch

try:
    import pytest
    REAL_PYTEST = True
except ImportError:  # e.g. the GPU machine's Python: the shim runs them (see the end)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from minitest import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

import strata  # noqa: E402
from strata import StrataError  # noqa: E402
from strata.backends import BatchedBackend, StrataBackend, TorchBackend  # noqa: E402
from strata.safetensors import Checkpoint, SafetensorsFile, save_file  # noqa: E402
from strata.tiny import make_checkpoint  # noqa: E402

BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "release", "bin", "strata")
FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3")


def strata_cli(*args):
    r = subprocess.run([BIN] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    return r.stdout


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("strata_py"))


@pytest.fixture(scope="module")
def qwen(work):
    """A tiny Qwen3-MoE checkpoint and its tiered shards (hot, warm and cold experts)."""
    hf = make_checkpoint(os.path.join(work, "qwen"), "qwen3_moe", seed=3, layers=3, experts=8, top_k=2,
                         hidden=256, inter=128)
    q = os.path.join(work, "qwen_q")
    strata_cli("quantize", "--in", hf, "--out", q, "--naming", "auto", "--split", "25,25,50")
    return hf, q


@pytest.fixture(scope="module")
def bf16_store(work):
    d = os.path.join(work, "bf16")
    strata_cli("synth", "--preset", "tiny", "--out", d, "--format", "bf16", "--seed", "5")
    return d


def gpu_ok():
    return torch.cuda.is_available() and strata.gpu_count() > 0


def rel(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


# ---- safetensors ------------------------------------------------------------------------------

def test_safetensors_round_trip(work):
    p = os.path.join(work, "t.safetensors")
    t = {"a": torch.randn(3, 4).to(torch.bfloat16), "b": torch.arange(5, dtype=torch.int32),
         "c": torch.randn(2, 2, 2), "empty": torch.zeros(0, 3)}
    save_file(t, p)
    f = SafetensorsFile(p)
    assert sorted(f.keys()) == sorted(t)
    for k, v in t.items():
        assert f.get(k).dtype == v.dtype and torch.equal(f.get(k), v)


def test_safetensors_bad_files(work):
    p = os.path.join(work, "bad.safetensors")
    with open(p, "wb") as f:
        f.write(b"\x10\x00")
    with pytest.raises(StrataError, match="bad.safetensors: file of 2 bytes"):
        SafetensorsFile(p)
    hdr = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}).encode()
    with open(p, "wb") as f:
        f.write(len(hdr).to_bytes(8, "little") + hdr + b"\0" * 8)
    with pytest.raises(StrataError, match="tensor 'x': shape \\[4\\] x F32 is 16 bytes"):
        SafetensorsFile(p)
    with pytest.raises(StrataError, match="cannot open"):
        SafetensorsFile(os.path.join(work, "missing.safetensors"))


# ---- the runner -------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_family_backends_and_cache(work, family):
    """Every family loads; the batched backend equals the token-loop reference; prefill + decode
    with the KV cache gives the logits of one forward over the whole sequence."""
    hf = make_checkpoint(os.path.join(work, family), family, seed=7, layers=3, experts=8, top_k=2,
                         hidden=128, inter=64, vocab=256, dense_layers=1 if family.startswith("deepseek") else 0)
    ref = check_backends_and_cache(hf)
    assert len(ref.generate([1, 2, 3], 4)) == 4


def check_backends_and_cache(hf, n=9, prefill=6):
    """The batched backend equals the reference; prefill + decode with the KV cache equals one
    forward over n tokens.  Returns the reference model."""
    ref = strata.load(hf, TorchBackend(), "cpu")
    bat = strata.load(hf, BatchedBackend(), "cpu")
    ids = torch.randint(0, 256, (1, n), generator=torch.Generator().manual_seed(1))
    ref.reset(1, 16)
    full = ref.forward(ids)
    bat.reset(1, 16)
    assert rel(bat.forward(ids), full) < 1e-5
    ref.reset(1, 16)
    parts = [ref.forward(ids[:, :prefill])] + [ref.forward(ids[:, i:i + 1]) for i in range(prefill, n)]
    assert rel(torch.cat(parts, 1), full) < 1e-4
    return ref


def test_batched_backend_equals_expert_loop():
    """The vectorised batched backend (one sort, bmm over the experts routed to, one index_add)
    gives exactly the output of the per-expert loop (the backend as it was, still its CPU
    default and its fallback) on the CPU, in BF16 and float32: decode (1 token), small batches,
    prefill with every expert used, and skewed prefill (where it falls back to the loop)."""
    from types import SimpleNamespace
    from strata.moe import group_by_expert
    g = torch.Generator().manual_seed(11)
    paths = set()
    for dt in (torch.bfloat16, torch.float32):
        for E, H, I, k in ((16, 64, 48, 4), (64, 256, 96, 8)):
            block = SimpleNamespace(w_gu=(torch.randn(E, 2 * I, H, generator=g) * 0.1).to(dt),
                                    w_down=(torch.randn(E, H, I, generator=g) * 0.1).to(dt))
            for N in (1, 2, 5, 33, 200):
                for skew in (0, 1):
                    x = torch.randn(N, H, generator=g).to(dt)
                    scores = torch.rand(N, E, generator=g)
                    if skew:  # most tokens to the same few experts
                        scores[:, :k] += 10 * torch.rand(N, k, generator=g)
                    w, ids = scores.softmax(-1).topk(k, -1)
                    want = BatchedBackend(vectorised=False).experts(block, x, ids, w, None, None)
                    got = BatchedBackend(vectorised=True).experts(block, x, ids, w, None, None)
                    assert got.dtype == want.dtype and torch.equal(got, want), (dt, E, N, skew)
                    _, _, _, _, tok, used, cap = group_by_expert(ids)
                    paths.add("loop" if used.numel() * cap > 2 * tok.numel() else
                              "bmm-all" if used.numel() == E else "bmm-used")
    assert paths == {"loop", "bmm-all", "bmm-used"}, paths


# ---- DeepSeek's rules as transformers defines them, on hand-computed cases ---------------------

def deepseek_variants():
    """Tiny DeepSeek configs that leave the defaults: (name, family, config overrides, layers).
    Both V2 routings, q_lora_rank set and null, attention_bias and mlp_bias, a dense first layer,
    rms_norm_eps far from the q_a/kv_a norms' 1e-6, V3 with keys left to their defaults and with
    rope_interleave off."""
    return [
        ("deepseek_v2", "deepseek_v2", {"topk_method": "greedy", "routed_scaling_factor": 1.5,
                                        "norm_topk_prob": True, "rms_norm_eps": 0.05}, 2),
        ("deepseek_v2-grouped", "deepseek_v2", {"topk_method": "group_limited_greedy", "n_group": 4,
                                                "topk_group": 2, "q_lora_rank": None, "attention_bias": True,
                                                "mlp_bias": True, "routed_scaling_factor": 3.0,
                                                "first_k_dense_replace": 1, "rms_norm_eps": 0.05}, 3),
        ("deepseek_v3", "deepseek_v3", {"n_group": 4, "topk_group": 2, "attention_bias": True,
                                        "rms_norm_eps": 0.05, "-norm_topk_prob": 1, "-routed_scaling_factor": 1,
                                        "-n_shared_experts": 1}, 2),
        ("deepseek_v3-rope-halves", "deepseek_v3", {"n_group": 2, "topk_group": 1, "rope_interleave": False,
                                                    "q_lora_rank": None, "norm_topk_prob": False}, 2),
    ]


def variant_config(family, over, layers, **shape):
    """tiny.config_for(family) with over applied ("-key": leave key out, to its default)."""
    from strata.tiny import config_for
    c = config_for(family, layers=layers, **shape)
    for k, v in over.items():
        if k.startswith("-"):
            c.pop(k[1:], None)
        else:
            c[k] = v
    return c


DROP = object()


def ds_cfg(family, **over):
    base = {"model_type": family, "vocab_size": 16, "hidden_size": 8, "num_hidden_layers": 1,
            "num_attention_heads": 1, "n_routed_experts": 4, "moe_intermediate_size": 4}
    base.update(over)
    base = {k: v for k, v in base.items() if v is not DROP}
    return strata.model.Config.from_hf(base)


def test_deepseek_config_defaults():
    """Keys a config.json leaves out take transformers' defaults (configuration_deepseek_v2/v3.py,
    configuration_mixtral.py); transformers 5's rope_parameters are read."""
    v2 = ds_cfg("deepseek_v2", num_experts_per_tok=2, norm_topk_prob=True)
    assert (v2.shared_inter, v2.routed_scale, v2.norm_topk, v2.grouped) == (2 * 4, 1.0, False, False)
    assert (v2.kv_lora_rank, v2.qk_nope_dim, v2.qk_rope_dim, v2.v_head_dim, v2.head_dim) == (512, 128, 64, 128, 64)
    assert v2.rope_interleave and v2.eps == 1e-6 and v2.mla and not v2.attn_bias
    assert ds_cfg("deepseek_v2", num_experts_per_tok=2, rope_interleave=False).rope_interleave  # V2: always
    v3 = ds_cfg("deepseek_v3", n_routed_experts=32)
    assert (v3.top_k, v3.n_group, v3.topk_group, v3.norm_topk, v3.routed_scale, v3.shared_inter) == \
        (8, 8, 4, True, 2.5, 4)
    assert v3.grouped and v3.rope_interleave
    assert not ds_cfg("deepseek_v3", n_routed_experts=32, rope_interleave=False).rope_interleave
    with pytest.raises(StrataError, match="num_experts_per_tok is not set"):
        ds_cfg("deepseek_v2")
    with pytest.raises(StrataError, match="topk_method 'noaux_tc'"):
        ds_cfg("deepseek_v2", num_experts_per_tok=2, topk_method="noaux_tc")
    with pytest.raises(StrataError, match="needs n_group and topk_group"):
        ds_cfg("deepseek_v2", num_experts_per_tok=2, topk_method="group_limited_greedy")
    with pytest.raises(StrataError, match="config.json: no moe_intermediate_size or intermediate_size"):
        ds_cfg("deepseek_v3", n_routed_experts=32, moe_intermediate_size=DROP)
    with pytest.raises(StrataError, match="do not fit 12 experts"):
        ds_cfg("deepseek_v3", n_routed_experts=12, n_group=5)
    with pytest.raises(StrataError, match="groups of fewer than 2"):
        ds_cfg("deepseek_v3", n_routed_experts=8)  # 8 experts in the default 8 groups
    m = strata.model.Config.from_hf({"model_type": "mixtral", "vocab_size": 8, "hidden_size": 8,
                                     "num_hidden_layers": 1, "num_attention_heads": 2, "num_local_experts": 4,
                                     "intermediate_size": 8})
    assert (m.eps, m.rope_theta, m.top_k, m.norm_topk) == (1e-5, 1e6, 2, True)
    q = ds_cfg("deepseek_v3", n_routed_experts=32, rope_parameters={"rope_type": "default", "rope_theta": 5e4})
    assert q.rope_theta == 5e4
    with pytest.raises(StrataError, match="rope_scaling"):
        ds_cfg("deepseek_v3", n_routed_experts=32, rope_parameters={"rope_type": "yarn", "factor": 40.0})


def test_deepseek_v2_routing_by_hand():
    """Softmax, greedy or group-limited top-k, times routed_scaling_factor, not renormalised even
    with norm_topk_prob (transformers' DeepseekV2Moe)."""
    from strata.model import route
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.35, 0.05, 0.32, 0.28]])
    logits = p.log()  # softmax(logits) = p
    greedy = ds_cfg("deepseek_v2", num_experts_per_tok=2, norm_topk_prob=True, routed_scaling_factor=2.0)
    ids, w = route(greedy, logits, 2)
    assert ids.tolist() == [[3, 2], [0, 2]]
    assert torch.allclose(w, torch.tensor([[0.8, 0.6], [0.7, 0.64]]))
    grouped = ds_cfg("deepseek_v2", num_experts_per_tok=2, routed_scaling_factor=2.0,
                     topk_method="group_limited_greedy", n_group=2, topk_group=1)
    ids, w = route(grouped, logits, 2)
    # token 1: group {0,1} (max 0.35) beats {2,3} (max 0.32): expert 1 (0.05) instead of expert 2
    assert ids.tolist() == [[3, 2], [0, 1]]
    assert torch.allclose(w, torch.tensor([[0.8, 0.6], [0.7, 0.1]]))


def test_deepseek_v3_routing_by_hand():
    """Sigmoid scores; the correction bias moves the choice but not the weights; groups ranked by
    the sum of their top 2 (biased) scores; weights renormalised and times 2.5 (the defaults)."""
    from strata.model import route
    s = torch.tensor([[0.9, 0.1, 0.5, 0.4, 0.2, 0.15, 0.6, 0.7]])
    b = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, -0.6])
    cfg = ds_cfg("deepseek_v3", n_routed_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2)
    # choice = s + b = .9 .1 | .5 .4 | .7 .65 | .6 .1 -> group sums 1.0, 0.9, 1.35, 0.7: keep groups 2, 0
    ids, w = route(cfg, (s / (1 - s)).log(), 2, b)
    assert ids.tolist() == [[0, 4]]  # not expert 7 (score 0.7, bias -0.6) nor 6 (its group is out)
    assert torch.allclose(w, torch.tensor([[0.9 / 1.1 * 2.5, 0.2 / 1.1 * 2.5]]))
    ids, w = route(cfg, (s / (1 - s)).log(), 2)  # no bias: groups 0 (1.0) and 3 (1.3): experts 0, 7
    assert ids.tolist() == [[0, 7]]
    assert torch.allclose(w, torch.tensor([[0.9 / 1.6 * 2.5, 0.7 / 1.6 * 2.5]]))
    mix = strata.model.Config.from_hf({"model_type": "qwen3_moe", "vocab_size": 8, "hidden_size": 8,
                                       "num_hidden_layers": 1, "num_attention_heads": 2, "num_experts": 4,
                                       "moe_intermediate_size": 8, "num_experts_per_tok": 2})
    ids, w = route(mix, torch.tensor([[0.1, 0.2, 0.3, 0.4]]).log(), 2)  # Qwen3: norm_topk_prob off
    assert ids.tolist() == [[3, 2]] and torch.allclose(w, torch.tensor([[0.4, 0.3]]))


def test_deepseek_rope_by_hand():
    """DeepSeek rotates (x0, x1), (x2, x3), ... as complex numbers x_2j + i x_2j+1 times
    e^{i pos theta^(-2j/d)} (transformers' apply_rotary_emb); the runner stores the result as
    (real parts, imaginary parts), the same permutation for q and k, so every q.k is the same.
    rope_interleave off (V3): pairs (x_j, x_j+d/2)."""
    from strata.model import Rope
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    pos, theta = 3, 100.0
    f = [pos * 1.0, pos * theta ** -0.5]
    z = [complex(1, 2) * complex(math.cos(f[0]), math.sin(f[0])), complex(3, 4) * complex(math.cos(f[1]), math.sin(f[1]))]
    got = Rope(4, theta, True).apply(x, pos).flatten().tolist()
    want = [z[0].real, z[1].real, z[0].imag, z[1].imag]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5, (got, want)
    z = [complex(1, 3) * complex(math.cos(f[0]), math.sin(f[0])), complex(2, 4) * complex(math.cos(f[1]), math.sin(f[1]))]
    got = Rope(4, theta, False).apply(x, pos).flatten().tolist()
    want = [z[0].real, z[1].real, z[0].imag, z[1].imag]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-5, (got, want)


def test_deepseek_mla_bias_and_norm_eps_by_hand():
    """One token at position 0 (rope is the identity, attention is that token's value):
    out = W_o v + b_o with v the value rows of kv_b_proj(rmsnorm_1e-6(W_kva x + b_kva)), whatever
    rms_norm_eps says (DeepSeek builds q_a/kv_a norms without it), with attention_bias's biases."""
    from strata.model import Attention, KVCache
    g = torch.Generator().manual_seed(5)
    H, r, nope, rope, vd = 6, 4, 2, 2, 3
    cfg = ds_cfg("deepseek_v2", hidden_size=H, num_experts_per_tok=2, q_lora_rank=None, kv_lora_rank=r,
                 qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=vd, attention_bias=True,
                 rms_norm_eps=0.5)
    t = {"q_proj.weight": torch.randn(nope + rope, H, generator=g),
         "kv_a_proj_with_mqa.weight": 0.01 * torch.randn(r + rope, H, generator=g),
         "kv_a_proj_with_mqa.bias": 0.01 * torch.randn(r + rope, generator=g),
         "kv_a_layernorm.weight": torch.rand(r, generator=g) + 0.5,
         "kv_b_proj.weight": torch.randn(nope + vd, r, generator=g),
         "o_proj.weight": torch.randn(H, vd, generator=g), "o_proj.bias": torch.randn(H, generator=g)}

    def get(name, optional=False):
        n = name[len("L."):]
        if n not in t and optional:
            return None
        return t[n]
    att = Attention(cfg, get, "L.", 0)
    x = torch.randn(1, 1, H, generator=g)
    out = att(x, KVCache(1, 1, 1, nope + rope, vd, 4, "cpu", torch.float32), 0).flatten()
    c = t["kv_a_proj_with_mqa.weight"] @ x.flatten() + t["kv_a_proj_with_mqa.bias"]
    c = c[:r]
    c = c / torch.sqrt((c * c).mean() + 1e-6) * t["kv_a_layernorm.weight"]
    v = (t["kv_b_proj.weight"] @ c)[nope:]
    want = t["o_proj.weight"] @ v + t["o_proj.bias"]
    assert rel(out, want) < 1e-5, (out, want)
    c5 = t["kv_a_proj_with_mqa.weight"] @ x.flatten() + t["kv_a_proj_with_mqa.bias"]
    c5 = c5[:r] / torch.sqrt((c5[:r] ** 2).mean() + 0.5) * t["kv_a_layernorm.weight"]
    assert rel(out, t["o_proj.weight"] @ (t["kv_b_proj.weight"] @ c5)[nope:] + t["o_proj.bias"]) > 0.1


@pytest.mark.parametrize("variant", [v[0] for v in deepseek_variants()])
def test_deepseek_variants_load(work, variant):
    """The DeepSeek variants the transformers comparison uses (q_proj, biases, group routing,
    dense first layer, rope halves) load and run: batched = reference, KV cache = one forward."""
    _, fam, over, layers = [v for v in deepseek_variants() if v[0] == variant][0]
    c = variant_config(fam, over, layers, experts=8, top_k=2, hidden=128, inter=64, vocab=256)
    check_backends_and_cache(make_checkpoint(os.path.join(work, "v_" + variant), fam, seed=9, config=c), 7, 4)


def dequantized_reference(model, store):
    """The torch reference over the shards' dequantized experts."""
    for _, blk, _ in model.moe:
        gu, dn = [], []
        for e in range(model.cfg.n_experts):
            g, u, d = store.dequantize(blk.moe_idx, e)
            gu.append(torch.cat((g, u), 0))
            dn.append(d)
        blk.w_gu, blk.w_down = torch.stack(gu), torch.stack(dn)
    return model


def test_strata_layer_equals_dequantized(qwen):
    """Per expert format: the engine's layer output (CPU reference kernels) against the torch
    reference over the dequantized weights.  Bound 1e-5 (float rounding; same weights)."""
    hf, q = qwen
    sb = StrataBackend(q, vram="1M", ram="2M", gpu="0")
    m = strata.load(hf, sb)
    ref = dequantized_reference(strata.load(hf, TorchBackend(), "cpu"), sb.store)
    seen = set()
    g = torch.Generator().manual_seed(2)
    for (_, blk, _), (_, rblk, _) in zip(m.moe, ref.moe):
        for e in range(m.cfg.n_experts):
            fmt = sb.store.expert_format(blk.moe_idx, e)
            seen.add(fmt)
            x = torch.randn(3, m.cfg.hidden, generator=g)
            ids = torch.tensor([[e, (e + 1) % 8]] * 3)
            w = torch.tensor([[0.75, 0.25]] * 3)
            from strata.model import Step
            y = sb.experts(blk, x, ids, w, None, Step(e, 0, False))
            yr = ref.backend.experts(rblk, x, ids, w, None, None)
            assert rel(y, yr) < 1e-5, (fmt, rel(y, yr))
    assert {"hot", "warm", "cold"} <= seen
    # whole model: same greedy tokens as the reference over the dequantized experts
    assert m.generate([5, 6, 7], 6) == ref.generate([5, 6, 7], 6)
    st = sb.stats()
    assert st["hits_nvme"] > 0 and st["accesses"] > 0  # the budgets forced the disk tier
    sb.close()


def decode_logits(m, prompt, n, mode, recording=None):
    """Greedy decode of n tokens after prompt with the runner's decode mode; the logits of
    every step, concatenated (and the recorded trace's step count when recording)."""
    m.static_decode = mode
    m.reset(1, len(prompt) + n + 1)
    if recording:
        m.start_recording(recording, pred_depth=2, pred_topn=3)
    out = [m.forward(torch.tensor([prompt]))]
    for _ in range(n):
        out.append(m.forward(torch.tensor([[int(out[-1][0, -1].argmax())]])))
    rec = m.stop_recording() if recording else None
    return torch.cat([o.cpu() for o in out], 1), rec


@pytest.mark.parametrize("family", [f for f in FAMILIES if not f.startswith("deepseek")])
def test_static_decode_equals_forward(work, family):
    """A decode step as fixed work between the routing reads (the stretches a CUDA graph holds,
    run here without graphs: positions in device tensors, the whole cache attended, masked)
    gives the plain forward's logits, per family, with lookahead predictions and recording on;
    the cache is reused by the next request."""
    hf = make_checkpoint(os.path.join(work, "sd_" + family), family, seed=11, layers=3, experts=8, top_k=2,
                         hidden=128, inter=64, vocab=256)
    m = strata.load(hf, BatchedBackend(), "cpu")
    m.pred_depth, m.pred_topn = 2, 3
    for req in range(2):
        off, n_off = decode_logits(m, [3, 1, 4, 1, 5], 6, "off", os.path.join(work, "sd_%s_off.strace" % family))
        st, n_st = decode_logits(m, [3, 1, 4, 1, 5], 6, "eager", os.path.join(work, "sd_%s_st.strace" % family))
        assert rel(st, off) < 1e-5, (req, rel(st, off))
        assert n_off == n_st == 5 + 6  # the prompt's tokens and every decode step
        assert m._plan is not None and m._plan.key[-1] == "eager" and m._plan.cache is m.cache


def test_static_decode_strata_backend(qwen):
    """The same with the Strata backend (host engine, all three tiers) and lookahead hints: the
    engine adds into the stretch's output buffer, the routing crosses once per layer."""
    hf, q = qwen
    outs = []
    for mode in ("off", "eager"):
        sb = StrataBackend(q, "1M", "4M", prefetch="lookahead:depth=1:adaptive=0:tier=ram", gpu="0")
        m = strata.load(hf, sb, "cpu")
        outs.append(decode_logits(m, [5, 6, 7], 6, mode)[0])
        st = sb.stats()
        assert st["hits_nvme"] > 0 and st["prefetch_issued"] > 0
        sb.close()
    assert rel(outs[1], outs[0]) < 1e-5


def test_engine_bf16_store(bf16_store):
    """bf16 experts through Engine.moe_forward on NumPy and torch host arrays (zero copy)."""
    import numpy as np
    with strata.Store(bf16_store) as s, strata.Engine(s, "64M", "64M", gpu="0") as e:
        H = s.shape["hidden"]
        x = np.random.default_rng(1).standard_normal((2, H)).astype(np.float32)
        y = np.zeros((2, H), np.float32)
        ids = np.array([[1, 2], [3, -1]], np.int32)
        w = np.array([[0.5, 0.5], [1.0, 0.0]], np.float32)
        e.moe_forward(0, 0, x, y, ids, w)
        ref = np.zeros((2, H))
        for t in range(2):
            for j in range(2):
                if ids[t, j] < 0:
                    continue
                gt, ut, dt = (a.double().numpy() for a in s.dequantize(0, int(ids[t, j])))
                a, b = gt @ x[t], ut @ x[t]
                ref[t] += w[t, j] * (dt @ (a / (1 + np.exp(-a)) * b))
        assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 1e-5
        yt = torch.zeros(2, H)
        e.moe_forward(1, 1, torch.from_numpy(x), yt, torch.from_numpy(ids), torch.from_numpy(w))
        assert float(yt.abs().sum()) > 0


# ---- errors -----------------------------------------------------------------------------------

def test_errors(work, qwen, bf16_store):
    hf, q = qwen
    bad = os.path.join(work, "corrupt")
    shutil.copytree(q, bad)
    with open(os.path.join(bad, "shard-00000.strata"), "r+b") as f:
        f.seek(200)
        f.write(b"\xff\xff")
    with pytest.raises(StrataError, match="shard-00000.strata") as ei:
        strata.Store(bad)
    assert ei.value.status == "ECORRUPT"
    # budget too small
    with strata.Store(q) as s:
        with pytest.raises(StrataError, match="budget") as ei:
            strata.Engine(s, vram=4096, ram="1M", gpu="0")
        assert ei.value.status == "EBUDGET"
        with pytest.raises(StrataError, match="unknown option"):
            strata.Engine(s, "1M", "1M", gpu="0", options="colour=red")
        with strata.Engine(s, "4M", "4M", gpu="0") as e:
            H = s.shape["hidden"]
            ids, w = torch.zeros(1, 2, dtype=torch.int32), torch.ones(1, 2)
            with pytest.raises(StrataError, match="x: dtype <f8") as ei:  # wrong dtype
                e.moe_forward(0, 0, torch.zeros(1, H, dtype=torch.float64), torch.zeros(1, H), ids, w)
            assert ei.value.status == "ESHAPE"
            with pytest.raises(StrataError, match="y: shape \\(1, 7\\)"):  # shape mismatch
                e.moe_forward(0, 0, torch.zeros(1, H), torch.zeros(1, 7), ids, w)
            with pytest.raises(StrataError, match="ids: dtype"):
                e.moe_forward(0, 0, torch.zeros(1, H), torch.zeros(1, H), ids.long(), w)
            with pytest.raises(StrataError, match="expert 99 of 8"):
                e.moe_forward(0, 0, torch.zeros(1, H), torch.zeros(1, H), torch.tensor([[0, 99]], dtype=torch.int32), w)
    # shards of another model under this checkpoint
    with pytest.raises(StrataError, match="shards do not fit the model") as ei:
        strata.load(hf, StrataBackend(bf16_store, "64M", "64M", gpu="0"), "cpu")
    assert ei.value.status == "ESHAPE"


# ---- traces -----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["bf16", "strata"])
def test_record_trace(work, qwen, backend):
    hf, q = qwen
    b = StrataBackend(q, "1M", "4M", prefetch="lookahead:depth=1:adaptive=0", gpu="0") if backend == "strata" else BatchedBackend()
    m = strata.load(hf, b, "cpu")
    path = os.path.join(work, "rec_%s.strace" % backend)
    m.start_recording(path, pred_depth=2, pred_topn=3, model_name="tiny-qwen")
    m.generate([1, 2, 3, 4], 5)
    assert m.stop_recording() == 4 + 4  # the last token is not fed back
    out = strata_cli("trace", "stats", path)
    assert "8" in out
    if backend == "strata":
        assert b.stats()["prefetch_issued"] > 0
        b.close()


def test_cli(work, qwen):
    hf, q = qwen
    py = sys.executable
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    for mod in ("strata.run", "strata.tiny"):
        r = subprocess.run([py, "-m", mod, "--help"], env=env, stdout=subprocess.PIPE, text=True)
        assert r.returncode == 0 and "usage" in r.stdout
    tr = os.path.join(work, "cli.jsonl")
    r = subprocess.run([py, "-m", "strata.run", "generate", "--model", hf, "--backend", "strata", "--shards", q,
                        "--vram", "2M", "--ram", "2M", "--prompt", "hi", "--max-new-tokens", "3", "--record", tr,
                        "--device", "cpu", "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert len(res["tokens"]) == 3 and res["trace_tokens"] == 4 and os.path.exists(tr)
    txt = os.path.join(work, "text.txt")
    with open(txt, "w") as f:
        f.write("the quick brown fox jumps over the lazy dog " * 4)
    r = subprocess.run([py, "-m", "strata.run", "ppl", "--model", hf, "--text", txt, "--ctx", "64", "--device", "cpu",
                        "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ppl"] > 1
    r = subprocess.run([py, "-m", "strata.run", "generate", "--model", hf, "--backend", "strata", "--shards",
                        os.path.join(work, "nowhere"), "--prompt", "x", "--device", "cpu"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "nowhere" in r.stderr


def test_readme_lines(work, qwen):
    """The README's five lines run as written (in a folder holding hf-model/ and q/)."""
    hf, q = qwen
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("```python\nimport strata\n")
    code = text[start + len("```python\n"):text.index("```", start + 10)]
    assert len([ln for ln in code.splitlines() if ln.strip()]) == 5, code
    d = os.path.join(work, "readme")
    os.makedirs(d, exist_ok=True)
    for src, name in ((hf, "hf-model"), (q, "q")):
        if not os.path.exists(os.path.join(d, name)):
            os.symlink(src, os.path.join(d, name))
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    if env.get("STRATA_LIB"):  # the library under test, from another folder
        env["STRATA_LIB"] = os.path.abspath(env["STRATA_LIB"])
    r = subprocess.run([sys.executable, "-c", code], cwd=d, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    out = r.stdout.split("\n")
    assert len(json.loads(out[0])) == 16 and int(out[1]) >= 0, r.stdout


def test_install_with_debian_setuptools(work):
    """python/setup.py (Debian's python3-setuptools) installs the package with the library inside
    it (STRATA_SO); the installed copy imports and runs from another folder, without the build
    tree, $STRATA_LIB or PYTHONPATH=python."""
    import glob
    src, root = os.path.join(work, "pysrc"), os.path.join(work, "root")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "python"), src, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    so = os.path.abspath(strata._capi.lib()._name)
    r = subprocess.run([sys.executable, "setup.py", "-q", "install", "--root", root, "--prefix", "/p"], cwd=src,
                       env=dict(os.environ, STRATA_SO=so), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    pkg = glob.glob(os.path.join(root, "p", "**", "strata", "__init__.py"), recursive=True)
    assert len(pkg) == 1, pkg
    site = os.path.dirname(os.path.dirname(pkg[0]))
    env = {k: v for k, v in os.environ.items() if k not in ("STRATA_LIB", "PYTHONPATH")}
    env["PYTHONPATH"] = site
    code = "import strata, strata._capi as c; c.lib(); print(strata.__file__); print(c._lib._name)"
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    where, lib = r.stdout.split()[:2]
    assert where == pkg[0] and lib == os.path.join(site, "strata", "libstrata.so"), r.stdout
    r = subprocess.run([sys.executable, "-m", "strata.run", "--help"], cwd=work, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0 and "usage" in r.stdout, r.stdout


# ---- GPU --------------------------------------------------------------------------------------

def test_gpu_agrees_with_cpu(qwen, bf16_store):
    """The fused GPU kernels on CUDA tensors (PyTorch's current stream) against the CPU reference,
    per format: tier formats 2e-3, bf16 1e-2 (bf16 activations on the tensor cores)."""
    if not gpu_ok():
        print("SKIP test_gpu_agrees_with_cpu: no GPU usable by PyTorch and libstrata (runs on the device machine)")
        pytest.skip("no GPU")
    hf, q = qwen
    for d, bound in ((q, 2e-3), (bf16_store, 1e-2)):
        with strata.Store(d) as s, strata.Engine(s, "64M", "64M", gpu="0") as ec, \
                strata.Engine(s, "64M", "64M", gpu="1") as eg:
            assert eg.on_gpu and not ec.on_gpu
            H, E, k = s.shape["hidden"], s.shape["n_experts"], 2
            g = torch.Generator().manual_seed(4)
            for T in (1, 5, 40):
                x = torch.randn(T, H, generator=g)
                ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
                w = torch.rand(T, k, generator=g)
                yc = torch.zeros(T, H)
                ec.moe_forward(T, 0, x, yc, ids, w)
                st = torch.cuda.Stream()
                with torch.cuda.stream(st):
                    xg = x.cuda()
                    yg = torch.zeros(T, H, device="cuda")
                    eg.moe_forward(T, 0, xg, yg, ids, w)
                st.synchronize()
                assert rel(yg.cpu(), yc) < bound, (d, T, rel(yg.cpu(), yc))
    # the model on the GPU with the strata backend equals it on the CPU, token for token
    mc = strata.load(hf, StrataBackend(q, "64M", "64M", gpu="0"), device="cpu", dtype=torch.float32)
    mg = strata.load(hf, StrataBackend(q, "64M", "64M", gpu="1"), device="cuda", dtype=torch.float32)
    ids = torch.randint(0, 512, (1, 12), generator=torch.Generator().manual_seed(3))
    mc.reset(1, 16)
    mg.reset(1, 16)
    assert rel(mg.forward(ids).cpu(), mc.forward(ids)) < 5e-3


def test_gpu_decode_graphs(qwen):
    """On the GPU, decode steps replayed as CUDA graphs give the plain forward's logits (float32
    model, the Strata backend with all three tiers and lookahead, and the batched backend)."""
    if not gpu_ok():
        print("SKIP test_gpu_decode_graphs: no GPU usable by PyTorch and libstrata (runs on the device machine)")
        pytest.skip("no GPU")
    hf, q = qwen
    for make in (lambda: StrataBackend(q, "1M", "4M", prefetch="lookahead:depth=1:adaptive=0", gpu="1"),
                 BatchedBackend):
        outs = []
        for mode in ("off", "graph"):
            b = make()
            m = strata.load(hf, b, device="cuda", dtype=torch.float32)
            outs.append(decode_logits(m, [5, 6, 7], 8, mode)[0])
            if mode == "graph":
                assert m._plan is not None and all(g is not None for g in m._plan.g)
            if hasattr(b, "close"):
                b.close()
        assert rel(outs[1], outs[0]) < 1e-4, rel(outs[1], outs[0])


def test_gpu_transformers_agree(work):
    """Where `transformers` is installed (the GPU machine), its logits on each family's tiny
    checkpoint equal this runner's (float32, CPU): every family, and the DeepSeek variants of
    deepseek_variants() (both V2 routings, q_proj and q_a/q_b, attention and MLP biases, a dense
    layer, V3 groups with its defaults, rope halves).  Prints the max abs logit difference of each."""
    try:
        import transformers
    except ImportError:
        print("SKIP test_gpu_transformers_agree: no transformers package here (runs on the device machine)")
        pytest.skip("no transformers")
    shape = dict(experts=8, top_k=2, hidden=128, inter=64, vocab=256)
    cases = [(fam, fam, {}, 2) for fam in FAMILIES if not fam.startswith("deepseek")] + deepseek_variants()
    bad, rows = [], []
    kw = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
    for name, fam, over, layers in cases:
        hf = make_checkpoint(os.path.join(work, "tf_" + name), fam, seed=9, dtype=torch.float32,
                             config=variant_config(fam, over, layers, **shape))
        try:
            tm, info = transformers.AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True, **kw)
        except Exception as ex:  # a family this transformers version lacks
            print("transformers %s lacks %s: %s" % (transformers.__version__, name, str(ex)[:200]))
            rows.append((name, "not in transformers", ""))
            continue
        if info.get("unexpected_keys"):
            print("transformers %s: unused tensors %s" % (name, str(info["unexpected_keys"])[:200]))
        unmapped = {k: v for k, v in info.items() if k in ("missing_keys", "mismatched_keys") and v}
        if unmapped:  # the two would not run the same weights: a failure, not a skip
            bad.append((name, "weights not mapped: %s" % str(unmapped)[:300]))
            rows.append((name, "weights not mapped", ""))
            continue
        tm = tm.float().eval()
        ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            want = tm(ids).logits.float()
        m = strata.load(hf, TorchBackend(), "cpu", torch.float32)
        m.reset(1, 8)
        got = m.forward(ids)
        d, r = float((got - want).abs().max()), rel(got, want)
        rows.append((name, "%.2e" % d, "%.2e" % r))
        if r > 1e-3:
            bad.append((name, "max abs %.3g, rel %.3g" % (d, r)))
    print("transformers %s vs strata runner (float32 logits, 7 tokens):" % transformers.__version__)
    print("transformers-agree %-26s %-20s %s" % ("case", "max abs diff", "rel"))
    for row in rows:
        print("transformers-agree %-26s %-20s %s" % row)
    assert not bad, bad

if __name__ == "__main__":
    if globals().get("REAL_PYTEST"):  # pytest is here: it runs the file (minitest cannot read its fixtures)
        sys.exit(pytest.main([os.path.abspath(__file__), "-q", "-rs", "-s", "-p", "no:cacheprovider"] + sys.argv[1:]))
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import minitest
    sys.exit(minitest.main(globals(), sys.argv[1:]))
