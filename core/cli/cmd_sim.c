/* strata sim: strata replay on the engine's virtual clock with a cost model. */
#include "cli.h"
#include "cmd_replay.h"

int strata_cmd_sim(int argc, char **argv)
{
	return strata_cli_replay_main(argc, argv, 1);
}
