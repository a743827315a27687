"""The trained MoE pipeline on the committed tiny checkpoint (tests/data/moe-tiny, trained by
strata.train on Python sources): quantize, dequantize, evaluate, record, replay; the trainer's
module against the runner; determinism; bad input (pytest; tests/run-tests.sh runs them).
"""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strata import StrataError  # noqa: E402
from strata.hfckpt import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402

BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "release", "bin", "strata")
TINY = os.path.join(ROOT, "tests", "data", "moe-tiny")


def run_py(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), STRATA_PROGRESS="0")
    return subprocess.run([sys.executable, "-m"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("real_model"))


@pytest.fixture(scope="module")
def evaluated(work):
    out = os.path.join(work, "eval")
    r = run_py("strata.eval", "--model", TINY, "--heldout-text", os.path.join(TINY, "heldout.txt"),
               "--profile-text", os.path.join(TINY, "train-sample.txt"), "--strata", BIN, "--out", out,
               "--seq", "128", "--windows", "2", "--batch", "2", "--profile-windows", "8", "--engine-windows", "1",
               "--tier-formats", "q4,warm,cold", "--tier-splits", "15/30/55,30/40/30")
    assert r.returncode == 0, r.stderr
    return out


def test_checkpoint_is_small_and_trained():
    size = sum(os.path.getsize(os.path.join(TINY, f)) for f in os.listdir(TINY))
    assert size <= 8 << 20
    c, t, cd = load_checkpoint(TINY)
    info = cd["strata_training"]
    # trained: held-out bits/byte clearly below the unigram model's
    assert info["heldout_bits_per_byte"] < info["unigram_bits_per_byte"] - 0.5
    assert c.num_experts_per_tok >= 4 and c.num_experts >= 16


def test_eval_table(evaluated):
    rows = list(csv.DictReader(open(os.path.join(evaluated, "results.csv"))))
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    assert set(by) >= {"bf16", "all-hot", "all-warm", "all-cold", "popularity-15/30/55", "random-15/30/55-s1",
                       "random-15/30/55-s2", "random-15/30/55-s3", "popularity-15/30/55-engine"}
    assert all(float(r["kld"]) == 0 and float(r["top1"]) == 1 for r in by["bf16"])
    kl = {k: sum(float(r["kld"]) for r in v) / len(v) for k, v in by.items()}
    # fewer bits, more divergence: the compared axis changes the result
    assert 0 < kl["all-hot"] < kl["all-cold"]
    # the engine path (Strata backend, CPU reference) runs the same tiered weights as the files
    assert abs(kl["popularity-15/30/55-engine"] - float(by["popularity-15/30/55"][0]["kld"])) < 0.2 * kl["all-cold"]
    g = json.load(open(os.path.join(evaluated, "goals.json")))
    assert g["shards"] == 3 and g["random_seeds"] == 3 and len(g["per_shard"]) == 3
    for f in ("summary.csv", "summary.json", "counts.csv", "mass.csv", "experts.csv", "quality.png", "quality.pdf"):
        assert os.path.getsize(os.path.join(evaluated, f)) > 0


def test_record_and_replay(evaluated, work):
    tr = os.path.join(work, "t.strace")
    r = run_py("strata.record", "--model", TINY, "--text", os.path.join(TINY, "heldout.txt"), "--prompts", "2",
               "--prompt-bytes", "24", "--max-new-tokens", "6", "--pred-depth", "3", "--strata", BIN, "-o", tr)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["records"] == 2 * (24 + 5)
    for d in (1, 2, 3):
        assert 0 < res["accuracy"]["all_depth%d" % d] <= 1
    out = os.path.join(work, "r.csv")
    p = subprocess.run([BIN, "replay", "-q", "--model", os.path.join(evaluated, "q-popularity"), "--trace", tr,
                        "--vram", "1M", "--ram", "1M", "--prefetch", "lookahead:depth=2", "--compute", "ref",
                        "--csv", out], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert p.returncode == 0, p.stdout
    row = list(csv.DictReader(open(out)))[0]
    assert int(row["tokens"]) == res["records"] and float(row["decode_tok_s"]) > 0
    assert int(row["hits_nvme"]) > 0  # the budgets force the cold tier


def test_committed_trace_reads():
    st = os.path.join(TINY, "trace.strace")
    p = subprocess.run([BIN, "trace", "stats", st], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    assert p.returncode == 0, p.stdout


def test_trainer_matches_runner_and_is_deterministic(work):
    """Two steps of strata.train on a small corpus; the same seed twice gives the same weights;
    the runner's logits on the checkpoint equal the trainer's module's."""
    corp = os.path.join(work, "corpus")
    os.makedirs(corp, exist_ok=True)
    text = open(os.path.join(TINY, "heldout.txt"), "rb").read()
    for i in range(20):  # m03.py and m13.py are held out (crc32 of the name mod 100 < 30)
        with open(os.path.join(corp, "m%02d.py" % i), "wb") as f:
            f.write(text[i * 1500:(i + 1) * 1500])
    outs = []
    for i in range(2):
        o = os.path.join(work, "t%d" % i)
        r = run_py("strata.train", "--corpus", corp, "--out", o, "--preset", "tiny", "--steps", "2", "--batch", "2",
                   "--seq", "32", "--warmup", "1", "--heldout-pct", "30", "--eval-windows", "2",
                   "--set", "num_hidden_layers=2", "--threads", "1")
        assert r.returncode == 0, r.stderr
        outs.append(o)
    _, a, _ = load_checkpoint(outs[0])
    _, b, _ = load_checkpoint(outs[1])
    assert all(torch.equal(a[k], b[k]) for k in a)
    from strata.backends import BatchedBackend
    from strata.model import load
    from strata.moe import MoeLM
    c, t, _ = load_checkpoint(outs[0])
    mine = MoeLM(c).load_hf_tensors(t).eval()
    ids = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lo = mine(ids)["logits"]
    run = load(outs[0], BatchedBackend(), "cpu", torch.float32)
    run.reset(2, 40)
    lr = run.forward(ids)
    assert (lo - lr).abs().max() < 1e-3 * lo.abs().max()


def test_bad_input(work, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "a.py").write_text("   \n")
    r = run_py("strata.train", "--corpus", str(empty), "--out", str(tmp_path / "x"), "--steps", "1")
    assert r.returncode == 2 and str(empty) in r.stderr and "no Python text" in r.stderr
    c, t, _ = load_checkpoint(TINY)
    # a missing tensor, a misnamed one, a config that disagrees with the weights
    bad = dict(t)
    del bad["model.layers.1.mlp.experts.3.up_proj.weight"]
    with pytest.raises(CheckpointError, match="missing tensor 'model.layers.1.mlp.experts.3.up_proj.weight'"):
        save_checkpoint(str(tmp_path / "m1"), c, bad)
    bad = dict(t)
    bad["model.layers.1.mlp.expert.3.up_proj.weight"] = bad.pop("model.layers.1.mlp.experts.3.up_proj.weight")
    with pytest.raises(CheckpointError, match="unexpected tensor 'model.layers.1.mlp.expert.3.up_proj.weight'"):
        save_checkpoint(str(tmp_path / "m3"), c, bad)
    d = tmp_path / "m2"
    shutil.copytree(TINY, str(d))
    cfg = json.load(open(str(d / "config.json")))
    cfg["moe_intermediate_size"] *= 2
    json.dump(cfg, open(str(d / "config.json"), "w"))
    with pytest.raises(StrataError, match=r"model\.safetensors: tensor '.*' has shape .* config.json says"):
        load_checkpoint(str(d))
    r = run_py("strata.eval", "--model", str(d), "--heldout-text", os.path.join(TINY, "heldout.txt"),
               "--profile-text", os.path.join(TINY, "train-sample.txt"), "--strata", BIN, "--out", str(tmp_path / "e"))
    assert r.returncode == 2 and "config.json says" in r.stderr
    for opt, val in (("--tier-splits", "15/30/50"), ("--tier-splits", "15/85"), ("--tier-formats", "q4,warm")):
        r = run_py("strata.eval", "--model", TINY, "--heldout-text", os.path.join(TINY, "heldout.txt"),
                   "--profile-text", os.path.join(TINY, "train-sample.txt"), "--strata", BIN,
                   "--out", str(tmp_path / "e2"), "--tier-formats", "q4,warm,cold", opt, val)
        assert r.returncode == 2 and opt in r.stderr and val in r.stderr, r.stderr
    p = subprocess.run([BIN, "dequantize", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o.st")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
    assert p.returncode != 0 and "nope" in p.stdout and not os.path.exists(str(tmp_path / "o.st"))


def test_dequantize_matches_store(evaluated):
    """strata dequantize writes each expert as the store's own dequantizer gives it (strata.core.Store)."""
    from strata.core import Store
    from strata.hfckpt import expert_name, read_safetensors
    q = os.path.join(evaluated, "q-popularity")
    t, meta = read_safetensors(q + ".safetensors")
    assert len(meta["strata.tiers"]) == 4 * 16
    with Store(q) as s:
        for l, e in ((0, 0), (3, 15), (2, 7)):
            g, u, d = s.dequantize(l, e)
            for name, ref in (("gate", g), ("up", u), ("down", d)):
                x = t[expert_name(l, e, name)].float()
                assert (x - ref.to(torch.bfloat16).float()).abs().max() == 0


def _read_counts(evaluated):
    """The evaluation's counts.csv: {(layer, expert): count} and the [layer][expert] table."""
    counts = {}
    for r in csv.DictReader(open(os.path.join(evaluated, "counts.csv"))):
        counts[(int(r["layer"]), int(r["expert"]))] = float(r["count"])
    L = 1 + max(l for l, _ in counts)
    E = 1 + max(e for _, e in counts)
    return counts, [[counts[(l, e)] for e in range(E)] for l in range(L)]


def _ranked_formats(counts, split=(15, 30, 55), formats=("hot", "warm", "cold")):
    """{(layer, expert): format} of split (percent) by descending count, ties to the lower id
    (written here from the documented rule, not from strata.eval's code)."""
    want = {}
    for l, row in enumerate(counts):
        n = len(row)
        nh, nhw = int(n * split[0] / 100.0 + 0.5), int(n * (split[0] + split[1]) / 100.0 + 0.5)
        for r, e in enumerate(sorted(range(n), key=lambda e: (-row[e], e))):
            want[(l, e)] = formats[0] if r < nh else (formats[1] if r < nhw else formats[2])
    return want


def test_popularity_shards_put_the_hottest_experts_hot(evaluated):
    """End to end: the profile's counts are per MoE layer of the right layer (the trainer's own
    module, an independent implementation, routes the same windows to the same counts), and the
    shards that strata quantize wrote give the most used experts of each layer the hot format and
    the least used the cold one (read back from the shards, not from the evaluation)."""
    from strata.core import Store
    from strata.moe import MoeLM
    from strata.train import load_text, windows
    counts, cnt = _read_counts(evaluated)
    L, E = len(cnt), len(cnt[0])
    # the fixture profiled 8 windows of 128 bytes of train-sample.txt
    c, t, _ = load_checkpoint(TINY)
    mine = MoeLM(c).load_hf_tensors(t).eval()
    w = windows(load_text([os.path.join(TINY, "train-sample.txt")]), 128, 8)
    with torch.no_grad():
        out = mine(torch.from_numpy(w[:, :-1].astype("int64")), want=("route",))
    agree = 0
    for l, (idx, _) in enumerate(out["route"]):
        mine_c = torch.bincount(idx.reshape(-1), minlength=E).tolist()
        agree += sum(min(a, b) for a, b in zip(mine_c, cnt[l]))
    total = sum(sum(r) for r in cnt)
    assert total == 8 * 128 * c.num_experts_per_tok * L
    assert agree >= 0.99 * total  # float32 both; only near-ties may route differently
    want = _ranked_formats(cnt)
    with Store(os.path.join(evaluated, "q-popularity")) as s:
        got = {(l, e): s.expert_format(l, e) for l in range(L) for e in range(E)}
    assert got == want
    # and the ranking is not flat: the hot experts served more than their share
    hot = sum(counts[k] for k, f in got.items() if f == "hot")
    assert hot / total > sum(f == "hot" for f in got.values()) / len(got)
    # equal bytes for every tiered configuration (the random and inverse controls)
    rows = list(csv.DictReader(open(os.path.join(evaluated, "results.csv"))))
    assert len({r["expert_bytes"] for r in rows if r["split"] == "15/30/55" and r["formats"] == "hot,warm,cold"}) == 1


def test_format_per_tier_configurations(evaluated):
    """strata.eval --tier-formats q4,warm,cold --tier-splits 15/30/55,30/40/30: every expert in q4,
    and both splits by popularity with the trellis formats and with the hot tier in q4, each
    evaluated on every shard with its split, formats and bits per weight; the shards strata
    quantize wrote put q4 on each layer's most used experts (read back from the store), their
    dequantized weights are the store's own, and their bytes are the store's extents."""
    from strata.core import Store
    from strata.hfckpt import expert_name, read_safetensors
    rows = list(csv.DictReader(open(os.path.join(evaluated, "results.csv"))))
    by = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    new = {"all-q4": ("", "q4"), "popularity-15/30/55 q4,warm,cold": ("15/30/55", "q4,warm,cold"),
           "popularity-30/40/30": ("30/40/30", "hot,warm,cold"),
           "popularity-30/40/30 q4,warm,cold": ("30/40/30", "q4,warm,cold")}
    for name, (split, fm) in new.items():
        assert len(by[name]) == 3, name
        assert {(r["split"], r["formats"]) for r in by[name]} == {(split, fm)}
    bpw = {n: float(by[n][0]["bpw"]) for n in by}
    kld = {n: sum(float(r["kld"]) for r in v) / len(v) for n, v in by.items()}
    # the compared axes change the result: more hot experts, or a wider hot format, more bytes
    assert bpw["popularity-15/30/55"] < bpw["popularity-15/30/55 q4,warm,cold"] < \
        bpw["popularity-30/40/30 q4,warm,cold"] < bpw["all-q4"]
    assert bpw["popularity-15/30/55"] < bpw["popularity-30/40/30"] < bpw["popularity-30/40/30 q4,warm,cold"]
    assert bpw["bf16"] == 16
    assert 0 < kld["all-q4"] < kld["all-hot"] < kld["all-cold"]
    assert kld["popularity-30/40/30"] < kld["popularity-15/30/55"]
    # summary.csv carries the same columns
    summ = {r["config"]: r for r in csv.DictReader(open(os.path.join(evaluated, "summary.csv")))}
    assert summ["popularity-30/40/30 q4,warm,cold"]["formats"] == "q4,warm,cold"
    _, cnt = _read_counts(evaluated)
    L, E = len(cnt), len(cnt[0])
    for name, d, split in (("popularity-15/30/55 q4,warm,cold", "q-popularity-15-30-55-q4-warm-cold", (15, 30, 55)),
                           ("popularity-30/40/30 q4,warm,cold", "q-popularity-30-40-30-q4-warm-cold", (30, 40, 30))):
        q = os.path.join(evaluated, d)
        want = _ranked_formats(cnt, split, ("q4", "warm", "cold"))
        t, meta = read_safetensors(q + ".safetensors")
        with Store(q) as s:
            assert {(l, e): s.expert_format(l, e) for l in range(L) for e in range(E)} == want
            # one expert of each format in each layer: the dequantized file is the store's own weights
            for l in range(L):
                for f in ("q4", "warm", "cold"):
                    e = min(e for e in range(E) if want[(l, e)] == f)
                    for m, ref in zip(("gate", "up", "down"), s.dequantize(l, e)):
                        x = t[expert_name(l, e, m)].float()
                        assert (x - ref.to(torch.bfloat16).float()).abs().max() == 0, (name, l, e, m)
        card = json.loads(subprocess.run([BIN, "inspect", q, "--json"], stdout=subprocess.PIPE, check=True,
                                         universal_newlines=True).stdout)
        assert int(by[name][0]["expert_bytes"]) == card["total"]["extent_bytes"]


def test_quantize_counts_rank_per_layer(work):
    """strata quantize --counts on a counts file whose hottest experts differ in every layer: each
    layer's hot/warm/cold experts follow that layer's counts (a reversed ranking or one shifted
    by a layer fails), for integer counts and for router probability mass (fractional)."""
    from strata.core import Store
    c, _, _ = load_checkpoint(TINY)
    L, E = c.num_hidden_layers, c.num_experts
    for kind in ("count", "mass"):
        cnt = [[((e * 7 + 3 * l) % E) + (0.25 if kind == "mass" else 0) * e for e in range(E)] for l in range(L)]
        path = os.path.join(work, "rank-%s.csv" % kind)
        with open(path, "w") as f:
            f.write("layer,expert,count\n")
            for l in range(L):
                for e in range(E):
                    f.write(("%d,%d,%d\n" if kind == "count" else "%d,%d,%.4f\n") % (l, e, cnt[l][e]))
        out = os.path.join(work, "rank-q-%s" % kind)
        p = subprocess.run([BIN, "quantize", "--in", TINY, "--naming", "auto", "--out", out, "--counts", path,
                            "--split", "15,30,55", "--no-progress", "--threads", "2"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        assert p.returncode == 0, p.stdout
        want = _ranked_formats(cnt)
        assert len({tuple(want[(l, e)] for e in range(E)) for l in range(L)}) == L  # layers differ
        with Store(out) as s:
            assert {(l, e): s.expert_format(l, e) for l in range(L) for e in range(E)} == want


def test_precision_on_miss_eval(work):
    """strata.eval --on-miss-gates: the engine substitutes only below the gate threshold, the
    no-substitution run is itself (KLD 0, top-1 1 vs full), bytes saved grow with the threshold."""
    out = os.path.join(work, "on-miss")
    r = run_py("strata.eval", "--model", TINY, "--heldout-text", os.path.join(TINY, "heldout.txt"), "--strata", BIN,
               "--out", out, "--on-miss-gates", "0,0.3,1", "--windows", "1", "--seq", "48")
    assert r.returncode == 0, r.stderr
    rows = {row["on_miss"]: row for row in csv.DictReader(open(os.path.join(out, "on_miss.csv")))}
    full, g0, g3, g1 = rows["full"], rows["lowbit:gate=0"], rows["lowbit:gate=0.3"], rows["lowbit:gate=1"]
    assert int(full["substituted"]) == 0 and float(full["kld_vs_full"]) == 0 and float(full["top1_vs_full"]) == 1
    assert int(g0["substituted"]) == 0 and float(g0["kld"]) == float(full["kld"])
    assert 0 < int(g3["substituted"]) < int(g1["substituted"]) <= int(g1["misses"])
    assert int(g3["substitute_bytes_saved"]) < int(g1["substitute_bytes_saved"])
    assert float(g1["kld_vs_full"]) > 0
    assert int(full["tokens"]) == 48
    # bad input: a threshold outside [0, 1]
    r = run_py("strata.eval", "--model", TINY, "--heldout-text", os.path.join(TINY, "heldout.txt"), "--strata", BIN,
               "--out", out, "--on-miss-gates", "0.1,2")
    assert r.returncode == 2 and "[0, 1]" in r.stderr
