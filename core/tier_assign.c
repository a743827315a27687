/*
 * Expert popularity tables and tier assignment: see include/strata/tier_assign.h.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "strata/json.h"
#include "strata/tier_assign.h"
#include "strata/trace.h"
#include "strata/util.h"

int strata_popularity_init(struct strata_popularity *p, uint32_t n_layers, uint32_t n_experts,
			   struct strata_error *err)
{
	memset(p, 0, sizeof(*p));
	if (!n_layers || !n_experts || n_layers > 65535 || n_experts > 65535)
		return STRATA_ERR(err, STRATA_EINVAL, "popularity table of %u layers x %u experts", n_layers, n_experts);
	p->count = calloc((size_t)n_layers * n_experts, sizeof(double));
	if (!p->count)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	p->n_layers = n_layers;
	p->n_experts = n_experts;
	return STRATA_OK;
}

void strata_popularity_free(struct strata_popularity *p)
{
	if (!p)
		return;
	free(p->count);
	p->count = NULL;
	p->n_layers = p->n_experts = 0;
}

static int count_value(const struct strata_json *v, double *out)
{
	if (!v || v->type != STRATA_JSON_NUMBER || !isfinite(v->num) || v->num < 0)
		return -1;
	*out = v->num;
	return 0;
}

static int load_json(const char *path, struct strata_popularity *out, struct strata_error *err)
{
	struct strata_json_doc *doc;
	int rc = strata_json_parse_file(path, 0, &doc, err);
	if (rc)
		return rc;
	const struct strata_json *root = strata_json_root(doc);
	const struct strata_json *ep = strata_json_get(root, "expert_popularity");
	if (!ep || ep->type != STRATA_JSON_ARRAY || !ep->len) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: no \"expert_popularity\" array of per-layer counts", path);
		goto out;
	}
	const struct strata_json *row0 = &ep->items[0];
	if (row0->type != STRATA_JSON_ARRAY || !row0->len) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: expert_popularity[0] is not a non-empty array", path);
		goto out;
	}
	if ((rc = strata_popularity_init(out, ep->len, row0->len, err)))
		goto out;
	for (uint32_t l = 0; l < ep->len; l++) {
		const struct strata_json *row = &ep->items[l];
		if (row->type != STRATA_JSON_ARRAY || row->len != row0->len) {
			rc = STRATA_ERR(err, STRATA_ECORRUPT,
					"%s: expert_popularity[%u] has %u entries, layer 0 has %u (rows must agree)", path, l,
					row->type == STRATA_JSON_ARRAY ? row->len : 0, row0->len);
			goto out;
		}
		for (uint32_t e = 0; e < row->len; e++)
			if (count_value(&row->items[e], &out->count[(size_t)l * out->n_experts + e])) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT,
						"%s: expert_popularity[%u][%u] at byte %zu is not a non-negative number", path,
						l, e, row->items[e].pos);
				goto out;
			}
	}
out:
	if (rc)
		strata_popularity_free(out);
	strata_json_free(doc);
	return rc;
}

struct csv_row {
	uint32_t layer, expert;
	double count;
};

static int load_csv(const char *path, FILE *f, struct strata_popularity *out, struct strata_error *err)
{
	struct csv_row *rows = NULL;
	size_t n = 0, cap = 0;
	uint32_t max_l = 0, max_e = 0;
	char line[512];
	int rc = 0;
	unsigned lineno = 0;
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		size_t len = strlen(line);
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s:%u: line too long", path, lineno);
			goto out;
		}
		char *s = line;
		while (isspace((unsigned char)*s))
			s++;
		if (!*s || *s == '#')
			continue;
		if (isalpha((unsigned char)*s)) {
			if (n || strncmp(s, "layer,expert,count", 18)) {
				rc = STRATA_ERR(err, STRATA_ECORRUPT,
						"%s:%u: expected \"layer,expert,count\" header or numbers", path, lineno);
				goto out;
			}
			continue;
		}
		char *end;
		errno = 0;
		unsigned long l = strtoul(s, &end, 10);
		if (end == s || *end != ',' || errno || l > 65535 || *s == '-')
			goto bad;
		s = end + 1;
		unsigned long e = strtoul(s, &end, 10);
		if (end == s || *end != ',' || errno || e > 65535 || *s == '-')
			goto bad;
		s = end + 1;
		double c = strtod(s, &end);
		if (end == s || !isfinite(c) || c < 0)
			goto bad;
		while (isspace((unsigned char)*end))
			end++;
		if (*end)
			goto bad;
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			struct csv_row *nr = realloc(rows, cap * sizeof(*nr));
			if (!nr) {
				rc = STRATA_ERR(err, STRATA_ENOMEM, "%s: out of memory", path);
				goto out;
			}
			rows = nr;
		}
		rows[n++] = (struct csv_row){ (uint32_t)l, (uint32_t)e, c };
		if (l > max_l)
			max_l = (uint32_t)l;
		if (e > max_e)
			max_e = (uint32_t)e;
		continue;
bad:
		rc = STRATA_ERR(err, STRATA_ECORRUPT,
				"%s:%u: expected \"layer,expert,count\" with non-negative numbers", path, lineno);
		goto out;
	}
	if (ferror(f)) {
		rc = STRATA_ERRNO(err, STRATA_EIO, "%s: read", path);
		goto out;
	}
	if (!n) {
		rc = STRATA_ERR(err, STRATA_ECORRUPT, "%s: no counts", path);
		goto out;
	}
	if ((rc = strata_popularity_init(out, max_l + 1, max_e + 1, err)))
		goto out;
	for (size_t i = 0; i < n; i++)
		out->count[(size_t)rows[i].layer * out->n_experts + rows[i].expert] += rows[i].count;
out:
	free(rows);
	return rc;
}

int strata_popularity_load(const char *path, struct strata_popularity *out, struct strata_error *err)
{
	memset(out, 0, sizeof(*out));
	FILE *f = fopen(path, "r");
	if (!f)
		return strata_error_set(err, errno == ENOENT ? STRATA_ENOTFOUND : STRATA_EIO, errno, __FILE__, __LINE__,
					"%s: cannot open counts file", path);
	int c;
	while ((c = fgetc(f)) != EOF && isspace(c))
		;
	int rc;
	if (c == '{') {
		fclose(f);
		rc = load_json(path, out, err);
	} else {
		rewind(f);
		rc = load_csv(path, f, out, err);
		fclose(f);
	}
	if (!rc)
		snprintf(out->source, sizeof(out->source), "%s", path);
	return rc;
}

int strata_popularity_from_trace(const char *path, struct strata_popularity *out, struct strata_error *err)
{
	memset(out, 0, sizeof(*out));
	struct strata_trace *t;
	int rc = strata_trace_open(path, &t, err);
	if (rc)
		return rc;
	const struct strata_trace_info *ti = strata_trace_info(t);
	if ((rc = strata_popularity_init(out, ti->n_moe_layers, ti->n_experts, err))) {
		strata_trace_close(t);
		return rc;
	}
	for (uint64_t i = 0; i < ti->n_tokens; i++)
		for (uint32_t l = 0; l < ti->n_moe_layers; l++) {
			const uint16_t *e = strata_trace_experts(t, i, l);
			for (uint32_t k = 0; k < ti->top_k; k++)
				if (e[k] < ti->n_experts)
					out->count[(size_t)l * ti->n_experts + e[k]] += 1;
		}
	snprintf(out->source, sizeof(out->source), "%s", path);
	strata_trace_close(t);
	return STRATA_OK;
}

int strata_popularity_check(const struct strata_popularity *p, const struct strata_model_spec *s,
			    struct strata_error *err)
{
	if (p->n_layers != s->n_moe_layers || p->n_experts != s->n_experts)
		return STRATA_ERR(err, STRATA_ESHAPE,
				  "%s: counts for %u MoE layers x %u experts, but the model has %u MoE layers x %u experts",
				  p->source[0] ? p->source : "expert counts", p->n_layers, p->n_experts, s->n_moe_layers,
				  s->n_experts);
	return STRATA_OK;
}

int strata_tier_split_parse(const char *text, struct strata_tier_split *out, struct strata_error *err)
{
	static const char want[] = "want hot,warm,cold as percentages summing to 100 (15,30,55) or fractions "
				   "summing to 1 (0.15,0.30,0.55)";
	const char *s = text;
	double sum = 0;
	for (int i = 0; i < STRATA_TIER_COUNT; i++) {
		char *end;
		double v = strtod(s, &end);
		if (end == s || !isfinite(v) || v < 0)
			return STRATA_ERR(err, STRATA_EINVAL, "bad split '%s': %s", text, want);
		out->pct[i] = v;
		sum += v;
		s = end;
		if (i < STRATA_TIER_COUNT - 1) {
			if (*s != ',')
				return STRATA_ERR(err, STRATA_EINVAL, "bad split '%s': %s", text, want);
			s++;
		}
	}
	if (*s)
		return STRATA_ERR(err, STRATA_EINVAL, "bad split '%s': %s", text, want);
	/* The two forms cannot be confused: a split sums to 1 or to 100, never both. */
	if (fabs(sum - 1.0) <= 1e-4) {
		for (int i = 0; i < STRATA_TIER_COUNT; i++)
			out->pct[i] *= 100.0;
	} else if (fabs(sum - 100.0) > 0.01) {
		return STRATA_ERR(err, STRATA_EINVAL, "bad split '%s': sums to %g; %s", text, sum, want);
	}
	return STRATA_OK;
}

