/*
 * Prefetch scheduling decisions shared by the engine and the policy harness
 * (strata/sched.h).  The lists are short (a few layers of requests), so they
 * are arrays scanned in order.
 */
#include <stdlib.h>
#include <string.h>

#include "strata/sched.h"
#include "strata/store.h"

void strata_prefetch_sched_defaults(struct strata_prefetch_sched *s)
{
	s->budget[STRATA_LINK_PCIE] = s->budget[STRATA_LINK_NVME] = UINT64_MAX;
	s->from[STRATA_TIER_VRAM] = s->from[STRATA_TIER_RAM] = (1u << STRATA_TIER_RAM) | (1u << STRATA_TIER_NVME);
	s->keep_unused = true;
	s->preempt = false;
	s->ram_holes_only = false;
	s->ram_hole = 0;
	s->resident[0] = s->resident[1] = NULL;
}

int strata_pfq_init(struct strata_pfq *q, uint32_t cap)
{
	memset(q, 0, sizeof(*q));
	q->cap = cap ? cap : 1;
	q->pend = malloc(sizeof(*q->pend) * q->cap);
	q->out = malloc(sizeof(*q->out) * q->cap);
	return q->pend && q->out ? STRATA_OK : STRATA_ENOMEM;
}

void strata_pfq_free(struct strata_pfq *q)
{
	free(q->pend);
	free(q->out);
	memset(q, 0, sizeof(*q));
}

static bool listed(const struct strata_pf *v, uint32_t n, uint32_t eid)
{
	for (uint32_t i = 0; i < n; i++)
		if (v[i].eid == eid)
			return true;
	return false;
}

static void remove_at(struct strata_pf *v, uint32_t *n, uint32_t i)
{
	memmove(v + i, v + i + 1, sizeof(*v) * (*n - i - 1));
	(*n)--;
}

void strata_pfq_begin(struct strata_pfq *q, const struct strata_pfq_owner *w, const struct strata_prefetch_sched *s,
		      uint32_t layer, uint64_t step, const struct strata_prefetch_req *reqs, uint32_t nr,
		      uint32_t n_experts)
{
	q->at = layer;
	if (!s->preempt || !nr || !n_experts)
		return;
	for (uint32_t i = 0; i < q->n_pend;) {
		const struct strata_pf *p = &q->pend[i];
		bool named = false, kept = false;
		for (uint32_t j = 0; j < nr && !kept; j++) {
			if (reqs[j].eid / n_experts != p->layer)
				continue;
			named = true;
			kept = reqs[j].eid == p->eid;
		}
		if (!named || kept || p->since >= step) {
			i++;
			continue;
		}
		(*w->preempted)++;
		remove_at(q->pend, &q->n_pend, i);
	}
}

void strata_pfq_add(struct strata_pfq *q, const struct strata_pfq_owner *w, uint32_t eid, int tier, uint32_t layer,
		    uint64_t step)
{
	if (w->source(w->o, eid, tier) < 0 || listed(q->pend, q->n_pend, eid) || listed(q->out, q->n_out, eid)) {
		(*w->redundant)++;
		return;
	}
	if (q->n_pend + q->n_out >= q->cap) {
		(*w->dropped)++;
		return;
	}
	q->pend[q->n_pend++] = (struct strata_pf){ .eid = eid, .layer = layer, .since = step, .tier = (uint8_t)tier };
}

/* Distance from the running layer to a target: the next layer 0, the
 * running layer's own next run last (unsigned wrap). */
static inline uint32_t ahead(const struct strata_pfq *q, uint32_t layer)
{
	return layer - q->at - 1u;
}

int strata_pfq_dispatch(struct strata_pfq *q, const struct strata_prefetch_sched *s, const uint64_t *bytes,
			const struct strata_pfq_owner *w, struct strata_error *err)
{
	if (s->preempt) /* stable insertion sort by distance: the list is short */
		for (uint32_t i = 1; i < q->n_pend; i++) {
			struct strata_pf x = q->pend[i];
			uint32_t j = i;
			for (; j && ahead(q, q->pend[j - 1].layer) > ahead(q, x.layer); j--)
				q->pend[j] = q->pend[j - 1];
			q->pend[j] = x;
		}
	for (uint32_t i = 0; i < q->n_pend;) {
		struct strata_pf p = q->pend[i];
		int src = w->source(w->o, p.eid, p.tier);
		if (src < 0) { /* came in meanwhile (a demand fetch kept it) */
			(*w->redundant)++;
			remove_at(q->pend, &q->n_pend, i);
			continue;
		}
		if (!(s->from[p.tier] & (1u << src))) { /* may become allowed (staged into RAM): waits */
			i++;
			continue;
		}
		uint8_t links = p.tier == STRATA_TIER_RAM ? 1u << STRATA_LINK_NVME
			      : src == STRATA_TIER_RAM ? 1u << STRATA_LINK_PCIE
			      : (1u << STRATA_LINK_PCIE) | (1u << STRATA_LINK_NVME);
		uint64_t b = bytes[p.eid];
		bool fits = true;
		for (int l = 0; l < STRATA_LINK_COUNT; l++)
			if ((links >> l & 1) && (s->budget[l] < b || q->inflight[l] > s->budget[l] - b))
				fits = false;
		if (!fits) {
			i++;
			continue;
		}
		remove_at(q->pend, &q->n_pend, i);
		int rc = w->start(w->o, p.eid, p.tier, src, err);
		if (rc == STRATA_EBUDGET) {
			(*w->dropped)++;
			continue;
		}
		if (rc)
			return rc;
		p.links = links;
		p.bytes = b;
		for (int l = 0; l < STRATA_LINK_COUNT; l++)
			if (links >> l & 1)
				q->inflight[l] += b;
		q->out[q->n_out++] = p;
	}
	return STRATA_OK;
}

void strata_pfq_resolve_pending(struct strata_pfq *q, const struct strata_pfq_owner *w, uint32_t layer,
				uint64_t step, const uint32_t *eids, uint32_t n)
{
	for (uint32_t i = 0; i < q->n_pend;) {
		if (q->pend[i].layer != layer || q->pend[i].since >= step) {
			i++;
			continue;
		}
		bool routed = false;
		for (uint32_t j = 0; j < n && !routed; j++)
			routed = eids[j] == q->pend[i].eid;
		(*(routed ? w->promoted : w->cancelled))++;
		remove_at(q->pend, &q->n_pend, i);
	}
}

uint32_t strata_pfq_take_started(struct strata_pfq *q, uint32_t layer, uint64_t step, struct strata_pf *done,
				 uint32_t max)
{
	uint32_t got = 0;
	for (uint32_t i = 0; i < q->n_out && got < max;) {
		if (q->out[i].layer != layer || q->out[i].since >= step) {
			i++;
			continue;
		}
		for (int l = 0; l < STRATA_LINK_COUNT; l++)
			if (q->out[i].links >> l & 1)
				q->inflight[l] -= q->out[i].bytes;
		done[got++] = q->out[i];
		remove_at(q->out, &q->n_out, i);
	}
	return got;
}
