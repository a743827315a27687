/*
 * The kernel configuration (see kernels.h): defaults, validation, the
 * "key=value,..." text form, and the one current configuration the GPU
 * layer reads at the start of every strata_moe_layer_gpu call.  Plain C, so
 * a build without CUDA parses and checks the same configurations.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

static pthread_mutex_t cfg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct strata_moe_config cfg_now = STRATA_MOE_CONFIG_DEFAULT;

void strata_gpu_moe_config_defaults(struct strata_moe_config *c)
{
	const struct strata_moe_config d = STRATA_MOE_CONFIG_DEFAULT;
	*c = d;
}

/* The tier decode kernel's variants, warps x stages (12 x -4: 12x4 unrolled;
 * STRATA_MOE_DEC_TAB + n: n stages and the codebook table, "WxNt"). */
static const int dec_variants[][2] = { { 8, 4 },  { 8, 5 },  { 12, 3 },
				       { 12, 4 }, { 12, -4 }, { 16, 3 },
				       { 8, STRATA_MOE_DEC_TAB + 2 }, { 12, STRATA_MOE_DEC_TAB + 2 },
				       { 7, STRATA_MOE_DEC_TAB + 3 } };
/* The bf16 decode kernel's, warps x ring depth. */
static const int bf16_variants[][2] = { { 16, 4 }, { 12, 6 }, { 8, 8 } };

static int is_variant(const int (*v)[2], size_t n, int a, int b)
{
	for (size_t i = 0; i < n; i++)
		if (v[i][0] == a && v[i][1] == b)
			return 1;
	return 0;
}

