/*
 * Errors.  Library functions return an int status (STRATA_OK or a negative
 * STRATA_E* code) and keep the details on a caller-owned struct strata_error:
 * the code, the failing call or object (file name, policy name, script line),
 * the OS errno where one applies, and where in Strata it was raised.  Nothing
 * below main() exits or aborts: one bad run of a sweep fails that run only.
 */
#ifndef STRATA_ERROR_H
#define STRATA_ERROR_H

#include <stdarg.h>

enum strata_status {
	STRATA_OK = 0,
	STRATA_EINVAL = -1,      /* bad argument, option or configuration */
	STRATA_EIO = -2,         /* read/write/open failed (errno kept) */
	STRATA_ENOMEM = -3,      /* allocation failed */
	STRATA_ECORRUPT = -4,    /* checksum mismatch, bad magic, sizes disagree */
	STRATA_EVERSION = -5,    /* unsupported format or ABI version */
	STRATA_ENOSPC = -6,      /* disk full while writing */
	STRATA_EBUDGET = -7,     /* a tier budget is too small for the request */
	STRATA_EPOLICY = -8,     /* a policy made a decision the engine cannot honour */
	STRATA_ESCRIPT = -9,     /* a Lua script failed (syntax, runtime, limit) */
	STRATA_ENOTFOUND = -10,  /* no such file, tensor, expert, policy or preset */
	STRATA_EUNSUPPORTED = -11, /* not available in this build or on this machine */
	STRATA_EGPU = -12,       /* a CUDA call failed */
	STRATA_ESHAPE = -13,     /* shapes disagree (trace vs model, tensor vs spec) */
	STRATA_EINTR = -14,      /* interrupted by the user (SIGINT) */
	STRATA_EBUSY = -15,      /* another process is writing the same output */
	STRATA_EEXIST = -16,     /* the output exists and replacing it needs --force */
};

struct strata_error {
	int code;            /* enum strata_status */
	int sys_errno;       /* errno at the failure, 0 if none */
	const char *src_file; /* where in Strata it was raised */
	int src_line;
	char msg[768];       /* "path/to/file: what went wrong: strerror" */
};

/* Record an error on e (may be NULL) and return code, so callers can write
 * `return STRATA_ERR(err, STRATA_EIO, "%s: short read", path);`.  The message
 * is formatted once; a later error overwrites an earlier one. */
int strata_error_set(struct strata_error *e, int code, int sys_errno,
		     const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 6, 7)));
int strata_error_vset(struct strata_error *e, int code, int sys_errno,
		      const char *file, int line, const char *fmt, va_list ap);

#define STRATA_ERR(e, code, ...) \
	strata_error_set((e), (code), 0, __FILE__, __LINE__, __VA_ARGS__)
/* Same, appending ": strerror(errno)" and keeping errno. */
#define STRATA_ERRNO(e, code, ...) \
	strata_error_set((e), (code), errno, __FILE__, __LINE__, __VA_ARGS__)

/* Prefix the existing message with context ("loading model: ..."). */
void strata_error_prefix(struct strata_error *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void strata_error_clear(struct strata_error *e);
const char *strata_status_name(int code);

#endif
