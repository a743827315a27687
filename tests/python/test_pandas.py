"""Results read by pandas as they are: a study's CSVs, `strata sim --csv/--json`, the benchmarks'
CSV on stdout, and every CSV committed under experiments/ (each one table: one header, no second
header or blank line inside, no log lines).

Each frame is checked for one header line with unique names, the counters a researcher plots
being numeric dtypes, and no column that mixes numbers with text (which pandas would read as
strings).  Skips with a message where pandas is missing (Debian: python3-pandas,
scripts/install-deps.sh installs it).
"""
import json
import os
import subprocess
import sys

try:
    import pytest
except ImportError:  # the GPU machine's Python: the shim runs them
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


def check_frame(df, path, numeric, header=None):
    if header is None:
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


def test_move_log(work):
    """strata sim --move-log: one table pandas reads with numeric times (a cancelled move's empty
    ones NaN); movelog.py summarizes it beside a second sim's and finds the same moves."""
    logs = []
    for i in range(2):  # the same run twice: the same moves
        log = os.path.join(work, f"moves{i}.csv")
        rc, out = strata("sim", "-q", "--model", MODEL, "--trace", os.path.join(work, "t.strace"),
                         "--vram", "24M", "--ram", "48M", "--place", "cache", "--evict", "lru",
                         "--prefetch", "lookahead", "--move-log", log)
        assert rc == 0, out
        logs.append(log)
    df = pd.read_csv(logs[0])
    check_frame(df, logs[0], ("layer", "expert", "bytes", "step", "queued_ns", "handed_ns", "submitted_ns",
                              "done_ns", "reaped_ns"))
    assert set(df["link"]) >= {"engine", "pcie"} and set(df["status"]) <= {"done", "cancelled", "failed"}
    moves = df[df["link"].isin(["nvme", "staged", "pcie"]) & (df["status"] == "done")]
    assert len(moves) > 0 and (moves["done_ns"] >= moves["submitted_ns"]).all()
    assert (df.loc[df["kind"] == "compute", "reaped_ns"] > df.loc[df["kind"] == "compute", "queued_ns"]).all()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "gpu-replay", "movelog.py")] + logs,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert r.returncode == 0, r.stdout
    rows = dict(line.split(None, 1) for line in r.stdout.splitlines())
    assert rows["same_moves_as_first"].split() == ["True", "True"], r.stdout
    assert float(rows["compute_ms"].split()[0]) > 0 and rows["disk_busy_ms"].split()[0] == rows["disk_busy_ms"].split()[1]


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
    ("experiments/kernels/h200-main-final.csv", ("tokens", "us", "ratio", "gbs")),
])
def test_committed_csvs(rel, numeric):
    path = os.path.join(ROOT, rel)
    check_frame(pd.read_csv(path), path, numeric)


