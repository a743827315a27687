/*
 * `strata trace stats`: what makes a trace easy or hard to cache.
 *   skew         per layer: share of accesses on the top 10% of experts,
 *                entropy of the access distribution, Gini coefficient;
 *   reuse        per (layer, expert): tokens since its previous use in the
 *                same layer (the whole stream, as a cache sees it);
 *   correlation  top-1 expert of layer l vs layer l+1: mutual information
 *                and how often the most frequent follower is right.
 *   predictions  recorded lookahead: share of predicted slots routed later.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "strata/trace.h"

#define REUSE_EXACT 65536

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

static double pct(const uint64_t *h, uint64_t over, uint64_t total, double q)
{
	if (!total)
		return 0;
	uint64_t want = (uint64_t)ceil(q * (double)total), acc = 0;
	if (!want)
		want = 1;
	for (uint32_t d = 0; d < REUSE_EXACT; d++) {
		acc += h[d];
		if (acc >= want)
			return d;
	}
	(void)over;
	return REUSE_EXACT;
}

int strata_trace_stats_compute(const struct strata_trace *t, struct strata_trace_stats *s, struct strata_error *err)
{
	memset(s, 0, sizeof(*s));
	const struct strata_trace_info *in = strata_trace_info(t);
	uint32_t L = in->n_moe_layers, E = in->n_experts, k = in->top_k;
	uint64_t T = in->n_tokens;
	s->n_layers = L;
	s->layer = calloc(L, sizeof(*s->layer));
	uint64_t *cnt = calloc((size_t)L * E, sizeof(uint64_t));
	uint64_t *last = malloc((size_t)L * E * sizeof(uint64_t));
	uint64_t *exact = calloc(REUSE_EXACT, sizeof(uint64_t));
	int corr = E <= 4096; /* the joint table is E x E */
	uint64_t *joint = calloc(corr ? (size_t)E * E : 1, sizeof(uint64_t));
	uint64_t *sorted = malloc(E * sizeof(uint64_t));
	uint64_t *ma = calloc(E, sizeof(uint64_t)), *mb = calloc(E, sizeof(uint64_t));
	int rc = STRATA_OK;
	if (!s->layer || !cnt || !last || !exact || !joint || !sorted || !ma || !mb) {
		strata_trace_stats_free(s);
		rc = STRATA_ERR(err, STRATA_ENOMEM, "stats: out of memory");
		goto out;
	}
	for (size_t i = 0; i < (size_t)L * E; i++)
		last[i] = UINT64_MAX;
	uint64_t over = 0, pred_slots = 0, pred_hits = 0;
	for (uint64_t i = 0; i < T; i++) {
		for (uint32_t l = 0; l < L; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			for (uint32_t j = 0; j < k; j++) {
				size_t id = (size_t)l * E + e[j];
				cnt[id]++;
				if (last[id] == UINT64_MAX) {
					s->first_uses++;
				} else {
					uint64_t d = i - last[id];
					s->reuses++;
					if (d < REUSE_EXACT)
						exact[d]++;
					else
						over++;
					uint32_t b = 0;
					while (b < 15 && (1ull << b) < d)
						b++;
					s->reuse_hist[b]++;
				}
				last[id] = i;
			}
		}
		if (in->flags & STRATA_TRACE_F_PRED) {
			struct strata_hint h[STRATA_TRACE_MAX_DEPTH * STRATA_TRACE_MAX_TOPN];
			for (uint32_t l = 0; l < L; l++) {
				uint32_t n = strata_trace_hints(t, i, l, h, STRATA_TRACE_MAX_DEPTH * STRATA_TRACE_MAX_TOPN);
				for (uint32_t m = 0; m < n; m++) {
					const uint16_t *tr = strata_trace_experts(t, i, h[m].layer);
					pred_slots++;
					for (uint32_t j = 0; j < k; j++)
						if (tr[j] == h[m].expert) {
							pred_hits++;
							break;
						}
				}
			}
		}
	}
	s->pred_precision = pred_slots ? (double)pred_hits / (double)pred_slots : -1;
	s->reuse_p50 = pct(exact, over, s->reuses, 0.5);
	s->reuse_p90 = pct(exact, over, s->reuses, 0.9);
	s->reuse_p99 = pct(exact, over, s->reuses, 0.99);
	for (uint32_t l = 0; l < L; l++) {
		struct strata_trace_layer_stats *ls = &s->layer[l];
		memcpy(sorted, cnt + (size_t)l * E, E * sizeof(uint64_t));
		qsort(sorted, E, sizeof(uint64_t), cmp_desc);
		uint64_t total = 0, top = 0;
		uint32_t ntop = (E + 9) / 10;
		for (uint32_t e = 0; e < E; e++) {
			total += sorted[e];
			if (e < ntop)
				top += sorted[e];
			ls->used += sorted[e] > 0;
		}
		double H = 0, g = 0;
		for (uint32_t e = 0; e < E; e++) {
			if (sorted[e]) {
				double p = (double)sorted[e] / (double)total;
				H -= p * log2(p);
			}
			/* Gini over ascending order: sorted is descending, rank from the end */
			g += (2.0 * (double)(E - e) - (double)E - 1.0) * (double)sorted[e];
		}
		ls->top10_share = total ? (double)top / (double)total : 0;
		ls->entropy = H;
		ls->gini = total && E > 1 ? g / ((double)E * (double)total) : 0;
		/* cross-layer: top-1 of l vs l+1 */
		if (l + 1 < L && T && corr) {
			memset(joint, 0, (size_t)E * E * sizeof(uint64_t));
			memset(ma, 0, E * sizeof(uint64_t));
			memset(mb, 0, E * sizeof(uint64_t));
			for (uint64_t i = 0; i < T; i++) {
				uint16_t a = strata_trace_experts(t, i, l)[0], b = strata_trace_experts(t, i, l + 1)[0];
				joint[(size_t)a * E + b]++;
				ma[a]++;
				mb[b]++;
			}
			double mi = 0;
			uint64_t best_sum = 0;
			for (uint32_t a = 0; a < E; a++) {
				uint64_t best = 0;
				for (uint32_t b = 0; b < E; b++) {
					uint64_t j = joint[(size_t)a * E + b];
					if (j > best)
						best = j;
					if (j)
						mi += (double)j / (double)T *
						      log2((double)j * (double)T / ((double)ma[a] * (double)mb[b]));
				}
				best_sum += best;
			}
			ls->mi_next = mi;
			ls->corr_next_top1 = (double)best_sum / (double)T;
		} else {
			ls->mi_next = ls->corr_next_top1 = -1;
		}
		s->mean_top10_share += ls->top10_share / L;
		s->mean_entropy += ls->entropy / L;
		s->mean_gini += ls->gini / L;
		if (l + 1 < L && corr) {
			s->mean_corr_next_top1 += ls->corr_next_top1 / (L - 1);
			s->mean_mi_next += ls->mi_next / (L - 1);
		}
	}
	if (L < 2 || !corr)
		s->mean_corr_next_top1 = s->mean_mi_next = -1;
out:
	free(cnt);
	free(last);
	free(exact);
	free(joint);
	free(sorted);
	free(ma);
	free(mb);
	return rc;
}

void strata_trace_stats_free(struct strata_trace_stats *s)
{
	free(s->layer);
	s->layer = NULL;
}
