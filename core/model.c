/* Model shape presets and the "preset:key=value" parser. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/model.h"

#define SPEC(layers, first, moe, experts, k, hid, inter_, shared, sinter, nonrouted) \
	{ .n_layers = layers, .first_moe_layer = first, .n_moe_layers = moe, .n_experts = experts, \
	  .top_k = k, .hidden = hid, .inter = inter_, .n_shared = shared, .shared_inter = sinter, \
	  .nonrouted_params = nonrouted }

/* Non-routed counts are the published totals minus the routed experts. */
const struct strata_model_preset strata_model_presets[] = {
	{ "kimi-k3.1", "Kimi-K3.1-shaped: 93 layers (1..92 MoE), 896 experts, top-16, ~33M params/expert",
	  SPEC(93, 1, 92, 896, 16, 7168, 1536, 1, 1536, 76000000000ull) },
	{ "deepseek-v3", "DeepSeek-V3: 61 layers (3 dense), 256 experts, top-8, 1 shared",
	  SPEC(61, 3, 58, 256, 8, 7168, 2048, 1, 2048, 17300000000ull) },
	{ "qwen3-30b-a3b", "Qwen3-30B-A3B: 48 MoE layers, 128 experts, top-8",
	  SPEC(48, 0, 48, 128, 8, 2048, 768, 0, 0, 1540000000ull) },
	{ "mixtral-8x7b", "Mixtral-8x7B: 32 MoE layers, 8 experts, top-2",
	  SPEC(32, 0, 32, 8, 2, 4096, 14336, 0, 0, 1600000000ull) },
	{ "deepseek-v2-lite", "DeepSeek-V2-Lite: 27 layers (1 dense), 64 experts, top-6, 2 shared",
	  SPEC(27, 1, 26, 64, 6, 2048, 1408, 2, 1408, 1540000000ull) },
	{ "olmoe", "OLMoE-1B-7B: 16 MoE layers, 64 experts, top-8",
	  SPEC(16, 0, 16, 64, 8, 2048, 1024, 0, 0, 460000000ull) },
	{ "tiny", "tiny test model: 2 MoE layers, 8 experts, top-2, 256x512",
	  SPEC(2, 0, 2, 8, 2, 256, 512, 0, 0, 1000000ull) },
	{ .name = NULL },
};

static int parse_u64(const char *v, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (errno || end == v || *end || v[0] == '-')
		return -1;
	*out = x;
	return 0;
}

int strata_model_spec_validate(const struct strata_model_spec *s, struct strata_error *err)
{
	if (!s->n_moe_layers || !s->n_experts || !s->top_k || !s->hidden || !s->inter)
		return STRATA_ERR(err, STRATA_EINVAL,
				  "model %s: layers, experts, top_k, hidden and inter must all be > 0", s->name);
	if (s->top_k > s->n_experts)
		return STRATA_ERR(err, STRATA_EINVAL, "model %s: top_k %u > experts %u",
				  s->name, s->top_k, s->n_experts);
	if (s->first_moe_layer + s->n_moe_layers > s->n_layers)
		return STRATA_ERR(err, STRATA_EINVAL, "model %s: MoE layers run past n_layers", s->name);
	if (s->n_experts > 65535 || s->n_moe_layers > 65535)
		return STRATA_ERR(err, STRATA_EINVAL, "model %s: at most 65535 layers and experts", s->name);
	if ((uint64_t)s->hidden * s->inter > (1ull << 34))
		return STRATA_ERR(err, STRATA_EINVAL, "model %s: expert matrices too large", s->name);
	return STRATA_OK;
}

int strata_model_spec_parse(const char *text, struct strata_model_spec *out, struct strata_error *err)
{
	char buf[512];
	if (!text || strlen(text) >= sizeof(buf))
		return STRATA_ERR(err, STRATA_EINVAL, "model spec missing or too long");
	strcpy(buf, text);
	char *opts = strchr(buf, ':');
	if (opts)
		*opts++ = '\0';
	const struct strata_model_preset *p = NULL;
	for (const struct strata_model_preset *q = strata_model_presets; q->name; q++)
		if (!strcmp(q->name, buf))
			p = q;
	memset(out, 0, sizeof(*out));
	if (p) {
		*out = p->spec;
	} else if (strcmp(buf, "custom")) {
		return STRATA_ERR(err, STRATA_ENOTFOUND,
				  "unknown model preset '%s' (see `strata synth --list-presets`)", buf);
	}
	snprintf(out->name, sizeof(out->name), "%s", buf);
	int scaled = 0;
	for (char *tok = opts ? strtok(opts, ",") : NULL; tok; tok = strtok(NULL, ",")) {
		char *eq = strchr(tok, '=');
		uint64_t v;
		if (!eq || parse_u64(eq + 1, &v))
			return STRATA_ERR(err, STRATA_EINVAL, "model spec '%s': bad option '%s' (want key=integer)",
					  text, tok);
		*eq = '\0';
		if (!strcmp(tok, "layers")) {
			/* keep the dense prefix, shrink the MoE stack */
			out->n_layers = out->first_moe_layer + (uint32_t)v;
			out->n_moe_layers = (uint32_t)v;
		} else if (!strcmp(tok, "first_moe")) {
			out->n_layers = out->n_layers - out->first_moe_layer + (uint32_t)v;
			out->first_moe_layer = (uint32_t)v;
		} else if (!strcmp(tok, "experts")) out->n_experts = (uint32_t)v;
		else if (!strcmp(tok, "top_k")) out->top_k = (uint32_t)v;
		else if (!strcmp(tok, "hidden")) out->hidden = (uint32_t)v;
		else if (!strcmp(tok, "inter")) out->inter = (uint32_t)v;
		else if (!strcmp(tok, "shared")) out->n_shared = (uint32_t)v;
		else if (!strcmp(tok, "shared_inter")) out->shared_inter = (uint32_t)v;
		else if (!strcmp(tok, "nonrouted")) out->nonrouted_params = v;
		else
			return STRATA_ERR(err, STRATA_EINVAL,
					  "model spec '%s': unknown key '%s' (layers, first_moe, experts, top_k, "
					  "hidden, inter, shared, shared_inter, nonrouted)", text, tok);
		scaled = 1;
	}
	if (out->top_k > out->n_experts)
		out->top_k = out->n_experts;
	if (scaled && p && strlen(out->name) + 7 < sizeof(out->name))
		strcat(out->name, "-scaled");
	return strata_model_spec_validate(out, err);
}

void strata_model_spec_format(const struct strata_model_spec *s, char *buf, size_t len)
{
	snprintf(buf, len,
		 "custom:layers=%u,first_moe=%u,experts=%u,top_k=%u,hidden=%u,inter=%u,shared=%u,"
		 "shared_inter=%u,nonrouted=%" PRIu64,
		 s->n_moe_layers, s->first_moe_layer, s->n_experts, s->top_k, s->hidden, s->inter,
		 s->n_shared, s->shared_inter, s->nonrouted_params);
}