def committed_csvs():
    """Every CSV under experiments/: git's list where this is a checkout, else the files there."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--", "experiments"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        files = [f for f in out.stdout.split("\0") if f.endswith(".csv")] if out.returncode == 0 else None
    except OSError:
        files = None
    if files is None:
        files = [os.path.relpath(os.path.join(d, f), ROOT) for d, _, fs in os.walk(os.path.join(ROOT, "experiments"))
                 for f in fs if f.endswith(".csv")]
    return sorted(files)


def check_one_table(path, text=None):
    """path (or text read from it) is one CSV table pandas reads: a header, rows as wide, nothing
    else (a second table, a blank line between rows, log lines before or after)."""
    if text is None:
        with open(path, newline="") as f:
            text = f.read()
    lines = text.splitlines()
    assert lines and lines[0].strip(), f"{path}: empty, or a blank first line"
    header = lines[0]
    for i, line in enumerate(lines[1:], 2):
        assert line.strip(), f"{path}:{i}: blank line inside the table (a second table follows?)"
        assert line != header, f"{path}:{i}: the header again (two tables in one file)"
    import io
    try:
        df = pd.read_csv(io.StringIO(text))
    except Exception as e:  # pandas' ParserError names the line
        raise AssertionError(f"{path}: not one table pandas reads: {e}")
    check_frame(df, path, (), header=header)
    return df


@pytest.mark.parametrize("rel", committed_csvs())
def test_every_committed_csv(rel):
    check_one_table(os.path.join(ROOT, rel))


def test_committed_csvs_found():
    assert len(committed_csvs()) > 20, committed_csvs()


def test_check_one_table_fails_on_two_tables(tmp_path_factory):
    """The check itself: two tables, log lines before the header, an unquoted comma."""
    bad = {"two.csv": "a,b\n1,2\n\nc,d,e\n3,4,5\n", "again.csv": "a,b\n1,2\na,b\n3,4\n",
           "log.csv": "loading model...\nreplay: 10 steps\na,b\n1,2\n", "comma.csv": "a,b\nx,y,z\n",
           "mixed.csv": "a,b\n1,2\nc,d\n"}
    d = str(tmp_path_factory.mktemp("one_table"))
    for name, text in list(bad.items()) + [("ok.csv", 'a,b\n"x,y",2\n')]:
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write(text)
        if name == "ok.csv":
            check_one_table(p)
            continue
        with pytest.raises(AssertionError):
            check_one_table(p)


def bench(name):
    path = os.path.join(os.path.dirname(os.path.dirname(BIN)), "bench", name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"SKIP {name}: {path} not built (scons builds build/<mode>/bench/)")
    return path


@pytest.mark.parametrize("args", [
    ("bench_lua", "--part", "harness", "4", "1", "policies/lua"),
    ("bench_lua", "--part", "engine", "4", "1", "policies/lua", "200"),
    ("bench_engine", "--steps", "200"),
    ("bench_movers", "--verify", "--size", "16M", "--seconds", "0.05"),
    ("bench_sim", "qwen3-30b-a3b:layers=4", "16"),
])
def test_bench_stdout_one_table(args, tmp_path_factory):
    """What a benchmark prints on stdout is one table (its log goes to stderr), and it leaves
    nothing in $TMPDIR."""
    tmp = str(tmp_path_factory.mktemp("bench_tmp"))
    env = dict(os.environ, TMPDIR=tmp, STRATA_PROGRESS="0")
    r = subprocess.run([bench(args[0])] + list(args[1:]), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    df = check_one_table(" ".join(args), r.stdout)
    assert len(df) >= 3
    assert os.listdir(tmp) == [], f"{args[0]} left {os.listdir(tmp)} in TMPDIR"


def test_bench_sim_peer_needs_cachesim(tmp_path_factory):
    """bench_sim --part peer without libCacheSim's cachesim fails, saying so on stderr, and prints
    no table."""
    env = dict(os.environ, TMPDIR=str(tmp_path_factory.mktemp("bench_tmp")))
    env.pop("STRATA_CACHESIM", None)
    r = subprocess.run([bench("bench_sim"), "--part", "peer"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=60)
    assert r.returncode == 2 and "needs libCacheSim" in r.stderr and r.stdout == "", (r.returncode, r.stdout, r.stderr)


def test_bench_sim_peer_one_table(tmp_path_factory):
    """bench_sim --part peer prints one table on stdout (the stream's description on stderr); a
    stand-in for cachesim that prints a miss ratio is enough to check the output's shape."""
    tmp = str(tmp_path_factory.mktemp("bench_tmp"))
    fake = os.path.join(str(tmp_path_factory.mktemp("fake_cachesim")), "cachesim")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\necho \"stand-in: miss ratio 0.5\"\n")
    os.chmod(fake, 0o755)
    r = subprocess.run([bench("bench_sim"), "--part", "peer", "--cachesim", fake, "--peer-accesses", "20000",
                        "--reps", "1"], cwd=ROOT, env=dict(os.environ, TMPDIR=tmp), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    df = check_one_table("bench_sim --part peer", r.stdout)
    assert list(df["policy"]) == ["lru", "lfu", "fifo", "farthest"] and (df["cachesim_miss_ratio"] == 0.5).all()
    assert "stream:" in r.stderr
    assert os.listdir(tmp) == [], os.listdir(tmp)


def test_bench_scratch_in_tmpdir(tmp_path_factory):
    """The benchmarks' scratch files go under $TMPDIR (not a fixed /tmp path): a TMPDIR that does
    not exist is an error naming it."""
    missing = os.path.join(str(tmp_path_factory.mktemp("bench_tmp")), "missing")
    for args in (("bench_movers", "--verify", "--size", "16M", "--seconds", "0.05"), ("bench_engine", "--steps", "50")):
        r = subprocess.run([bench(args[0])] + list(args[1:]), cwd=ROOT, env=dict(os.environ, TMPDIR=missing),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
        assert r.returncode != 0 and missing in r.stderr, (args, r.returncode, r.stderr)
