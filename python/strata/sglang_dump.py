"""SGLang expert-distribution recorder dumps -> a routing log `strata trace import` reads.

    python3 -m strata.sglang_dump expert_distribution_recorder_*.pt -o routing.jsonl
    python3 -m strata.sglang_dump DUMP.pt -o trace.strace [--strata build/release/bin/strata]

SGLang records expert routing with `--expert-distribution-recorder-mode MODE` and the
/start_expert_distribution_record, /stop_... and /dump_expert_distribution_record endpoints;
each dump is a torch.save file (python/sglang/srt/eplb/expert_distribution.py):

  per_token   {"records": [one per forward pass: forward_pass_id, rank, gatherer_key,
               input_ids, positions, extend_seq_lens, forward_mode,
               topk_ids_of_layer (int32 [layers, tokens, 8], -1 = no expert),
               misc_objects, global_physical_count],
               "last_physical_to_logical_map": [layers, physical experts]}
              -- the only mode with per-token routing: converted here.
  per_pass    {"records": [forward_pass_id, rank, gatherer_key, global_physical_count
               ([layers, physical experts] counts per forward pass)], ...}   counts only
  stat, stat_approx
              {"rank", "logical_count" ([steps, layers, logical experts]),
               "average_utilization_rate_over_window"}                        counts only

Count-only dumps are refused (a cache replay needs the order of accesses, which counts lose).

The converter writes one JSONL row per (token, MoE layer): request, token (0, 1, ... within
the request), pos (the position SGLang recorded), layer (SGLang's layer index; layers whose ids
are all -1 are dense and left out, and `strata trace import` compacts the rest), experts (the
logical ids: physical ids through last_physical_to_logical_map) and phase.  A dump does not
record request ids (the gatherer's rids are a TODO upstream), so requests are rebuilt from the
positions: in an extend pass each extend_seq_lens segment is a request's chunk (a segment at
position 0 starts a request; a later one continues the request whose next position it is), and
in a decode pass each token continues the request whose next position it is, first come first
matched.  Rows come out in the order the passes ran; import with --order input to keep it.
Several dumps (ranks) may be given; the records of the lowest rank are used unless --rank.
Errors name the file and the record (`dump.pt: records[3].topk_ids_of_layer: ...`).
Loading uses torch.load(weights_only=True) where the installed torch has it.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

DECODE = 2  # sglang ForwardMode.DECODE (EXTEND = 1, DECODE, MIXED, IDLE, ...)


class DumpError(Exception):
    pass


def load(path):
    try:
        try:
            d = torch.load(path, map_location="cpu", weights_only=True)
        except TypeError:  # a torch without weights_only
            d = torch.load(path, map_location="cpu")
    except FileNotFoundError:
        raise DumpError("%s: no such file" % path)
    except Exception as e:  # pickle / zip errors of every kind: name the file
        raise DumpError("%s: not a torch.save file (%s: %s)" % (path, type(e).__name__, e))
    if not isinstance(d, dict):
        raise DumpError("%s: expected the dict an SGLang expert-distribution dump holds, found %s"
                        % (path, type(d).__name__))
    if "logical_count" in d:
        lc = d["logical_count"]
        shape = "x".join(str(s) for s in getattr(lc, "shape", ())) or "?"
        raise DumpError("%s: an SGLang expert-distribution dump in mode stat or stat_approx (logical_count %s:"
                        " counts per step, layer and expert) has no per-token routing; record with"
                        " --expert-distribution-recorder-mode per_token" % (path, shape))
    if "records" not in d or not isinstance(d["records"], list):
        raise DumpError("%s: no 'records' list: not an SGLang expert-distribution dump (keys: %s)"
                        % (path, ", ".join(sorted(map(str, d)))))
    recs = d["records"]
    if recs and all(isinstance(r, dict) and "topk_ids_of_layer" not in r and "global_physical_count" in r
                    for r in recs):
        raise DumpError("%s: an SGLang expert-distribution dump in mode per_pass (records of"
                        " global_physical_count: counts per forward pass) has no per-token routing; record"
                        " with --expert-distribution-recorder-mode per_token" % path)
    return d


def _ints(path, i, key, v):
    if isinstance(v, torch.Tensor):
        v = v.tolist()
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) for x in v):
        raise DumpError("%s: records[%d].%s: expected a list of integers" % (path, i, key))
    return list(v)


class Requests:
    """Rebuilds requests from positions (a dump has no request ids)."""

    def __init__(self):
        self.next_pos = []   # per request: the position its next token has
        self.count = []      # tokens so far

    def take(self, pos, used):
        for r, p in enumerate(self.next_pos):
            if p == pos and r not in used and pos > 0:
                return r
        self.next_pos.append(pos)
        self.count.append(0)
        return len(self.next_pos) - 1


def convert(paths, out, rank=None):
    """Writes the rows to the open file out; returns a summary dict."""
    dumps = [(p, load(p)) for p in paths]
    ranks = sorted({r.get("rank", 0) for _, d in dumps for r in d["records"] if isinstance(r, dict)})
    if rank is None:
        rank = ranks[0] if ranks else 0
    elif rank not in ranks:
        raise DumpError("%s: no records of rank %d (ranks: %s)" % (", ".join(paths), rank, ranks or "none"))
    passes = []
    for path, d in dumps:
        p2l = d.get("last_physical_to_logical_map")
        if p2l is not None:
            if not isinstance(p2l, torch.Tensor) or p2l.dim() != 2:
                raise DumpError("%s: last_physical_to_logical_map: expected a [layers, physical experts] tensor"
                                % path)
            p2l = p2l.long()
        for i, r in enumerate(d["records"]):
            if not isinstance(r, dict):
                raise DumpError("%s: records[%d]: expected a dict" % (path, i))
            if r.get("rank", 0) != rank:
                continue
            if "topk_ids_of_layer" not in r:
                raise DumpError("%s: records[%d]: no topk_ids_of_layer (keys: %s): only per_token dumps carry"
                                " routing" % (path, i, ", ".join(sorted(map(str, r)))))
            passes.append((r.get("forward_pass_id", i), path, i, r, p2l))
    passes.sort(key=lambda x: x[0])
    reqs = Requests()
    rows = 0
    moe_layers = set()
    for fpid, path, i, r, p2l in passes:
        ids = r["topk_ids_of_layer"]
        if not isinstance(ids, torch.Tensor) or ids.dim() != 3:
            raise DumpError("%s: records[%d].topk_ids_of_layer: expected an int tensor [layers, tokens, top_k],"
                            " found %s" % (path, i, tuple(ids.shape) if isinstance(ids, torch.Tensor)
                                           else type(ids).__name__))
        n_layers, n_tok, _ = ids.shape
        positions = _ints(path, i, "positions", r.get("positions"))
        if len(positions) != n_tok:
            raise DumpError("%s: records[%d].positions: %d positions for %d tokens in topk_ids_of_layer"
                            % (path, i, len(positions), n_tok))
        if p2l is not None and p2l.shape[0] != n_layers:
            raise DumpError("%s: last_physical_to_logical_map has %d layers, records[%d].topk_ids_of_layer %d"
                            % (path, p2l.shape[0], i, n_layers))
        mode = r.get("forward_mode")
        seg = r.get("extend_seq_lens")
        if mode == DECODE or seg is None:
            seg = [1] * n_tok
        else:
            seg = _ints(path, i, "extend_seq_lens", seg)
            if sum(seg) != n_tok or any(s <= 0 for s in seg):
                raise DumpError("%s: records[%d].extend_seq_lens: %s does not split %d tokens"
                                % (path, i, seg, n_tok))
        ids = ids.long()
        if int(ids.max()) >= (p2l.shape[1] if p2l is not None else 1 << 30) or int(ids.min()) < -1:
            raise DumpError("%s: records[%d].topk_ids_of_layer: expert ids outside -1..%d"
                            % (path, i, (p2l.shape[1] - 1) if p2l is not None else (1 << 30)))
        used = set()
        t0 = 0
        for s in seg:
            req = reqs.take(positions[t0], used)
            used.add(req)
            for t in range(t0, t0 + s):
                phase = "decode" if mode == DECODE or (s == 1 and positions[t] > 0) else "prefill"
                tok = reqs.count[req]
                reqs.count[req] += 1
                reqs.next_pos[req] = positions[t] + 1
                for layer in range(n_layers):
                    row = ids[layer, t]
                    row = row[row >= 0]
                    if not row.numel():
                        continue  # a dense layer (or one the pass did not route)
                    if p2l is not None:
                        row = p2l[layer, row]
                    moe_layers.add(layer)
                    out.write(json.dumps({"request": req, "token": tok, "pos": positions[t], "layer": layer,
                                          "experts": row.tolist(), "phase": phase}) + "\n")
                    rows += 1
            t0 += s
    if not rows:
        raise DumpError("%s: no routed token in the per_token records of rank %d" % (", ".join(paths), rank))
    return {"rows": rows, "requests": len(reqs.count), "tokens": sum(reqs.count), "passes": len(passes),
            "moe_layers": sorted(moe_layers), "rank": rank}


def find_strata():
    b = os.environ.get("STRATA_BIN")
    if b:
        return b
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "build", "release", "bin", "strata")
    return here if os.path.exists(here) else "strata"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m strata.sglang_dump", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dumps", nargs="+", help="expert_distribution_recorder_*.pt (mode per_token)")
    ap.add_argument("-o", "--output", required=True,
                    help="routing log to write (.jsonl), or a trace (.strace: imported with strata trace import)")
    ap.add_argument("--rank", type=int, help="the rank whose records to use (default: the lowest)")
    ap.add_argument("--strata", help="strata program for a .strace output (default: $STRATA_BIN, the build"
                    " tree's, else strata on PATH)")
    args = ap.parse_args(argv)
    try:
        if args.output.endswith(".strace"):
            with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
                tmp = f.name
                res = convert(args.dumps, f, args.rank)
            try:
                p = subprocess.run([args.strata or find_strata(), "trace", "import", "--order", "input", "-q",
                                    "-o", args.output, tmp], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   universal_newlines=True)
            except OSError as e:
                raise DumpError("strata trace import: %s (give --strata)" % e)
            finally:
                os.unlink(tmp)
            if p.returncode:
                raise DumpError("strata trace import: %s" % p.stderr.strip())
        else:  # written whole or not at all
            tmp = args.output + ".tmp"
            try:
                with open(tmp, "w") as f:
                    res = convert(args.dumps, f, args.rank)
                os.replace(tmp, args.output)
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    except (DumpError, OSError) as e:
        print("strata.sglang_dump: %s" % e, file=sys.stderr)
        return 2
    print("%s: %d rows, %d requests, %d tokens from %d forward passes of rank %d; MoE layers %s"
          % (args.output, res["rows"], res["requests"], res["tokens"], res["passes"], res["rank"],
             ",".join(map(str, res["moe_layers"]))), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
