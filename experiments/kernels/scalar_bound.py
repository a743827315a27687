#!/usr/bin/env python3
"""Best cosine any fixed-rate scalar quantizer can reach on N(0,1) weights at
each tier's code budget (issue 6: the formats that decode in ~1 instruction
per weight are scalar).  Lloyd-Max quantizers for L = 2..32 levels, computed
exactly (Gaussian cell integrals), then the lower convex hull of
(log2 L, distortion): mixing level counts across weights at any ratio, with
non-power-of-two level counts packed at no cost (both generous).  The scale
is the true sigma (free and exact), so real formats can only do worse."""
import math, sys

def phi(x): return math.exp(-x * x / 2) / math.sqrt(2 * math.pi) if math.isfinite(x) else 0.0
def Phi(x): return 0.5 * (1 + math.erf(x / math.sqrt(2))) if math.isfinite(x) else (1.0 if x > 0 else 0.0)

def lloyd_max(L, iters=3000):
    c = [(-1.0 + 2.0 * (i + 0.5) / L) * 2.5 for i in range(L)]
    for _ in range(iters):
        e = [-math.inf] + [(c[i] + c[i + 1]) / 2 for i in range(L - 1)] + [math.inf]
        c = [(phi(e[i]) - phi(e[i + 1])) / (Phi(e[i + 1]) - Phi(e[i])) for i in range(L)]
    e = [-math.inf] + [(c[i] + c[i + 1]) / 2 for i in range(L - 1)] + [math.inf]
    d = 0.0
    for i in range(L):
        a, b = e[i], e[i + 1]
        p = Phi(b) - Phi(a)
        ex2 = p + (a * phi(a) if math.isfinite(a) else 0) - (b * phi(b) if math.isfinite(b) else 0)
        ex = phi(a) - phi(b)
        d += ex2 - 2 * c[i] * ex + c[i] * c[i] * p
    return d

pts = [(math.log2(L), lloyd_max(L)) for L in range(2, 33)]
def hull_d(r):
    best = math.inf
    for (r1, d1) in pts:
        for (r2, d2) in pts:
            if r1 <= r <= r2 and r2 > r1:
                t = (r - r1) / (r2 - r1)
                best = min(best, d1 + t * (d2 - d1))
            elif r1 == r:
                best = min(best, d1)
    return best
def cosine(d): return math.sqrt(1 - d)  # E[x q] = E[q^2] = 1 - D for a Lloyd-Max quantizer

print("tier,bpw_budget,code_bits,best_scalar_D,best_scalar_cosine,target_cosine,shannon_cosine,v2_cosine")
for name, B, target, v2 in (("hot", 90, 0.980, 0.9862), ("warm", 82, 0.972, 0.9807), ("cold", 46, 0.895, 0.9111)):
    bpw = B * 8 / 256
    code = bpw - 16 / 256  # a bf16 scale per 256 weights (free, exact sigma assumed above)
    d = hull_d(code)
    print(f"{name},{bpw:.4f},{code:.4f},{d:.4f},{cosine(d):.4f},{target},{math.sqrt(1 - 2 ** (-2 * bpw)):.4f},{v2}")
if "-v" in sys.argv:
    for (r, d) in pts[:8]:
        print(f"# L={2 ** r:.0f} rate {r:.3f} D {d:.5f} cosine {cosine(d):.4f}")
