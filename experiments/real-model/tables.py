"""Markdown tables of one run of run_device.sh (the README's tables, from the run's own files).

    python3 experiments/real-model/tables.py experiments/real-model/run3

Reads train.json, summary.csv, results.csv, goals.json and summary.json (strata.eval), and
prints: training, quality per configuration (mean [min, max] over held-out shards), each
ranking against every (shard, random seed) pair, and the paired difference popularity - random
per shard (mean and standard deviation over the random seeds).
"""
import csv
import json
import os
import statistics
import sys


def load(run, name):
    p = os.path.join(run, name)
    if name.endswith(".json"):
        with open(p) as f:
            return json.load(f)
    with open(p) as f:
        return list(csv.DictReader(f))


def training(run):
    t = load(run, "train.json")
    aux = None
    try:
        aux = load(run, "config.json").get("router_aux_loss_coef")
    except OSError:
        pass
    print("| training | value |\n|---|---|")
    print("| steps x bytes per step | %d x %d |" % (t["steps"], t["batch"] * t["seq"]))
    print("| training time, speed | %.1f s, %d bytes/s |" % (t["train_seconds"], t["tokens_per_s"]))
    print("| load-balancing loss coefficient | %s |" % (aux if aux is not None else "?"))
    print("| held-out bits/byte, model / unigram | **%.3f** / %.3f |" % (t["heldout_bits_per_byte"],
                                                                        t["unigram_bits_per_byte"]))


def quality(run):
    summ = load(run, "summary.csv")
    rows = load(run, "results.csv")
    print("| configuration | PPL / BF16 | mean KLD (nats) | top-1 | top-5 | hot / cold share of accesses |")
    print("|---|---|---|---|---|---|")
    for s in summ:
        n = s["config"]
        rr = [r for r in rows if r["config"] == n]
        hs = [float(r["hot_share"]) for r in rr if r.get("hot_share")]
        cs = [float(r["cold_share"]) for r in rr if r.get("cold_share")]
        share = "%.3f / %.3f" % (hs[0], cs[0]) if hs and cs else ""
        print("| %s | %+.2f%% | %.4f [%.4f, %.4f] | %.4f [%.4f, %.4f] | %.4f | %s |" % (
            n, 100 * float(s["ppl_vs_bf16"]), float(s["kld"]), float(s["kld_min"]), float(s["kld_max"]),
            float(s["top1"]), float(s["top1_min"]), float(s["top1_max"]), float(s["top5"]), share))


def versus_random(run):
    rows = load(run, "results.csv")
    shards = sorted({int(r["shard"]) for r in rows if r["config"].startswith("random-")})
    rnd = sorted({r["config"] for r in rows if r["config"].startswith("random-")})
    names = [n for n in dict.fromkeys(r["config"] for r in rows)
             if (n.startswith("popularity") or n.startswith("inverse")) and not n.endswith("-engine")]
    by = {(r["config"], int(r["shard"])): r for r in rows}
    print("| ranking | KLD wins | top-1 wins | KLD - random, per shard (mean +- sd over %d seeds) |"
          " top-1 - random, per shard |" % len(rnd))
    print("|---|---|---|---|---|")
    for n in names:
        kw = tw = tot = 0
        dk, dt = [], []
        for s in shards:
            p = by[(n, s)]
            kr = [float(by[(x, s)]["kld"]) for x in rnd]
            tr = [float(by[(x, s)]["top1"]) for x in rnd]
            kw += sum(float(p["kld"]) < k for k in kr)
            tw += sum(float(p["top1"]) > t for t in tr)
            tot += len(kr)
            dk.append("%+.4f +- %.4f" % (float(p["kld"]) - statistics.mean(kr), statistics.pstdev(kr)))
            dt.append("%+.4f +- %.4f" % (float(p["top1"]) - statistics.mean(tr), statistics.pstdev(tr)))
        print("| %s | %d of %d | %d of %d | %s | %s |" % (n, kw, tot, tw, tot, "; ".join(dk), "; ".join(dt)))


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    run = argv[1]
    training(run)
    print()
    s = load(run, "summary.json")
    print("Profile: the hottest 15%% of a layer's experts take %.1f%% of its top-k selections "
          "(uniform 15%%); Gini of the per-layer counts %s; ranked by %s." % (
              100 * s["hot_share_of_load"], "%.3f" % s["gini"] if "gini" in s else "?", s.get("rank_by", "count")))
    if "spearman_use_cold_error" in s:
        print("Per expert (experts.csv): Spearman correlation of use and the cold format's relative weight "
              "error, mean over layers %.3f." % s["spearman_use_cold_error"])
    print()
    quality(run)
    print()
    versus_random(run)
    g = s["goals"]
    print()
    print("quantize (popularity shards, %s threads): %s MB/s of BF16 input" % (g.get("quantize_threads"),
                                                                            g.get("quantize_mb_per_s")))


if __name__ == "__main__":
    main(sys.argv)
