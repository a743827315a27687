#!/usr/bin/env python3
"""Read Strata routing traces (.strace binary or the .jsonl twin) from Python, for notebooks.

    import strata_trace
    t = strata_trace.load("trace.strace")
    t.info["n_tokens"], t.experts(i, layer), t.weights(i, layer), t.req(i), t.phase(i), t.pos(i)
    arr = t.expert_array()   # numpy uint16 [tokens, layers, top_k] when numpy is installed
    df = t.to_pandas()       # one row per (token, layer, rank): token req pos phase layer rank expert weight
    rows = t.to_records()    # the same rows as dicts, without pandas

Pure Python (struct); numpy is used only by expert_array(), pandas only by to_pandas().  A raw
routing log (e.g. vLLM's one row per token and layer) is not a trace: import it first with
`strata trace import -o t.strace LOG.jsonl`; load() says so.  The binary layout is documented in
core/include/strata/trace.h and docs/traces.md.  This reader checks the magic, the version, the
record size and the file length; it does not verify the xxh64 checksums (no xxhash dependency):
`strata trace head FILE` does.

    python3 scripts/strata_trace.py TRACE      # print the header and the first tokens
"""
import json
import struct
import sys

MAGIC = b"STRATATR"
HEADER = 256
F_WEIGHTS, F_WEIGHTS_F32, F_PRED = 1, 2, 4
NO_EXPERT = 0xFFFF


def _align4(x):
    return (x + 3) & ~3


def _f16(h):
    return struct.unpack("<e", struct.pack("<H", h))[0]


