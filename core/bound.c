/*
 * Offline bounds on loads and bytes (strata/bound.h: what they are and why
 * every policy of the engine respects them).  MIN runs a max-heap on next
 * use with lazy deletion, O(n log n); PFOO-L buckets the intervals by length
 * and fills the byte-boundary budget shortest first, O(n + U).
 */
#include <stdlib.h>
#include <string.h>

#include "strata/bound.h"

struct hent {
	uint64_t next; /* next use (stream index), UINT64_MAX: never */
	uint32_t eid;
};

static void heap_push(struct hent *h, uint64_t *n, struct hent x)
{
	uint64_t i = (*n)++;
	while (i) {
		uint64_t p = (i - 1) / 2;
		if (h[p].next >= x.next)
			break;
		h[i] = h[p];
		i = p;
	}
	h[i] = x;
}

static struct hent heap_pop(struct hent *h, uint64_t *n)
{
	struct hent top = h[0], x = h[--(*n)];
	uint64_t i = 0;
	for (;;) {
		uint64_t c = 2 * i + 1;
		if (c >= *n)
			break;
		if (c + 1 < *n && h[c + 1].next > h[c].next)
			c++;
		if (h[c].next <= x.next)
			break;
		h[i] = h[c];
		i = c;
	}
	if (*n)
		h[i] = x;
	return top;
}

int strata_bound_min_loads(const struct strata_bound_stream *s, uint64_t slots, bool warm, uint64_t *loads,
			   struct strata_error *err)
{
	*loads = 0;
	if (!s->n)
		return STRATA_OK;
	uint64_t *next = malloc(s->n * sizeof(uint64_t));
	uint64_t *last = malloc((size_t)s->n_ids * sizeof(uint64_t));
	uint64_t *cur = malloc((size_t)s->n_ids * sizeof(uint64_t)); /* the in-cache expert's next use */
	uint8_t *in = calloc(s->n_ids, 1);
	struct hent *h = malloc((s->n + s->n_ids + 1) * sizeof(*h));
	if (!next || !last || !cur || !in || !h) {
		free(next), free(last), free(cur), free(in), free(h);
		return STRATA_ERR(err, STRATA_ENOMEM, "bound: out of memory (%llu accesses)", (unsigned long long)s->n);
	}
	for (uint32_t e = 0; e < s->n_ids; e++)
		last[e] = UINT64_MAX;
	for (uint64_t i = s->n; i-- > 0;) {
		next[i] = last[s->eid[i]];
		last[s->eid[i]] = i;
	}
	uint64_t hn = 0, held = 0, miss = 0;
	/* a given start: those experts are held, each until its first use */
	for (uint32_t e = 0; s->init && !warm && e < s->n_ids; e++)
		if (s->init[e] && held < slots) {
			in[e] = 1;
			held++;
			cur[e] = last[e];
			heap_push(h, &hn, (struct hent){ .next = last[e], .eid = e });
		}
	for (uint64_t i = 0; i < s->n; i++) {
		uint32_t x = s->eid[i];
		if (!in[x]) {
			miss++;
			if (slots == 0) /* nothing kept: every access loads */
				continue;
			if (held == slots) {
				/* evict the farthest next use; stale entries (an expert
				 * gone, or a next use since moved on) are skipped */
				for (;;) {
					struct hent v = heap_pop(h, &hn);
					if (in[v.eid] && cur[v.eid] == v.next) {
						in[v.eid] = 0;
						held--;
						break;
					}
				}
			}
			in[x] = 1;
			held++;
		}
		cur[x] = next[i];
		if (hn >= s->n + s->n_ids) { /* compact: keep the live entries only */
			uint64_t k = 0;
			for (uint64_t j = 0; j < hn; j++)
				if (in[h[j].eid] && cur[h[j].eid] == h[j].next)
					h[k++] = h[j];
			hn = 0;
			for (uint64_t j = 0; j < k; j++)
				heap_push(h, &hn, h[j]);
		}
		heap_push(h, &hn, (struct hent){ .next = next[i], .eid = x });
	}
	free(next), free(last), free(cur), free(in), free(h);
	*loads = warm ? (miss > slots ? miss - slots : 0) : miss;
	return STRATA_OK;
}

