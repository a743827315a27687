/* Private helpers of the trace code: walking strata_json containers. */
#ifndef STRATA_TRACE_INT_H
#define STRATA_TRACE_INT_H

#include "strata/json.h"

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

#endif
