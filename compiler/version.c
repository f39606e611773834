/*
 * version.c: the --version text of both binaries (version.h).
 */
#include "version.h"

#include "rp_config.h"
#include "rp_vcs.h"

void rp_version_print(FILE *f, const char *prog, bool nccl) {
  static const char rev[] = RP_VCS_REVISION;
  fprintf(f, "%s %s\n", prog, RP_VERSION);
  fprintf(f, "revision: %s\n", rev[0] ? rev : "unknown (not built from a git checkout)");
  fprintf(f, "features: nccl backend %s\n", nccl ? "yes" : "no");
}
