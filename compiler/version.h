/*
 * version.h: what `rankplan --version` and `rankrun --version` print, in
 * one place: the release (meson.build's project version), the git revision
 * when built from a git checkout (meson's vcs_tag; `git describe --always
 * --dirty`), and the optional features built in. Its own small library,
 * linked into the two binaries only, so that a new revision recompiles one
 * file.
 */
#ifndef RANKPLAN_VERSION_H
#define RANKPLAN_VERSION_H

#include <stdbool.h>
#include <stdio.h>

/* Prints "PROG VERSION", then "revision: REV" (or "revision: unknown (not
 * built from a git checkout)"), then "features: nccl backend yes|no" (nccl:
 * whether rankrun has its nccl backend; rankplan passes the build's
 * RP_HAVE_NCCL, rankrun asks its backend registry). */
void rp_version_print(FILE *f, const char *prog, bool nccl);

#endif
