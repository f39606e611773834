/*
 * emitted.h: `rankrun PLAN --node N --emitted DIR`, the node script that
 * `rankplan emit` wrote, checked against its manifest and the plan.
 */
#ifndef RT_EMITTED_H
#define RT_EMITTED_H

#include "plan.h"

/* Reads DIR/manifest.json (untrusted), checks that it was emitted from
 * plan (its spec_sha256 and node count) and lists node-NODE.sh for NODE
 * with the file's size and SHA-256, and sets *cmd to the command that
 * runs it, {"bash", "DIR/node-NODE.sh", NULL} with the path's braces
 * doubled (the command is a template), freed by rt_emitted_free. Returns
 * 0, or prints what is wrong on stderr and returns RP_EXIT_USAGE. */
int rt_emitted_command(const char *dir, const Plan *plan, int node, char ***cmd);
void rt_emitted_free(char **cmd);

#endif
