"""SGLang expert-distribution dumps -> trace (python -m strata.sglang_dump): the per_token dump in
tests/data is converted and imported; count-only dumps (stat, per_pass) and broken ones are refused
naming the file and the record.  `python3 tests/python/test_sglang_dump.py --write-data` rewrites
the two .pt files (Debian's torch) in the layout SGLang's expert_distribution.py saves.
"""
import contextlib
import io
import json
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strata import sglang_dump  # noqa: E402

BIN = os.environ.get("STRATA_BIN") or os.path.join(ROOT, "build", "release", "bin", "strata")
DATA = os.path.join(ROOT, "tests", "data")
PER_TOKEN = os.path.join(DATA, "sglang_expert_distribution_per_token.pt")
STAT = os.path.join(DATA, "sglang_expert_distribution_stat.pt")

# 4 layers (layer 0 dense), 8 physical experts over 6 logical (physical 6, 7 replicate 0, 1)
P2L = torch.tensor([[0, 1, 2, 3, 4, 5, 0, 1]] * 4)
# per pass: (forward_mode, extend_seq_lens, positions, per token the top-2 physical ids per MoE layer)
PASSES = [
    (1, [3, 2], [0, 1, 2, 0, 1],
     [[[6, 2], [3, 4], [5, 1]], [[0, 3], [2, 7], [4, 5]], [[1, 2], [3, 0], [5, 4]],
      [[4, 5], [1, 0], [2, 3]], [[2, 6], [5, 4], [0, 1]]]),
    (2, None, [3, 2], [[[0, 1], [2, 3], [4, 5]], [[5, 4], [3, 2], [3, 7]]]),
    (2, None, [4, 3], [[[2, 3], [4, 5], [0, 1]], [[1, 0], [5, 6], [3, 2]]]),
]


def write_data():
    recs = []
    for fp, (mode, seg, pos, routed) in enumerate(PASSES):
        n = len(pos)
        ids = torch.full((4, n, 8), -1, dtype=torch.int32)
        for t, per_layer in enumerate(routed):
            for l, pair in enumerate(per_layer):
                ids[l + 1, t, :2] = torch.tensor(pair, dtype=torch.int32)
        recs.append(dict(forward_pass_id=fp, rank=0, gatherer_key="primary", input_ids=list(range(100, 100 + n)),
                         positions=pos, extend_seq_lens=seg, forward_mode=mode, topk_ids_of_layer=ids,
                         misc_objects=[], global_physical_count=torch.zeros(4, 8, dtype=torch.int32)))
    torch.save(dict(records=recs, last_physical_to_logical_map=P2L), PER_TOKEN)
    torch.save(dict(rank=0, logical_count=torch.ones(3, 4, 6, dtype=torch.int32),
                    average_utilization_rate_over_window=None), STAT)


class Run:
    def __init__(self, returncode, stderr):
        self.returncode, self.stderr = returncode, stderr


def convert(tmp_path, *dumps, out="r.jsonl", extra=()):
    """python3 -m strata.sglang_dump DUMPS -o OUT, in this process (torch loads once)."""
    o = str(tmp_path / out)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = sglang_dump.main(list(dumps) + ["-o", o, "--strata", BIN] + list(extra))
    return Run(rc, err.getvalue()), o


def test_command_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-m", "strata.sglang_dump", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True, env=env)
    assert p.returncode == 0 and "per_token" in p.stdout and "counts only" in p.stdout


