/* CPU reference of kernels/moe.h: one expert at a time over its tokens. */
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "quant.h"

int strata_moe_layer_ref(const struct strata_moe_call *c, struct strata_error *err)
{
	float *xs = malloc((size_t)c->n_tokens * c->hidden * sizeof(float));
	float *ys = malloc((size_t)c->n_tokens * c->hidden * sizeof(float));
	float *ws = malloc((size_t)c->n_tokens * sizeof(float));
	uint32_t *rows = malloc((size_t)c->n_tokens * sizeof(uint32_t));
	int rc = STRATA_OK;
	if (!xs || !ys || !ws || !rows) {
		rc = STRATA_ERR(err, STRATA_ENOMEM, "moe reference: out of memory");
		goto out;
	}
	for (uint32_t e = 0; e < c->n_experts && !rc; e++) {
		uint32_t n = 0;
		for (uint32_t a = 0; a < c->n_assign; a++) {
			if (c->assign_expert[a] != e)
				continue;
			if (c->assign_token[a] >= c->n_tokens) {
				rc = STRATA_ERR(err, STRATA_EINVAL, "moe reference: token %u out of range",
						c->assign_token[a]);
				break;
			}
			memcpy(xs + (size_t)n * c->hidden, c->x + (size_t)c->assign_token[a] * c->hidden,
			       c->hidden * sizeof(float));
			ws[n] = c->assign_weight[a];
			rows[n++] = c->assign_token[a];
		}
		if (rc || !n)
			continue;
		memset(ys, 0, (size_t)n * c->hidden * sizeof(float));
		if (strata_expert_forward_ref(c->fmts[e], c->extents[e], c->hidden, c->inter, xs, n, ws, ys)) {
			rc = STRATA_ERR(err, STRATA_EINVAL, "moe reference: expert %u has unusable format %u",
					e, c->fmts[e]);
			break;
		}
		for (uint32_t j = 0; j < n; j++)
			for (uint32_t i = 0; i < c->hidden; i++)
				c->y[(size_t)rows[j] * c->hidden + i] += ys[(size_t)j * c->hidden + i];
	}
out:
	free(xs);
	free(ys);
	free(ws);
	free(rows);
	return rc;
}
