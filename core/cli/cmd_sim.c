/* strata sim: not yet implemented (placeholder until its issue lands). */
#include <stdio.h>

#include "cli.h"

int strata_cmd_sim(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	fprintf(stderr, "strata sim: not implemented in this build\n");
	return 2;
}