def test_per_token_rows(tmp_path):
    p, o = convert(tmp_path, PER_TOKEN)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(x) for x in open(o)]
    assert len(rows) == 9 * 3  # 9 tokens x 3 MoE layers (layer 0 dense: left out)
    assert {r["layer"] for r in rows} == {1, 2, 3}
    # request 0: positions 0, 1, 2 (prefill), then 3, 4 (decode); request 1: 0, 1 then 2, 3
    r0 = [r for r in rows if r["request"] == 0 and r["layer"] == 1]
    assert [r["pos"] for r in r0] == [0, 1, 2, 3, 4]
    assert [r["token"] for r in r0] == [0, 1, 2, 3, 4]
    assert [r["phase"] for r in r0] == ["prefill"] * 3 + ["decode"] * 2
    assert r0[0]["experts"] == [0, 2]  # physical 6 is logical 0
    r1 = [r for r in rows if r["request"] == 1 and r["layer"] == 2]
    assert [r["pos"] for r in r1] == [0, 1, 2, 3]
    assert r1[2]["experts"] == [3, 2] and r1[3]["experts"] == [5, 0]  # physical 6 -> 0
    # in the order the passes ran: pass 1's rows (decode) after pass 0's
    assert rows.index(r0[3]) > rows.index(r1[1])


def test_per_token_to_strace(tmp_path):
    p, o = convert(tmp_path, PER_TOKEN, out="t.strace")
    assert p.returncode == 0, p.stderr
    s = subprocess.run([BIN, "trace", "stats", o], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert s.returncode == 0, s.stderr
    j = subprocess.run([BIN, "trace", "convert", o, str(tmp_path / "t.jsonl")], stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert j.returncode == 0, j.stderr
    lines = [json.loads(x) for x in open(str(tmp_path / "t.jsonl"))]
    assert lines[0]["layers"] == 3 and lines[0]["top_k"] == 2
    assert len(lines) == 1 + 9
    assert sum(1 for x in lines[1:] if x["phase"] == "prefill") == 5


def test_count_only_dumps_are_refused(tmp_path):
    p, _ = convert(tmp_path, STAT)
    assert p.returncode == 2
    assert "sglang_expert_distribution_stat.pt: an SGLang expert-distribution dump in mode stat" in p.stderr
    assert "per_token" in p.stderr
    per_pass = str(tmp_path / "per_pass.pt")
    torch.save(dict(records=[dict(forward_pass_id=0, rank=0, gatherer_key="primary",
                                  global_physical_count=torch.zeros(4, 8, dtype=torch.int32))],
                    last_physical_to_logical_map=P2L), per_pass)
    p, _ = convert(tmp_path, per_pass)
    assert p.returncode == 2 and "per_pass.pt: an SGLang expert-distribution dump in mode per_pass" in p.stderr


def test_bad_dumps_name_file_and_record(tmp_path):
    bad = str(tmp_path / "bad.pt")
    open(bad, "wb").write(b"not a zip")
    p, o = convert(tmp_path, bad)
    assert p.returncode == 2 and "bad.pt: not a torch.save file" in p.stderr
    assert not os.path.exists(o)
    d = torch.load(PER_TOKEN)
    d["records"][1]["positions"] = [3]
    torch.save(d, bad)
    p, _ = convert(tmp_path, bad)
    assert p.returncode == 2 and "bad.pt: records[1].positions: 1 positions for 2 tokens" in p.stderr
    d = torch.load(PER_TOKEN)
    d["records"][0]["topk_ids_of_layer"] = torch.zeros(4, 5, dtype=torch.int32)
    torch.save(d, bad)
    p, _ = convert(tmp_path, bad)
    assert p.returncode == 2 and "bad.pt: records[0].topk_ids_of_layer: expected an int tensor" in p.stderr
    d = torch.load(PER_TOKEN)
    d["records"][0]["extend_seq_lens"] = [3, 3]
    torch.save(d, bad)
    p, _ = convert(tmp_path, bad)
    assert p.returncode == 2 and "records[0].extend_seq_lens: [3, 3] does not split 5 tokens" in p.stderr
    p, _ = convert(tmp_path, PER_TOKEN, extra=["--rank", "3"])
    assert p.returncode == 2 and "no records of rank 3" in p.stderr
    with open(str(tmp_path / "x.jsonl"), "w") as f:
        try:
            sglang_dump.convert([str(tmp_path / "missing.pt")], f)
            assert False
        except sglang_dump.DumpError as e:
            assert "missing.pt: no such file" in str(e)


if __name__ == "__main__":
    if "--write-data" in sys.argv:
        write_data()
