/*
 * emit_jobs.c: the `shell` and `slurm` targets, on top of the engine's
 * node scripts: launch.sh starts every node's script over ssh; job.sbatch
 * starts them as one Slurm job step per node.
 *
 * Both expect the output directory at the same path on every node (a
 * shared file system; RANKPLAN_DIR overrides it) and pass each node's host
 * name to the scripts as RANKPLAN_HOST_<n>, which the scripts read for
 * every address they use (their default is the plan's host name).
 */
#include <stdlib.h>
#include <string.h>

#include "emit_launch.h"

static bool node_has_ranks(const Launch *l, size_t n) { return l->p->nodes[n].nranks > 0; }

/* launch.sh: one ssh per node with ranks, then the router. */
void emit_shell(Launch *l) {
  StrBuf b;
  sb_init(&b);
  char hb[32];
  sb_puts(&b, "here=$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\ndir=${RANKPLAN_DIR:-$here}\nssh=${SSH:-ssh}\n"
              "env_args=(");
  for (size_t n = 0; n < l->p->nnodes; n++)
    if (node_has_ranks(l, n) || (l->router_port && (int32_t)n == l->router_node)) {
      lhost(l, (int32_t)n, hb); /* defines host_N */
      sb_printf(&b, " \"RANKPLAN_HOST_%zu=${host_%zu}\"", n, n);
    }
  sb_puts(&b, " \"RANKPLAN_LOG_DIR=${RANKPLAN_LOG_DIR:-$dir}\")\n\n");
  for (size_t n = 0; n < l->p->nnodes; n++) {
    if (!node_has_ranks(l, n)) continue;
    sb_printf(&b, "printf -v cmd '%%q ' env \"${env_args[@]}\" bash \"$dir/node-%zu.sh\"\n", n);
    sb_printf(&b, "\"$ssh\" %s \"$cmd\" &\n", lhost(l, (int32_t)n, hb));
  }
  if (l->router_port) {
    sb_puts(&b, "printf -v cmd '%q ' env \"${env_args[@]}\" bash \"$dir/router.sh\"\n");
    sb_printf(&b, "\"$ssh\" %s \"$cmd\" &\n", lhost(l, l->router_node, hb));
  }
  sb_puts(&b, launch_shared_fate);
  lscript(l, lfile(l, "launch.sh", true, -1), "starts every node's processes over ssh (SSH overrides the command)", &b);
  sb_free(&b);
}

/* job.sbatch: the nodes with ranks, one job step each, and the router. */
void emit_slurm(Launch *l) {
  StrBuf b;
  sb_init(&b);
  size_t used = 0;
  int32_t gpus = 0;
  for (size_t n = 0; n < l->p->nnodes; n++)
    if (node_has_ranks(l, n)) {
      used++;
      if (l->p->nodes[n].gpus > gpus) gpus = l->p->nodes[n].gpus;
    }
  sb_printf(&b, "#SBATCH --nodes=%zu\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=%d\n#SBATCH --exclusive\n",
            used, gpus);
  if (l->L->nhostnames) {
    sb_puts(&b, "#SBATCH --nodelist=");
    for (size_t n = 0, k = 0; n < l->p->nnodes; n++)
      if (node_has_ranks(l, n)) sb_printf(&b, "%s%s", k++ ? "," : "", l->L->hostnames[n]);
    sb_puts(&b, "\n");
  }
  sb_puts(&b, "set -euo pipefail\ndir=${RANKPLAN_DIR:-$SLURM_SUBMIT_DIR}\nexport RANKPLAN_LOG_DIR=${RANKPLAN_LOG_DIR:-$dir}\n");
  if (!l->L->nhostnames) {
    sb_puts(&b, "mapfile -t hosts < <(scontrol show hostnames \"$SLURM_JOB_NODELIST\")\n");
    for (size_t n = 0, k = 0; n < l->p->nnodes; n++)
      if (node_has_ranks(l, n)) sb_printf(&b, "export RANKPLAN_HOST_%zu=${hosts[%zu]}\n", n, k++);
  } else {
    for (size_t n = 0; n < l->p->nnodes; n++)
      if (node_has_ranks(l, n)) sb_printf(&b, "export RANKPLAN_HOST_%zu=%s\n", n, l->L->hostnames[n]);
  }
  for (size_t n = 0; n < l->p->nnodes; n++)
    if (node_has_ranks(l, n))
      sb_printf(&b, "srun --nodes=1 --ntasks=1 --nodelist=\"$RANKPLAN_HOST_%zu\" bash \"$dir/node-%zu.sh\" &\n", n, n);
  if (l->router_port)
    sb_printf(&b, "srun --nodes=1 --ntasks=1 --overlap --nodelist=\"$RANKPLAN_HOST_%d\" bash \"$dir/router.sh\" &\n",
              l->router_node);
  sb_puts(&b, launch_shared_fate);
  StrBuf *out = lfile(l, "job.sbatch", true, -1);
  sb_printf(out, "#!/bin/bash\n#SBATCH --job-name=rankplan-%.12s\n", l->p->spec_sha256);
  sb_printf(out, "# The plan's processes as one Slurm job (sbatch job.sbatch); written by rankplan from plan %.16s...\n",
            l->p->spec_sha256);
  sb_putn(out, b.buf, b.len);
  sb_free(&b);
}
