#!/usr/bin/env python3
"""Test scripts/strata_trace.py on the bundled traces: the binary and its JSONL twin read the same,
and the reader rejects a truncated file.   python3 scripts/test_strata_trace.py"""
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import strata_trace  # noqa: E402

DATA = os.path.join(HERE, "..", "tests", "data")


def main():
    a = strata_trace.load(os.path.join(DATA, "trace_tiny.strace"))
    b = strata_trace.load(os.path.join(DATA, "trace_tiny.jsonl"))
    ia, ib = a.info, b.info
    for key in ("n_moe_layers", "n_experts", "top_k", "flags", "pred_depth", "pred_topn", "record_bytes",
                "n_requests", "n_tokens", "n_prefill", "n_decode", "max_pos"):
        assert ia[key] == ib[key], (key, ia[key], ib[key])
    assert ia["n_tokens"] == 2 * (16 + 64) and ia["n_prefill"] == 32, ia
    for i in range(len(a)):
        assert (a.req(i), a.pos(i), a.phase(i)) == (b.req(i), b.pos(i), b.phase(i)), i
        for l in range(ia["n_moe_layers"]):
            ea = a.experts(i, l)
            assert ea == b.experts(i, l), (i, l)
            assert len(set(ea)) == ia["top_k"] and all(0 <= e < ia["n_experts"] for e in ea)
            assert a.weights(i, l) == b.weights(i, l), (i, l)
            assert a.predictions(i, l) == b.predictions(i, l), (i, l)
    assert a.predictions(0, 0) and not a.predictions(0, ia["n_moe_layers"] - 1)
    with open(os.path.join(DATA, "trace_tiny.strace"), "rb") as f:
        data = f.read()
    with tempfile.NamedTemporaryFile(suffix=".strace") as t:
        t.write(data[:-5])
        t.flush()
        try:
            strata_trace.load(t.name)
            raise AssertionError("a truncated trace loaded")
        except ValueError as e:
            assert "header promises" in str(e), e
    # long form: one row per (token, layer, rank)
    recs = a.to_records()
    assert len(recs) == len(a) * ia["n_moe_layers"] * ia["top_k"], len(recs)
    r = recs[ia["n_moe_layers"] * ia["top_k"] + 1]
    assert (r["token"], r["layer"], r["rank"]) == (1, 0, 1) and r["expert"] == a.experts(1, 0)[1], r
    assert set(r) == set(strata_trace.Trace.RECORD_COLUMNS)
    # a raw routing log is refused with what to do
    raw = os.path.join(HERE, "..", "traces", "mixtral-8x7b-instruct", "gsm8k_2_routing-head.jsonl")
    try:
        strata_trace.load(raw)
        raise AssertionError("a raw routing log loaded")
    except ValueError as e:
        assert "raw routing log" in str(e) and "strata trace import" in str(e), e
    try:
        import pandas  # noqa: F401
        df = a.to_pandas()
        assert len(df) == len(recs) and list(df.columns) == list(strata_trace.Trace.RECORD_COLUMNS)
        extra = "; pandas to_pandas ok"
    except ImportError:
        try:
            a.to_pandas()
            raise AssertionError("to_pandas without pandas")
        except ImportError as e:
            assert "python3-pandas" in str(e), e
        extra = "; pandas not installed: to_pandas says so"
    try:
        import numpy  # noqa: F401
        arr = a.expert_array()
        assert arr.shape == (len(a), ia["n_moe_layers"], ia["top_k"])
        assert list(arr[5, 1]) == a.experts(5, 1)
        extra += "; numpy expert_array ok"
    except ImportError:
        extra += "; numpy not installed: expert_array not checked"
    print("test_strata_trace: %d tokens, binary == JSONL%s" % (len(a), extra))


if __name__ == "__main__":
    main()