class Trace:
    def __init__(self, info, records, layout):
        self.info = info
        self._rec = records
        self._lay = layout

    def __len__(self):
        return self.info["n_tokens"]

    def _r(self, i):
        b = self.info["record_bytes"]
        return self._rec[i * b:(i + 1) * b]

    def req(self, i):
        return struct.unpack_from("<I", self._r(i), 0)[0]

    def pos(self, i):
        return struct.unpack_from("<I", self._r(i), 4)[0]

    def phase(self, i):
        return "prefill" if self._r(i)[8] == 0 else "decode"

    def experts(self, i, layer):
        k = self.info["top_k"]
        return list(struct.unpack_from("<%dH" % k, self._r(i), self._lay["exp"] + 2 * k * layer))

    def weights(self, i, layer):
        k = self.info["top_k"]
        ws = self._lay["wsize"]
        if not ws:
            return [0.0] * k
        off = self._lay["w"] + ws * k * layer
        if ws == 4:
            return list(struct.unpack_from("<%df" % k, self._r(i), off))
        return [_f16(h) for h in struct.unpack_from("<%dH" % k, self._r(i), off)]

    def predictions(self, i, layer):
        """[(later_layer, expert, score)] recorded at (i, layer)."""
        D, N = self.info["pred_depth"], self.info["pred_topn"]
        if not D:
            return []
        r = self._r(i)
        ids = struct.unpack_from("<%dH" % (D * N), r, self._lay["p"] + 2 * D * N * layer)
        sc = struct.unpack_from("<%dH" % (D * N), r, self._lay["ps"] + 2 * D * N * layer)
        out = []
        for d in range(D):
            for j in range(N):
                e = ids[d * N + j]
                if e != NO_EXPERT and layer + d + 1 < self.info["n_moe_layers"]:
                    out.append((layer + d + 1, e, _f16(sc[d * N + j])))
        return out

    RECORD_COLUMNS = ("token", "req", "pos", "phase", "layer", "rank", "expert", "weight")

    def to_records(self):
        """One dict per (token, layer, rank) routing: the long form pandas and CSV tools take."""
        k, L = self.info["top_k"], self.info["n_moe_layers"]
        out = []
        for i in range(len(self)):
            req, pos, ph = self.req(i), self.pos(i), self.phase(i)
            for layer in range(L):
                for rank, (e, w) in enumerate(zip(self.experts(i, layer), self.weights(i, layer))):
                    if e != NO_EXPERT:
                        out.append(dict(token=i, req=req, pos=pos, phase=ph, layer=layer, rank=rank, expert=e,
                                        weight=w))
        return out

    def to_pandas(self):
        """A pandas DataFrame of to_records() (columns RECORD_COLUMNS)."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Trace.to_pandas() needs pandas (Debian: apt-get install python3-pandas); "
                              "to_records() gives the same rows as dicts") from e
        return pd.DataFrame(self.to_records(), columns=list(self.RECORD_COLUMNS))

    def expert_array(self):
        import numpy as np
        L, k, b = self.info["n_moe_layers"], self.info["top_k"], self.info["record_bytes"]
        raw = np.frombuffer(self._rec, dtype=np.uint8).reshape(len(self), b)
        ex = raw[:, self._lay["exp"]:self._lay["exp"] + 2 * L * k].copy().view("<u2")
        return ex.reshape(len(self), L, k)


def _layout(L, k, flags, D, N):
    lay = {"exp": 12}
    end = 12 + 2 * L * k
    lay["wsize"] = (4 if flags & F_WEIGHTS_F32 else 2) if flags & F_WEIGHTS else 0
    if lay["wsize"]:
        lay["w"] = _align4(end)
        end = lay["w"] + lay["wsize"] * L * k
    if flags & F_PRED:
        lay["p"] = _align4(end)
        end = lay["p"] + 2 * L * D * N
        lay["ps"] = _align4(end)
        end = lay["ps"] + 2 * L * D * N
    lay["bytes"] = _align4(end)
    return lay


def _load_binary(path, data):
    if len(data) < HEADER:
        raise ValueError("%s: truncated header" % path)
    ver, hb, L, E, k, flags, D, N, rb, nreq = struct.unpack_from("<10I", data, 8)
    if ver != 1:
        raise ValueError("%s: trace format version %d (this reader knows 1)" % (path, ver))
    ntok, npre, ndec = struct.unpack_from("<3Q", data, 48)
    maxpos, nused = struct.unpack_from("<2I", data, 72)
    model = data[88:136].split(b"\0")[0].decode()
    lay = _layout(L, k, flags, D, N)
    if rb != lay["bytes"]:
        raise ValueError("%s: record size %d does not match the shape (%d)" % (path, rb, lay["bytes"]))
    if len(data) != HEADER + ntok * rb:
        raise ValueError("%s: %d bytes, header promises %d records of %d bytes" % (path, len(data), ntok, rb))
    info = dict(n_moe_layers=L, n_experts=E, top_k=k, flags=flags, pred_depth=D, pred_topn=N, record_bytes=rb,
                n_requests=nreq, n_tokens=ntok, n_prefill=npre, n_decode=ndec, max_pos=maxpos, n_used=nused,
                model=model)
    return Trace(info, memoryview(data)[HEADER:], lay)


def _load_jsonl(path):
    """The text twin, converted to the binary record layout in memory."""
    hdr, rows = None, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise ValueError("%s:%d: not JSON (%s)" % (path, n, e)) from None
            if not isinstance(obj, dict):
                raise ValueError("%s:%d: a JSON object per line expected" % (path, n))
            if "strata_trace" in obj:
                hdr = obj
            elif not isinstance(obj.get("layers"), list):
                raise ValueError("%s:%d: not a Strata trace record (no 'layers' list; has %s): a raw routing "
                                 "log? Convert it first: strata trace import -o %s.strace %s"
                                 % (path, n, ", ".join(sorted(obj)[:6]) or "nothing",
                                    path.rsplit(".", 1)[0], path))
            else:
                rows.append(obj)
    if not rows and not hdr:
        raise ValueError("%s: no trace records" % path)
    L = hdr["layers"] if hdr else len(rows[0]["layers"])
    k = hdr["top_k"] if hdr else len(rows[0]["layers"][0])
    E = hdr["experts"] if hdr else 1 + max(e for r in rows for l in r["layers"] for e in l)
    D = (hdr or {}).get("pred_depth", 0)
    N = (hdr or {}).get("pred_topn", 0)
    flags = 0
    if (hdr and "weights" in hdr) or (not hdr and rows and "weights" in rows[0]):
        flags |= F_WEIGHTS | (F_WEIGHTS_F32 if (hdr or {}).get("weights") == "f32" else 0)
    if D:
        flags |= F_PRED
    lay = _layout(L, k, flags, D, N)
    buf = bytearray(lay["bytes"] * len(rows))
    for i, r in enumerate(rows):
        o = i * lay["bytes"]
        struct.pack_into("<IIB", buf, o, r.get("req", 0), r.get("pos", i), 0 if r.get("phase") == "prefill" else 1)
        struct.pack_into("<%dH" % (L * k), buf, o + lay["exp"], *[e for l in r["layers"] for e in l])
        if lay["wsize"]:
            ws = [w for l in r.get("weights", [[0.0] * k] * L) for w in l]
            fmt = "<%df" % (L * k) if lay["wsize"] == 4 else "<%de" % (L * k)
            struct.pack_into(fmt, buf, o + lay["w"], *ws)
        if D:
            ids, sc = [NO_EXPERT] * (L * D * N), [0.0] * (L * D * N)
            for l, per in enumerate(r.get("pred", [])):
                for d, lst in enumerate(per):
                    for j, e in enumerate(lst):
                        ids[(l * D + d) * N + j] = e
            for l, per in enumerate(r.get("pred_w", [])):
                for d, lst in enumerate(per):
                    for j, w in enumerate(lst):
                        sc[(l * D + d) * N + j] = w
            struct.pack_into("<%dH" % len(ids), buf, o + lay["p"], *ids)
            struct.pack_into("<%de" % len(sc), buf, o + lay["ps"], *sc)
    info = dict(n_moe_layers=L, n_experts=E, top_k=k, flags=flags, pred_depth=D, pred_topn=N,
                record_bytes=lay["bytes"], n_requests=len({r.get("req", 0) for r in rows}), n_tokens=len(rows),
                n_prefill=sum(1 for r in rows if r.get("phase") == "prefill"),
                n_decode=sum(1 for r in rows if r.get("phase") != "prefill"),
                max_pos=max([r.get("pos", i) for i, r in enumerate(rows)] or [0]), n_used=None,
                model=(hdr or {}).get("model", ""))
    return Trace(info, memoryview(bytes(buf)), lay)


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] == MAGIC:
        return _load_binary(path, data)
    if data[:6] == b"STRATA" or b"\0" in data[:256]:
        raise ValueError("%s: not a strata trace (bad magic)" % path)
    return _load_jsonl(path)


def main(argv):
    usage = "usage: strata_trace.py TRACE   (print the header and the first tokens)"
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(usage)
        return 0
    if len(argv) != 2 or argv[1].startswith("-"):
        print(usage, file=sys.stderr)
        return 2
    try:
        t = load(argv[1])
    except (OSError, ValueError) as e:
        print("strata_trace.py: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(t.info))
    for i in range(min(3, len(t))):
        print(i, t.req(i), t.phase(i), t.pos(i), [t.experts(i, l) for l in range(t.info["n_moe_layers"])][:4])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
