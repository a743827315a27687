/* Error records: see include/strata/error.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "strata/error.h"

int strata_error_vset(struct strata_error *e, int code, int sys_errno,
		      const char *file, int line, const char *fmt, va_list ap)
{
	if (!e)
		return code;
	e->code = code;
	e->sys_errno = sys_errno;
	e->src_file = file;
	e->src_line = line;
	int n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	if (sys_errno && n >= 0 && (size_t)n < sizeof(e->msg))
		snprintf(e->msg + n, sizeof(e->msg) - (size_t)n, ": %s", strerror(sys_errno));
	return code;
}

int strata_error_set(struct strata_error *e, int code, int sys_errno,
		     const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	strata_error_vset(e, code, sys_errno, file, line, fmt, ap);
	va_end(ap);
	return code;
}

void strata_error_prefix(struct strata_error *e, const char *fmt, ...)
{
	if (!e)
		return;
	char pre[256], old[sizeof(e->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof(pre), fmt, ap);
	va_end(ap);
	memcpy(old, e->msg, sizeof(old));
	snprintf(e->msg, sizeof(e->msg), "%s: %s", pre, old);
}

void strata_error_clear(struct strata_error *e)
{
	if (e)
		memset(e, 0, sizeof(*e));
}

const char *strata_status_name(int code)
{
	switch (code) {
	case STRATA_OK: return "ok";
	case STRATA_EINVAL: return "invalid argument";
	case STRATA_EIO: return "I/O error";
	case STRATA_ENOMEM: return "out of memory";
	case STRATA_ECORRUPT: return "corrupt data";
	case STRATA_EVERSION: return "unsupported version";
	case STRATA_ENOSPC: return "no space left";
	case STRATA_EBUDGET: return "budget too small";
	case STRATA_EPOLICY: return "policy error";
	case STRATA_ESCRIPT: return "script error";
	case STRATA_ENOTFOUND: return "not found";
	case STRATA_EUNSUPPORTED: return "unsupported";
	case STRATA_EGPU: return "GPU error";
	case STRATA_ESHAPE: return "shape mismatch";
	case STRATA_EINTR: return "interrupted";
	case STRATA_EBUSY: return "busy";
	case STRATA_EEXIST: return "exists";
	}
	return "unknown error";
}
