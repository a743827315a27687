/* Subcommands of the `strata` program: one file each (cmd_<name>.c).  Each
 * takes argc/argv starting at its own name, prints --help, and returns the
 * process exit status (0 ok, 1 run failed, 2 usage error). */
#ifndef STRATA_CLI_H
#define STRATA_CLI_H

#include <stdint.h>

#include "strata/error.h"

int strata_cmd_synth(int argc, char **argv);
int strata_cmd_inspect(int argc, char **argv);
int strata_cmd_quantize(int argc, char **argv);
int strata_cmd_dequantize(int argc, char **argv);
int strata_cmd_trace(int argc, char **argv);
int strata_cmd_replay(int argc, char **argv);
int strata_cmd_sim(int argc, char **argv);
int strata_cmd_calibrate(int argc, char **argv);
int strata_cmd_run(int argc, char **argv);
int strata_cmd_policies(int argc, char **argv);

/* The option getopt_long last returned, as "--name" (li: its longindex, set
 * to -1 before the call; c: the short option when li < 0), for messages:
 * argv[optind - 1] is the value, not the option, in "--opt value". */
struct option;
const char *strata_cli_optname(const struct option *opts, int li, int c);

/* Index of v in names (NULL-terminated), or -1 after printing
 * "strata <cmd>: <opt>: 'v' (a, b, c)": a usage error, exit 2. */
int strata_cli_choice(const char *cmd, const char *opt, const char *v, const char *const *names);
/* Choices indexed by their enum values (strata/replay.h, strata/engine.h). */
extern const char *const strata_cli_compute_names[]; /* none ref gpu auto: STRATA_COMPUTE_* */
extern const char *const strata_cli_mover_names[];   /* uring mmap pread: STRATA_NVME_* */
extern const char *const strata_cli_gpu_names[];     /* 0 1 auto: use_gpu 0, 1, -1 (index 2) */

/* A whole number in [min, max] (base 10, or 0x.. where base0): 0, or -1 after
 * printing "strata <cmd>: <opt>: 'text': ..." saying why not (not a number,
 * too large for 64 bits, outside the range): a usage error, exit 2.  Never
 * clamps. */
int strata_cli_u64(const char *cmd, const char *opt, const char *text, uint64_t min, uint64_t max, int base0,
		   uint64_t *out);

/* getopt_long returned '?' (it has printed "unrecognized option" or "requires
 * an argument"): add "did you mean --x?" for a misspelt long option and a
 * pointer to --help, and return 2 (not the whole help text). */
int strata_cli_bad_option(const char *cmd, const struct option *opts, int argc, char **argv);

/* --no-progress: sets STRATA_PROGRESS=0 (strata/util.h), which forked sweep
 * workers inherit.  Every long command's --help has this line: */
void strata_cli_no_progress(void);
#define STRATA_CLI_NO_PROGRESS_HELP(pad)                                                             \
	"  --no-progress" pad "no progress lines on stderr (also STRATA_PROGRESS=0); by default a line\n" \
	"  " pad "             redrawn on a terminal, else one line every 5 s with rate and ETA\n"

/* Print "strata <cmd>: <message>" for err and return 1. */
int strata_cli_fail(const char *cmd, const struct strata_error *err);

#endif
