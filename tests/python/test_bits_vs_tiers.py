"""experiments/bits-vs-tiers: the GPU-machine script (run_device.sh) on a tiny store with the CPU
reference, its replay-vs-sim table (combine.py --device), and the format-per-tier frontier
(make.sh -> combine.py --gpu --e2e) joining the clock, the replays and the end-to-end quality
(pytest; tests/run-tests.sh runs them).
"""
import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "release", "bin", "strata")
HERE = os.path.join(ROOT, "experiments", "bits-vs-tiers")
E2E = os.path.join(ROOT, "experiments", "real-model", "tiny-cpu", "summary.csv")
FORMATS = ("hot,warm,cold", "q4,warm,cold")


def run(cmd, **env):
    e = dict(os.environ, STRATA_PROGRESS="0", PYTHON=sys.executable, **env)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, env=e,
                          cwd=ROOT)


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def device(tmp_path_factory):
    """run_device.sh on a 2-layer x 8-expert store, CPU reference kernels: one split, two formats."""
    out = str(tmp_path_factory.mktemp("bvt") / "gpu")
    r = run(["bash", os.path.join(HERE, "run_device.sh"), os.path.dirname(os.path.dirname(BIN))], OUT=out,
            COMPUTE="ref", MODEL="custom:layers=2,experts=8,top_k=2,hidden=256,inter=256", GEN="4", REQUESTS="1",
            PROMPT="2", VRAM="1M", RAM="1M", FIT_VRAM="64M", FIT_RAM="1M", SPLITS="50/30/20",
            FORMATS=";".join(FORMATS))
    assert r.returncode == 0, r.stdout
    return out


def test_device_table(device):
    d = {(r["formats"], r["policy"]): r for r in rows(os.path.join(device, "device.csv"))}
    assert set(d) == {(f, p) for f in FORMATS for p in ("static", "cache", "fit")}
    for (f, p), r in d.items():
        assert r["split"] == "50/30/20" and float(r["replay_tok_s"]) > 0 and float(r["sim_tok_s"]) > 0
        # the simulator and the engine count the same hits and move the same bytes
        assert r["same_counters"] == "True"
        if f == "hot,warm,cold":
            assert float(r["replay_vs_trellis"]) == 1.0
    # the compared axis changes the run: the hot experts in q4 are bigger, so more bytes move
    rep = {(r["formats"], r["policy"]): r for r in rows(os.path.join(device, "replay.csv"))}
    moved = {k: sum(int(r[c]) for c in ("bytes_nvme_ram", "bytes_ram_vram", "bytes_nvme_vram")) for k, r in rep.items()}
    assert moved[("q4,warm,cold", "fit")] > moved[("hot,warm,cold", "fit")]
    cost = open(os.path.join(device, "cost_gpu.json")).read()
    assert '"kernel_speed_q4"' in cost and '"kernel_speed_q3"' in cost
    md = open(os.path.join(device, "device.md")).read()
    assert "kernel_speed_q4" in md and "| 50/30/20 | q4,warm,cold | fit |" in md


def test_frontier(device, tmp_path):
    """make.sh (cut down) joins the clock's points, the device's replays and the end-to-end rows."""
    r = run(["bash", os.path.join(HERE, "make.sh"), "seeds=7", "tokens=4"], STUDY_OUT=str(tmp_path), NO_PLOTS="1",
            SPLITS="50/30/20", FORMATS=";".join(FORMATS), ROWS="64", COLS="256", GPU=device, E2E=E2E, STRATA=BIN)
    assert r.returncode == 0, r.stdout
    fr = {x["formats"]: x for x in rows(os.path.join(tmp_path, "results", "frontier.csv"))}
    assert set(fr) == set(FORMATS)
    dev = {(x["formats"], x["policy"]): x for x in rows(os.path.join(device, "device.csv"))}
    e2e = {x["config"]: x for x in rows(E2E)}
    for f, name in zip(FORMATS, ("popularity-50/30/20", "popularity-50/30/20 q4,warm,cold")):
        for p in ("static", "cache", "fit"):
            assert float(fr[f]["gpu_tok_s_" + p]) == float(dev[(f, p)]["replay_tok_s"])
        assert float(fr[f]["e2e_kld"]) == float(e2e[name]["kld"])
    # q4 hot: a bigger model, better matrices, the trained model's end-to-end KLD lower
    assert float(fr["q4,warm,cold"]["full_gb"]) > float(fr["hot,warm,cold"]["full_gb"])
    assert float(fr["q4,warm,cold"]["cosine_access"]) > float(fr["hot,warm,cold"]["cosine_access"])
    assert float(fr["q4,warm,cold"]["e2e_kld"]) < float(fr["hot,warm,cold"]["e2e_kld"])
    # of two points, the smaller one is on the (size, quality, speed) frontier
    assert fr["hot,warm,cold"]["pareto_static"] == "True"
    assert "frontier s/c/f" in open(os.path.join(tmp_path, "results", "frontier.md")).read()


def test_device_without_replays(tmp_path):
    r = run([sys.executable, os.path.join(HERE, "combine.py"), "--device", str(tmp_path)])
    assert r.returncode != 0 and os.path.join(str(tmp_path), "replay.csv") in r.stdout
