/* Private helpers of the trace code: walking strata_json containers, a
 * record's prediction slots. */
#ifndef STRATA_TRACE_INT_H
#define STRATA_TRACE_INT_H

#include "strata/json.h"
#include "strata/trace.h"

/* First member of an array/object, NULL if empty or not a container. */
static inline const struct strata_json *jchild(const struct strata_json *p)
{
	return p && (p->type == STRATA_JSON_ARRAY || p->type == STRATA_JSON_OBJECT) && p->len ? p->items : NULL;
}

/* The member after c inside its container p, NULL at the end. */
static inline const struct strata_json *jnext(const struct strata_json *p, const struct strata_json *c)
{
	return c + 1 < p->items + p->len ? c + 1 : NULL;
}

/* The n prediction slots made at layer l for distance d (1..D) in a record
 * of L layers, cleared (STRATA_TRACE_NO_EXPERT, score 0); *w gets their
 * scores.  NULL when l + d is past the last layer (they stay empty). */
static inline uint16_t *pred_slots(uint16_t *pred, float *pw, uint32_t L, uint32_t D, uint32_t n, uint32_t l,
				   uint32_t d, float **w)
{
	uint16_t *p = pred + ((size_t)l * D + d - 1) * n;
	*w = pw + ((size_t)l * D + d - 1) * n;
	for (uint32_t j = 0; j < n; j++) {
		p[j] = STRATA_TRACE_NO_EXPERT;
		(*w)[j] = 0;
	}
	return l + d < L ? p : NULL;
}

#endif
