/*
 * test_procs.c: the processes of `rankrun PLAN --node N -- CMD` (procs.c)
 * on a plan shaped as tests/runtime/pd-small.yaml compiles: prefill TP2
 * on node 0 (ranks 0-1, devices 0-1), decode TP4 across node 0 (ranks
 * 2-3, devices 2-3) and node 1 (ranks 4-5, devices 0-1). Each mode's
 * process list and torchrun names, the environment (the launcher's names
 * replaced, --env last), and argument templates with their errors.
 */
#include <string.h>

#include "procs.h"
#include "t.h"

static Plan pd_plan(PlanRank ranks[6], PlanPool pools[2], PlanNode nodes[2],
                    int32_t node_ranks[6]) {
  Plan p;
  memset(&p, 0, sizeof p);
  static char pre[] = "prefill", dec[] = "decode";
  pools[0] = (PlanPool){.name = pre, .role = pre, .replicas = 1, .first_rank = 0, .nranks = 2};
  pools[1] = (PlanPool){.name = dec, .role = dec, .replicas = 1, .first_rank = 2, .nranks = 4};
  for (int r = 0; r < 6; r++) {
    memset(&ranks[r], 0, sizeof ranks[r]);
    ranks[r].rank = r;
    ranks[r].node = r < 4 ? 0 : 1;
    ranks[r].local_rank = r < 4 ? r : r - 4;
    ranks[r].device = ranks[r].local_rank;
    ranks[r].pool = r < 2 ? 0 : 1;
    ranks[r].coords[CO_TP] = r < 2 ? r : r - 2;
    node_ranks[r] = r;
  }
  nodes[0] = (PlanNode){0, 4, 0, 4};
  nodes[1] = (PlanNode){1, 4, 4, 2};
  p.world_size = p.nranks = 6;
  p.ranks = ranks;
  p.npools = 2;
  p.pools = pools;
  p.nnodes = 2;
  p.nodes = nodes;
  p.node_ranks = node_ranks;
  return p;
}

static void test_modes(const Plan *pl) {
  RtProcSpec *ps;
  int n = rt_procs_of_node(pl, 1, RT_PER_RANK, &ps);
  T_EQ_INT(n, 2);
  /* rank 5: decode rank 3 of 4, the second of two on node 1, node 1 is
   * the decode instance's second node */
  T_EQ_STR(ps[1].label, "1/5");
  T_EQ_INT(ps[1].rank, 3);
  T_EQ_INT(ps[1].world_size, 4);
  T_EQ_INT(ps[1].local_rank, 1);
  T_EQ_INT(ps[1].local_world_size, 2);
  T_EQ_INT(ps[1].group_rank, 1);
  T_EQ_INT(ps[1].leader_node, 0);
  T_EQ_STR(ps[1].devices, "1");
  rt_procs_free(ps, n);
  n = rt_procs_of_node(pl, 0, RT_PER_INSTANCE, &ps);
  T_EQ_INT(n, 2);
  T_EQ_STR(ps[1].label, "0/decode.0");
  T_EQ_INT(ps[1].nranks, 2);
  T_EQ_STR(ps[1].devices, "2,3");
  T_EQ_INT(ps[1].world_size, 2); /* the decode instance spans 2 nodes */
  T_EQ_INT(ps[0].world_size, 1);
  rt_procs_free(ps, n);
  n = rt_procs_of_node(pl, 0, RT_PER_NODE, &ps);
  T_EQ_INT(n, 1);
  T_EQ_STR(ps[0].label, "0");
  T_EQ_STR(ps[0].devices, "0,1,2,3");
  T_EQ_INT(ps[0].pool, -1);
  rt_procs_free(ps, n);
}

static const char *env_get(char **env, const char *name) {
  size_t n = strlen(name);
  for (size_t i = 0; env[i]; i++)
    if (strncmp(env[i], name, n) == 0 && env[i][n] == '=') return env[i] + n + 1;
  return NULL;
}

static void test_env(const Plan *pl) {
  RtProcSpec *ps;
  int n = rt_procs_of_node(pl, 0, RT_PER_NODE, &ps);
  static char b0[] = "RANK=99", b1[] = "RANKPLAN_POOL=stale", b2[] = "FOO=1",
              b3[] = "CUDA_VISIBLE_DEVICES=7", e0[] = "FOO=2", e1[] = "BAR=a=b";
  char *base[] = {b0, b1, b2, b3, NULL}, *extra[] = {e0, e1};
  RtProcEnvCtx c = {pl, "/p.json", 0, RT_PER_NODE, "127.0.0.1:1", "host", "0123456789abcdef",
                    30, 42, extra, 2};
  char **env = rt_proc_env(&c, &ps[0], base);
  T_EQ_STR(env_get(env, "RANK"), "0");
  T_EQ_STR(env_get(env, "WORLD_SIZE"), "2");
  T_EQ_STR(env_get(env, "CUDA_VISIBLE_DEVICES"), "0,1,2,3");
  T_CHECK(env_get(env, "RANKPLAN_POOL") == NULL);
  T_EQ_STR(env_get(env, "FOO"), "2");
  T_EQ_STR(env_get(env, "BAR"), "a=b");
  T_EQ_STR(env_get(env, "RANKPLAN_RANKS"), "0,1,2,3");
  rt_strv_free(env);
  rt_procs_free(ps, n);
}

static void test_templates(const Plan *pl) {
  RtProcSpec *ps;
  int n = rt_procs_of_node(pl, 0, RT_PER_RANK, &ps);
  ps[3].port = 4242;
  char *bad = NULL;
  char *x = rt_template_expand("{pool}:{instance_rank}/{world_size}@{port} {tp} {{x}}", pl, &ps[3], 0, &bad);
  T_EQ_STR(x, "decode:1/4@4242 1 {x}");
  free(x);
  T_CHECK(rt_template_expand("{nope}", pl, &ps[3], 0, &bad) == NULL && strstr(bad, "unknown template `{nope}`"));
  free(bad);
  T_CHECK(rt_template_expand("{rank", pl, &ps[3], 0, &bad) == NULL && strstr(bad, "unclosed"));
  free(bad);
  rt_procs_free(ps, n);
  n = rt_procs_of_node(pl, 0, RT_PER_NODE, &ps);
  T_CHECK(rt_template_expand("{role}", pl, &ps[0], 0, &bad) == NULL && strstr(bad, "per-node"));
  free(bad);
  x = rt_template_expand("{node}/{nnodes} {devices}", pl, &ps[0], 0, &bad);
  T_EQ_STR(x, "0/2 0,1,2,3");
  free(x);
  rt_procs_free(ps, n);
  RtPer per;
  T_CHECK(rt_per_parse("instance", &per) && per == RT_PER_INSTANCE && !rt_per_parse("pod", &per));
}

int main(void) {
  PlanRank ranks[6];
  PlanPool pools[2];
  PlanNode nodes[2];
  int32_t node_ranks[6];
  Plan pl = pd_plan(ranks, pools, nodes, node_ranks);
  test_modes(&pl);
  test_env(&pl);
  test_templates(&pl);
  printf("%d checks, %d failed\n", t_checks, t_failures);
  return t_failures ? 1 : 0;
}