int strata_gpu_moe_config_validate(const struct strata_moe_config *c, struct strata_error *err)
{
	if (!c->prefill_min)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: prefill_min must be >= 1 (off: UINT32_MAX)");
	if (c->dec_warps > 0 &&
	    !is_variant(dec_variants, sizeof(dec_variants) / sizeof(dec_variants[0]), c->dec_warps, c->dec_stages))
		return STRATA_ERR(err, STRATA_EINVAL,
				  "kernel config: decode variant %dx%d unknown (8x4, 8x5, 12x3, 12x4, 12x4u, 16x3, "
				  "8x2t, 12x2t, 7x3t)",
				  c->dec_warps, c->dec_stages);
	if (c->dec_warps < -1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: dec_warps %d (-1 auto, 0 off, or a variant)",
				  c->dec_warps);
	if (c->split > STRATA_MOE_SPLIT_MAX)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: split %u outside 0 (auto) .. %u", c->split,
				  STRATA_MOE_SPLIT_MAX);
	if (c->bf16_warps > 0 && !is_variant(bf16_variants, sizeof(bf16_variants) / sizeof(bf16_variants[0]),
					     c->bf16_warps, c->bf16_depth))
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: bf16 decode variant %dx%d unknown (16x4, 12x6, 8x8)",
				  c->bf16_warps, c->bf16_depth);
	if (c->bf16_warps < -1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: bf16_warps %d (-1 auto, 0 off, or a variant)",
				  c->bf16_warps);
	if (c->bf16_kc < 32)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: bf16_kc %u below 32 weights", c->bf16_kc);
	if (c->poison != 0 && c->poison != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: poison must be 0 or 1");
	if (c->sq_dec != -1 && c->sq_dec != 0)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_dec %d (-1 auto, 0 off)", c->sq_dec);
	if (c->sq_pf != 0 && c->sq_pf != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_pf must be 0 or 1");
	if (c->sq_xs != 0 && c->sq_xs != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_xs must be 0 or 1");
	if (c->sq_gv < 0 || c->sq_gv > 2)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gv must be 0, 1 or 2");
	if (c->sq_l2pf < 0 || c->sq_l2pf > 2)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_l2pf must be 0, 1 or 2");
	if (c->sq_pdl != 0 && c->sq_pdl != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_pdl must be 0 or 1");
	if (c->pf_path < 0 || c->pf_path > 10)
		return STRATA_ERR(err, STRATA_EINVAL,
				  "kernel config: pf_path must be 0 (auto), 1 (sm90), 2 (mma), 3 (sm90ws), 4 (sm90p), 5 (sm90p1), "
				  "6 (sm90p3), 7 (sm90pc), 8 (sm90ph), 9 (sm90pp) or 10 (sm90pp2)");
	if (c->dec_tr < -1 || c->dec_tr > 3)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: dec_tr %d (-1 auto, 0 off, 1, 2 or 3)", c->dec_tr);
	if (!c->pf_tiles_min)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: prefill_tiles must be >= 1 (off: UINT32_MAX)");
	if (c->sq_q3i < 0 || c->sq_q3i > 2)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_q3i must be 0, 1 or 2");
	if (c->sq_gvl < 0 || c->sq_gvl > 55 || c->sq_gvl % 10 > 5)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvl %d: want two digits 0 - 5 (gate|up, down)", c->sq_gvl);
	if (c->small < -1 || c->small > 3)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: small %d (-1 auto, 0 off, 1 on, 2 skewed row pitch, 3 serial copy issue)", c->small);
	if (c->small_ts != 0 && c->small_ts != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: small_ts must be 0 or 1");
	if (c->sq_gvw != 16 && c->sq_gvw != 12 && c->sq_gvw != 8)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvw must be 16, 12 or 8");
	if (c->sq_gvs < 0 || c->sq_gvs > 2)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvs must be 0, 1 or 2");
	if (c->sq_gvx != 0 && c->sq_gvx != 1)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvx must be 0 or 1");
	if (c->pstack < 0 || c->pstack > 8)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: pstack %d (0 off, 1 - 8 pieces in flight)", c->pstack);
	return STRATA_OK;
}

/* "auto" | "off" | "NxM" (| "12x4u" when unrolled is allowed). */
static int parse_variant(const char *key, const char *v, int allow_u, int *a, int *b, struct strata_error *err)
{
	if (!strcmp(v, "auto")) {
		*a = -1, *b = 0;
		return STRATA_OK;
	}
	if (!strcmp(v, "off") || !strcmp(v, "0")) {
		*a = 0, *b = 0;
		return STRATA_OK;
	}
	if (allow_u && !strcmp(v, "12x4u")) {
		*a = 12, *b = -4;
		return STRATA_OK;
	}
	char tail, more;
	int n = sscanf(v, "%dx%d%c%c", a, b, &tail, &more);
	if ((n != 2 && !(n == 3 && allow_u && tail == 't')) || *a <= 0 || *b <= 0 || *b >= STRATA_MOE_DEC_TAB)
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: %s=%s: want auto, off or WARPSxN", key, v);
	if (n == 3)
		*b += STRATA_MOE_DEC_TAB;
	return STRATA_OK;
}

static int parse_u32(const char *key, const char *v, uint32_t *out, struct strata_error *err)
{
	char *end;
	errno = 0;
	unsigned long long x = strtoull(v, &end, 10);
	if (!*v || *end || errno || x > UINT32_MAX || *v == '-')
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: %s=%s: not a number", key, v);
	*out = (uint32_t)x;
	return STRATA_OK;
}

/* One digit, "0" .. max. */
static int parse_digit(const char *key, const char *v, int max, int *out, struct strata_error *err)
{
	if (v[0] < '0' || v[0] > '0' + max || v[1])
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: %s=%s: want a digit 0 - %d", key, v, max);
	*out = v[0] - '0';
	return STRATA_OK;
}

int strata_gpu_moe_config_parse(const char *text, struct strata_moe_config *c, struct strata_error *err)
{
	char buf[512];
	if (strlen(text) >= sizeof(buf))
		return STRATA_ERR(err, STRATA_EINVAL, "kernel config: '%.40s...' too long", text);
	snprintf(buf, sizeof(buf), "%s", text);
	int rc = STRATA_OK;
	for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv && !rc; kv = strtok_r(NULL, ",", &save)) {
		char *v = strchr(kv, '=');
		if (!v)
			return STRATA_ERR(err, STRATA_EINVAL, "kernel config: '%s' is not key=value", kv);
		*v++ = '\0';
		if (!strcmp(kv, "prefill_min")) {
			if (!strcmp(v, "off"))
				c->prefill_min = UINT32_MAX;
			else
				rc = parse_u32(kv, v, &c->prefill_min, err);
		} else if (!strcmp(kv, "dec")) {
			rc = parse_variant(kv, v, 1, &c->dec_warps, &c->dec_stages, err);
		} else if (!strcmp(kv, "split")) {
			if (!strcmp(v, "auto"))
				c->split = 0;
			else
				rc = parse_u32(kv, v, &c->split, err);
		} else if (!strcmp(kv, "bf16dec")) {
			rc = parse_variant(kv, v, 0, &c->bf16_warps, &c->bf16_depth, err);
		} else if (!strcmp(kv, "bf16_kc")) {
			rc = parse_u32(kv, v, &c->bf16_kc, err);
		} else if (!strcmp(kv, "poison")) {
			rc = parse_digit(kv, v, 1, &c->poison, err);
		} else if (!strcmp(kv, "sqdec")) {
			if (strcmp(v, "auto") && strcmp(v, "off") && strcmp(v, "0"))
				return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sqdec=%s: want auto or off", v);
			c->sq_dec = !strcmp(v, "auto") ? -1 : 0;
		} else if (!strcmp(kv, "sq_pf")) {
			rc = parse_digit(kv, v, 1, &c->sq_pf, err);
		} else if (!strcmp(kv, "sq_xs")) {
			rc = parse_digit(kv, v, 1, &c->sq_xs, err);
		} else if (!strcmp(kv, "sq_gv")) {
			rc = parse_digit(kv, v, 2, &c->sq_gv, err);
		} else if (!strcmp(kv, "sq_l2pf")) {
			rc = parse_digit(kv, v, 2, &c->sq_l2pf, err);
		} else if (!strcmp(kv, "dec_tr")) {
			if (!strcmp(v, "auto"))
				c->dec_tr = -1;
			else
				rc = parse_digit(kv, v, 3, &c->dec_tr, err);
		} else if (!strcmp(kv, "small")) {
			if (!strcmp(v, "auto"))
				c->small = -1;
			else if (!strcmp(v, "off"))
				c->small = 0;
			else
				rc = parse_digit(kv, v, 3, &c->small, err);
		} else if (!strcmp(kv, "small_ts")) {
			rc = parse_digit(kv, v, 1, &c->small_ts, err);
		} else if (!strcmp(kv, "sq_pdl")) {
			rc = parse_digit(kv, v, 1, &c->sq_pdl, err);
		} else if (!strcmp(kv, "sq_q3i")) {
			rc = parse_digit(kv, v, 2, &c->sq_q3i, err);
		} else if (!strcmp(kv, "sq_gvl")) {
			uint32_t l = 0;
			if (strlen(v) > 2 || (rc = parse_u32(kv, v, &l, err)))
				return rc ? rc : STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvl=%s: want two digits 0 - 5", v);
			c->sq_gvl = (int)l;
		} else if (!strcmp(kv, "sq_gvs")) {
			rc = parse_digit(kv, v, 2, &c->sq_gvs, err);
		} else if (!strcmp(kv, "sq_gvx")) {
			rc = parse_digit(kv, v, 1, &c->sq_gvx, err);
		} else if (!strcmp(kv, "pstack")) {
			rc = parse_digit(kv, v, 8, &c->pstack, err);
		} else if (!strcmp(kv, "sq_gvw")) {
			if (strcmp(v, "16") && strcmp(v, "12") && strcmp(v, "8"))
				return STRATA_ERR(err, STRATA_EINVAL, "kernel config: sq_gvw=%s: want 16, 12 or 8", v);
			c->sq_gvw = atoi(v);
		} else if (!strcmp(kv, "prefill")) {
			static const char *const pf_names[] = { "auto",  "sm90",   "mma",    "sm90ws", "sm90p",
								"sm90p1", "sm90p3", "sm90pc", "sm90ph", "sm90pp", "sm90pp2" };
			const int nk = (int)(sizeof(pf_names) / sizeof(pf_names[0]));
			int k = 0;
			while (k < nk && strcmp(v, pf_names[k]))
				k++;
			if (k == nk)
				return STRATA_ERR(err, STRATA_EINVAL,
						  "kernel config: prefill=%s: want auto, sm90, sm90ws, sm90p, sm90p1, sm90p3, sm90pc, "
						  "sm90ph, sm90pp, sm90pp2 or mma",
						  v);
			c->pf_path = k;
		} else if (!strcmp(kv, "prefill_tiles")) {
			if (!strcmp(v, "off"))
				c->pf_tiles_min = UINT32_MAX;
			else
				rc = parse_u32(kv, v, &c->pf_tiles_min, err);
		} else {
			return STRATA_ERR(err, STRATA_EINVAL,
					  "kernel config: unknown key '%s' (prefill_min, dec, split, bf16dec, bf16_kc, poison, sqdec, sq_pf, sq_xs, sq_gv, sq_l2pf, sq_pdl, prefill, prefill_tiles, sq_q3i, sq_gvw, sq_gvl, sq_gvs, sq_gvx, dec_tr, small, small_ts, pstack)",
					  kv);
		}
	}
	return rc ? rc : strata_gpu_moe_config_validate(c, err);
}

int strata_gpu_moe_configure(const struct strata_moe_config *c, struct strata_error *err)
{
	int rc = strata_gpu_moe_config_validate(c, err);
	if (rc)
		return rc;
	pthread_mutex_lock(&cfg_mu);
	cfg_now = *c;
	pthread_mutex_unlock(&cfg_mu);
	return STRATA_OK;
}

void strata_gpu_moe_config_get(struct strata_moe_config *c)
{
	pthread_mutex_lock(&cfg_mu);
	*c = cfg_now;
	pthread_mutex_unlock(&cfg_mu);
}