void strata_tier_split_counts(uint32_t n, const struct strata_tier_split *split, uint32_t counts[STRATA_TIER_COUNT])
{
	double cum = 0;
	uint32_t prev = 0;
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		cum += split->pct[t];
		uint32_t upto = t == STRATA_TIER_COUNT - 1 ? n : (uint32_t)floor((double)n * cum / 100.0 + 0.5 + 1e-9);
		if (upto > n)
			upto = n;
		if (upto < prev)
			upto = prev;
		counts[t] = upto - prev;
		prev = upto;
	}
}

struct rank_item {
	double c;
	uint32_t id;
};

static int cmp_rank(const void *a, const void *b)
{
	const struct rank_item *x = a, *y = b;
	if (x->c != y->c)
		return x->c > y->c ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

void strata_tier_rank(const struct strata_popularity *p, uint32_t layer, uint32_t n_experts, uint32_t *order)
{
	struct rank_item small[256], *v = n_experts <= 256 ? small : malloc(n_experts * sizeof(*v));
	if (!v) {
		/* out of memory: fall back to id order (a ranking is still valid) */
		for (uint32_t e = 0; e < n_experts; e++)
			order[e] = e;
		return;
	}
	for (uint32_t e = 0; e < n_experts; e++) {
		v[e].id = e;
		v[e].c = p ? p->count[(size_t)layer * p->n_experts + e] : 0;
	}
	qsort(v, n_experts, sizeof(*v), cmp_rank);
	for (uint32_t e = 0; e < n_experts; e++)
		order[e] = v[e].id;
	if (v != small)
		free(v);
}

int strata_tier_assign_split(const struct strata_model_spec *s, const struct strata_popularity *p,
			     const struct strata_tier_split *split, uint8_t *tiers, struct strata_error *err)
{
	int rc;
	if (p && (rc = strata_popularity_check(p, s, err)))
		return rc;
	uint32_t *order = malloc(s->n_experts * sizeof(*order));
	if (!order)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	uint32_t counts[STRATA_TIER_COUNT];
	strata_tier_split_counts(s->n_experts, split, counts);
	for (uint32_t l = 0; l < s->n_moe_layers; l++) {
		strata_tier_rank(p, l, s->n_experts, order);
		uint32_t r = 0;
		for (int t = 0; t < STRATA_TIER_COUNT; t++)
			for (uint32_t k = 0; k < counts[t]; k++, r++)
				tiers[strata_eid(s, l, order[r])] = (uint8_t)t;
	}
	free(order);
	return STRATA_OK;
}

int strata_tier_expert_bytes(const struct strata_model_spec *s, uint64_t bytes[STRATA_TIER_COUNT],
			     struct strata_error *err)
{
	for (int t = 0; t < STRATA_TIER_COUNT; t++) {
		struct strata_expert_layout lay;
		if (strata_expert_layout(STRATA_FMT_HOT + t, s->hidden, s->inter, &lay))
			return STRATA_ERR(err, STRATA_EINVAL, "no layout for format %d at hidden %u, inter %u",
					  STRATA_FMT_HOT + t, s->hidden, s->inter);
		bytes[t] = lay.bytes;
	}
	return STRATA_OK;
}

struct gitem {
	double share;
	uint32_t layer, expert;
};

static int cmp_gitem(const void *a, const void *b)
{
	const struct gitem *x = a, *y = b;
	if (x->share != y->share)
		return x->share > y->share ? -1 : 1;
	if (x->layer != y->layer)
		return x->layer < y->layer ? -1 : 1;
	return x->expert < y->expert ? -1 : x->expert > y->expert;
}

int strata_tier_assign_budget(const struct strata_model_spec *s, const struct strata_popularity *p,
			      uint64_t budget, int mode, uint8_t *tiers, struct strata_error *err)
{
	int rc;
	if (p && (rc = strata_popularity_check(p, s, err)))
		return rc;
	uint64_t b[STRATA_TIER_COUNT];
	if ((rc = strata_tier_expert_bytes(s, b, err)))
		return rc;
	uint64_t total = strata_model_total_experts(s);
	uint64_t need = total * b[STRATA_TIER_NVME];
	if (need > budget) {
		char x[32], y[32];
		return STRATA_ERR(err, STRATA_EBUDGET,
				  "budget %s is too small: %llu experts need %s even all cold", strata_fmt_bytes(budget, x, sizeof(x)),
				  (unsigned long long)total, strata_fmt_bytes(need, y, sizeof(y)));
	}
	uint64_t up_warm = b[STRATA_TIER_RAM] - b[STRATA_TIER_NVME];
	uint64_t up_hot = b[STRATA_TIER_VRAM] - b[STRATA_TIER_RAM];
	memset(tiers, STRATA_TIER_NVME, total);
	if (mode == STRATA_BUDGET_LAYER) {
		uint64_t per = budget / s->n_moe_layers;
		uint64_t left = per - (uint64_t)s->n_experts * b[STRATA_TIER_NVME];
		uint32_t n_warm = up_warm ? (uint32_t)(left / up_warm < s->n_experts ? left / up_warm : s->n_experts)
					  : s->n_experts;
		left -= (uint64_t)n_warm * up_warm;
		uint32_t n_hot = up_hot ? (uint32_t)(left / up_hot < n_warm ? left / up_hot : n_warm) : n_warm;
		uint32_t *order = malloc(s->n_experts * sizeof(*order));
		if (!order)
			return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
		for (uint32_t l = 0; l < s->n_moe_layers; l++) {
			strata_tier_rank(p, l, s->n_experts, order);
			for (uint32_t r = 0; r < n_warm; r++)
				tiers[strata_eid(s, l, order[r])] = r < n_hot ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
		}
		free(order);
		return STRATA_OK;
	}
	if (mode != STRATA_BUDGET_GLOBAL)
		return STRATA_ERR(err, STRATA_EINVAL, "unknown budget mode %d", mode);
	struct gitem *v = malloc(total * sizeof(*v));
	if (!v)
		return STRATA_ERR(err, STRATA_ENOMEM, "out of memory");
	for (uint32_t l = 0; l < s->n_moe_layers; l++) {
		double sum = 0;
		for (uint32_t e = 0; e < s->n_experts; e++)
			sum += p ? p->count[(size_t)l * s->n_experts + e] : 0;
		for (uint32_t e = 0; e < s->n_experts; e++) {
			struct gitem *g = &v[strata_eid(s, l, e)];
			g->layer = l;
			g->expert = e;
			g->share = p && sum > 0 ? p->count[(size_t)l * s->n_experts + e] / sum : 1.0 / s->n_experts;
		}
	}
	qsort(v, total, sizeof(*v), cmp_gitem);
	uint64_t left = budget - need;
	uint64_t n_warm = 0, n_hot = 0;
	while (n_warm < total && up_warm <= left) {
		left -= up_warm;
		n_warm++;
	}
	while (n_hot < n_warm && up_hot <= left) {
		left -= up_hot;
		n_hot++;
	}
	for (uint64_t r = 0; r < n_warm; r++)
		tiers[strata_eid(s, v[r].layer, v[r].expert)] = r < n_hot ? STRATA_TIER_VRAM : STRATA_TIER_RAM;
	free(v);
	return STRATA_OK;
}

/* ---- fractions and seeded tables (synthetic models, spec-only sims) ------- */

const double strata_tier_frac_default[STRATA_TIER_COUNT] = { STRATA_TIER_DEFAULT_HOT / 100.0,
							     STRATA_TIER_DEFAULT_WARM / 100.0,
							     STRATA_TIER_DEFAULT_COLD / 100.0 };

void strata_tier_frac_counts(uint32_t n_experts, const double frac[STRATA_TIER_COUNT],
			     uint32_t out[STRATA_TIER_COUNT])
{
	if (!frac || frac[0] + frac[1] + frac[2] <= 0)
		frac = strata_tier_frac_default;
	double h = floor(n_experts * frac[0] + 0.5), hw = floor(n_experts * (frac[0] + frac[1]) + 0.5);
	if (hw > n_experts)
		hw = n_experts;
	if (h > hw)
		h = hw;
	out[0] = (uint32_t)h;
	out[1] = (uint32_t)(hw - h);
	out[2] = n_experts - (uint32_t)hw;
}

void strata_tier_assign_seeded(const struct strata_model_spec *spec, const double frac[STRATA_TIER_COUNT],
			       uint64_t seed, uint8_t *tiers, double *pop)
{
	uint32_t E = spec->n_experts, cnt[STRATA_TIER_COUNT];
	strata_tier_frac_counts(E, frac, cnt);
	uint32_t *perm = malloc(E * sizeof(*perm));
	double hsum = 0;
	for (uint32_t k = 0; k < E; k++)
		hsum += 1.0 / (k + 1);
	for (uint32_t l = 0; l < spec->n_moe_layers; l++) {
		struct strata_xoshiro r;
		strata_xoshiro_seed_stream(&r, seed, STRATA_STREAM_TIER, l, 0, 0);
		for (uint32_t k = 0; k < E; k++) {
			uint32_t j = (uint32_t)(((strata_xoshiro256pp(&r) >> 32) * (k + 1)) >> 32); /* inside-out Fisher-Yates */
			if (perm) {
				perm[k] = perm[j];
				perm[j] = k;
			}
		}
		for (uint32_t rank = 0; rank < E; rank++) {
			uint32_t e = perm ? perm[rank] : rank;
			uint32_t eid = strata_eid(spec, l, e);
			tiers[eid] = rank < cnt[0] ? STRATA_TIER_VRAM : rank < cnt[0] + cnt[1] ? STRATA_TIER_RAM
											  : STRATA_TIER_NVME;
			if (pop)
				pop[eid] = 1.0 / (rank + 1) / hsum;
		}
	}
	free(perm);
}

int strata_tier_frac_parse(const char *text, double frac[STRATA_TIER_COUNT], struct strata_error *err)
{
	struct strata_tier_split sp;
	int rc = strata_tier_split_parse(text, &sp, err);
	for (int i = 0; !rc && i < STRATA_TIER_COUNT; i++)
		frac[i] = sp.pct[i] / 100.0;
	return rc;
}

int strata_tier_fmts_parse(const char *text, uint8_t fmts[STRATA_TIER_COUNT], struct strata_error *err)
{
	char buf[128];
	if (!text || strlen(text) >= sizeof(buf))
		return STRATA_ERR(err, STRATA_EINVAL, "tier formats: want three format names, hot first (e.g. q4,warm,cold)");
	snprintf(buf, sizeof(buf), "%s", text);
	int n = 0;
	char *save = NULL;
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
		int f = strata_fmt_from_name(tok);
		if (n >= STRATA_TIER_COUNT)
			return STRATA_ERR(err, STRATA_EINVAL, "tier formats '%s': more than %d entries", text,
					  STRATA_TIER_COUNT);
		if (f < STRATA_FMT_HOT)
			return STRATA_ERR(err, STRATA_EINVAL,
					  "tier formats '%s': '%s' is not a quantized format (hot, warm, cold, q4, q3)",
					  text, tok);
		fmts[n] = (uint8_t)f;
	}
	if (n != STRATA_TIER_COUNT)
		return STRATA_ERR(err, STRATA_EINVAL, "tier formats '%s': want %d names, hot first (e.g. q4,warm,cold)",
				  text, STRATA_TIER_COUNT);
	return STRATA_OK;
}