int strata_bound_bytes(const struct strata_bound_stream *s, uint64_t cap, bool warm, uint64_t *bytes,
		       struct strata_error *err)
{
	*bytes = 0;
	if (!s->n)
		return STRATA_OK;
	uint64_t p0 = s->pos[0], span = s->pos[s->n - 1] - p0 + 1; /* layer-steps */
	/* interval lengths run 0 .. span (a warm first access: from the boundary
	 * before the first layer-step, up to span) */
	double *by_len = calloc(span + 1, sizeof(double));   /* bytes of intervals of each length */
	uint64_t *last = malloc((size_t)s->n_ids * sizeof(uint64_t));
	if (!by_len || !last) {
		free(by_len), free(last);
		return STRATA_ERR(err, STRATA_ENOMEM, "bound: out of memory (%llu layer-steps)", (unsigned long long)span);
	}
	for (uint32_t e = 0; e < s->n_ids; e++)
		last[e] = UINT64_MAX;
	double total = 0;
	for (uint64_t i = 0; i < s->n; i++) {
		uint32_t x = s->eid[i];
		double b = (double)s->bytes[x];
		uint64_t p = s->pos[i] - p0;
		total += b;
		if (last[x] != UINT64_MAX)
			by_len[p - last[x]] += b;
		else if (warm || (s->init && s->init[x]))
			by_len[p + 1] += b;
		last[x] = p; /* cold: a first access is a compulsory load */
	}
	/* the budget: cap bytes at each boundary the intervals can span (warm:
	 * one more, the boundary before the first layer-step) */
	double room = (double)cap * (double)(warm || s->init ? span : span - 1), hit = 0;
	for (uint64_t len = 0; len <= span; len++) {
		double v = by_len[len];
		if (v == 0)
			continue;
		if (len == 0 || v * (double)len <= room) {
			hit += v;
			room -= v * (double)len;
		} else {
			hit += room / (double)len;
			break;
		}
	}
	free(by_len), free(last);
	/* one byte of slack for the doubles' rounding (totals stay far below 2^53) */
	double missed = total - hit;
	*bytes = missed > 1 ? (uint64_t)(missed - 1) : 0;
	return STRATA_OK;
}

int strata_bound_tier(const struct strata_bound_stream *s, uint64_t cap, bool warm, uint64_t *loads,
		      uint64_t *bytes, struct strata_error *err)
{
	uint64_t smallest = UINT64_MAX;
	for (uint32_t e = 0; e < s->n_ids; e++)
		if (s->bytes[e] && s->bytes[e] < smallest)
			smallest = s->bytes[e];
	if (smallest == UINT64_MAX)
		smallest = 1;
	uint64_t b;
	int rc = strata_bound_min_loads(s, cap / smallest + 1, warm, loads, err);
	if (!rc)
		rc = strata_bound_bytes(s, cap, warm, &b, err);
	if (rc)
		return rc;
	*bytes = *loads * smallest > b ? *loads * smallest : b;
	if (warm) {
		/* any start holds at most cap bytes: every other expert the stream
		 * uses is loaded at least once */
		uint8_t *seen = calloc(s->n_ids + 1, 1);
		if (!seen)
			return STRATA_ERR(err, STRATA_ENOMEM, "bound: out of memory (%u experts)", s->n_ids);
		uint64_t used = 0;
		for (uint64_t i = 0; i < s->n; i++)
			if (!seen[s->eid[i]]) {
				seen[s->eid[i]] = 1;
				used += s->bytes[s->eid[i]];
			}
		free(seen);
		if (used > cap && used - cap > *bytes)
			*bytes = used - cap;
	}
	return STRATA_OK;
}
