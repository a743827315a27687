"""Results read by pandas as they are: a study's CSVs, `strata sim --csv/--json`, committed results.

Each frame is checked for one header line with unique names, the counters a researcher plots
being numeric dtypes, and no column that mixes numbers with text (which pandas would read as
strings).  Skips with a message where pandas is missing (Debian: python3-pandas,
scripts/install-deps.sh installs it).
"""
import json
import os
import subprocess

try:
    import pytest
except ImportError:  # the GPU machine's Python: the shim runs them
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from minitest import pytest

pd = pytest.importorskip("pandas", reason="SKIP pandas: not installed (Debian python3-pandas; "
                         "bash scripts/install-deps.sh installs it)")
from pandas.api.types import is_numeric_dtype  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "release", "bin", "strata")
MODEL = "qwen3-30b-a3b:layers=2,experts=16"
# counters of every sim / replay / study row
COUNTERS = ("seed", "accesses", "hits_vram", "hit_rate_vram", "bytes_ram_vram", "evictions_vram",
            "stall_ms", "decode_tok_s", "bound_tok_s", "bound_violations")


def strata(*args, cwd=None):
    r = subprocess.run([BIN] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True)
    return r.returncode, r.stdout


def check_frame(df, path, numeric):
    with open(path) as f:
        header = f.readline().rstrip("\n")
    names = header.split(",") if '"' not in header else list(df.columns)
    assert len(names) == len(set(names)) == len(df.columns), f"{path}: header {header!r}"
    assert list(df.columns) == names, f"{path}: columns shifted (an unquoted comma in a row?)"
    assert isinstance(df.index, pd.RangeIndex), f"{path}: rows wider than the header"
    for c in numeric:
        assert c in df.columns, f"{path}: no column {c}"
        assert is_numeric_dtype(df[c]), f"{path}: {c} is {df[c].dtype}: {list(df[c][:3])}"
    for c in df.columns:
        if df[c].dtype == object:
            v = df[c].dropna()
            num = pd.to_numeric(v, errors="coerce").notna()
            assert not (num.any() and not num.all()), \
                f"{path}: column {c} mixes numbers and text: {list(v[num][:2])} / {list(v[~num][:2])}"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("strata_pandas"))
    rc, out = strata("trace", "gen", "--model", MODEL, "--requests", "2", "--prompt", "8", "--gen", "24",
                     "--pred-depth", "2", "-o", os.path.join(d, "t.strace"))
    assert rc == 0, out
    return d


def test_sim_csv_json(work):
    csv, js = os.path.join(work, "s.csv"), os.path.join(work, "s.json")
    for ev in ("lru", "farthest"):  # two rows through --append, one JSON
        rc, out = strata("sim", "-q", "--model", MODEL, "--trace", os.path.join(work, "t.strace"),
                         "--vram", "24M", "--ram", "48M", "--place", "cache", "--evict", ev,
                         "--prefetch", "lookahead", "--csv", csv, "--append", "--json", js)
        assert rc == 0, out
    df = pd.read_csv(csv)
    assert len(df) == 2 and list(df["config"].str.contains("evict=farthest")) == [False, True]
    check_frame(df, csv, COUNTERS)
    with open(js) as f:
        doc = json.load(f)
    flat = pd.json_normalize(doc)
    assert len(flat) == 1
    for c in COUNTERS:
        assert isinstance(doc[c], (int, float)) and is_numeric_dtype(flat[c]), (c, doc[c])
    # every field of the JSON is in the CSV row, with the same value
    row = df.iloc[1]
    for c in COUNTERS:
        assert row[c] == pytest.approx(doc[c], rel=1e-5), c


def test_study_csvs(work):
    """tier-budgets, CI-sized, with a failing policy: its error rows keep the columns numeric."""
    out = os.path.join(work, "tb")
    rc, log = strata("run", "-j", "2", "experiments/tier-budgets/run.lua", f"out={out}", "tokens=8",
                     "policies=lru,nosuch", "vram=64M,128M", "ram=256M", "seeds=7", cwd=ROOT)
    assert "2 of 4 runs failed" in log, log
    rows = os.path.join(out, "tier-budgets.csv")
    df = pd.read_csv(rows)
    assert sorted(df["status"]) == ["error", "error", "ok", "ok"]
    check_frame(df, rows, COUNTERS)
    assert df.loc[df["status"] == "error", "decode_tok_s"].isna().all()
    plot = os.path.join(out, "tier-budgets-plot.csv")
    check_frame(pd.read_csv(plot), plot, ("vram_mib", "decode_tok_s"))


@pytest.mark.parametrize("rel,numeric", [
    ("experiments/gpu-replay/run5/kimi_replay.csv", COUNTERS),
    ("experiments/gpu-replay/run5/kimi_sim.csv", COUNTERS),
    ("experiments/real-model/run2/results.csv", ("tokens", "ppl", "kld", "top1", "top5")),
    ("experiments/movers/cpu/bench_engine.csv", ("accesses", "bookkeeping_ns_per_access", "ratio")),
    ("experiments/movers/cpu/bench_movers.csv", ("extent_bytes", "qd", "mover_gbps", "ratio")),
    ("experiments/kernels/h200-main-final.csv", ("tokens", "ms", "ratio", "gbs")),
])
def test_committed_csvs(rel, numeric):
    path = os.path.join(ROOT, rel)
    check_frame(pd.read_csv(path), path, numeric)
