/* The commands of the segtrain tool; each takes its own argv (argv[0] is the command name) and returns the
 * process exit code: 0 success, 1 the work failed, 2 bad usage. */
#ifndef SEGTRAIN_CLI_H
#define SEGTRAIN_CLI_H

int cmd_version(int argc, char **argv);
int cmd_selfcheck(int argc, char **argv);

#endif
