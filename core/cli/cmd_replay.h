/* Shared by strata replay and strata sim (cmd_replay.c). */
#ifndef STRATA_CMD_REPLAY_H
#define STRATA_CMD_REPLAY_H

int strata_cli_replay_main(int argc, char **argv, int virtual_mode);

#endif