const uint8_t *strata_tier_fmts_or_default(const uint8_t *fmts)
{
	static const uint8_t def[STRATA_TIER_COUNT] = STRATA_TIER_FMTS_DEFAULT;
	return fmts && (fmts[0] | fmts[1] | fmts[2]) ? fmts : def;
}

const char *strata_tier_fmts_name(const uint8_t fmts[STRATA_TIER_COUNT], char *buf, size_t len)
{
	const struct strata_fmt_traits *t[STRATA_TIER_COUNT];
	for (int i = 0; i < STRATA_TIER_COUNT; i++)
		t[i] = strata_fmt_traits(fmts[i]);
	snprintf(buf, len, "%s,%s,%s", t[0] ? t[0]->name : "?", t[1] ? t[1]->name : "?", t[2] ? t[2]->name : "?");
	return buf;
}

int strata_tier_assign_spec(const struct strata_model_spec *spec, const char *split_text, const char *tier_trace,
			    uint64_t seed, uint8_t *tiers, struct strata_error *err)
{
	if (!split_text && !tier_trace) {
		strata_tier_assign_seeded(spec, NULL, seed, tiers, NULL);
		return STRATA_OK;
	}
	struct strata_tier_split split = STRATA_TIER_SPLIT_DEFAULT;
	struct strata_popularity pop = { 0 };
	int rc;
	if (split_text && (rc = strata_tier_split_parse(split_text, &split, err)))
		return rc;
	if (tier_trace && ((rc = strata_popularity_from_trace(tier_trace, &pop, err)) ||
			   (rc = strata_popularity_check(&pop, spec, err)))) {
		strata_error_prefix(err, "tier trace");
		strata_popularity_free(&pop);
		return rc;
	}
	if (!tier_trace) {
		/* ranks as strata synth would draw them, counts from its Zipf weights */
		if ((rc = strata_popularity_init(&pop, spec->n_moe_layers, spec->n_experts, err)))
			return rc;
		strata_tier_assign_seeded(spec, NULL, seed, tiers, pop.count);
	}
	rc = strata_tier_assign_split(spec, &pop, &split, tiers, err);
	strata_popularity_free(&pop);
	return rc;
}
