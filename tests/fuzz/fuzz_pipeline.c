/*
 * fuzz_pipeline.c: libFuzzer target for the whole compile pipeline on
 * parsed specs: parse, then every stage `rankplan check` and `compile` run
 * (validate, layout, hooks, placement, memory ledger, KV reshard maps,
 * estimates, emit), then the plan the compiler wrote is read back by the
 * loader, which must accept it: a plan the compiler writes and its own
 * loader refuses is a finding as much as a crash is. fuzz_spec stops at the
 * parser; overflow and sizing bugs live in the stages after it.
 *
 * Specs asking for more than FUZZ_MAX_GPUS GPUs are only parsed and
 * validated (compile_layout), not emitted: a plan of the documented
 * maximum size takes seconds to write, and the fuzzer would spend its time
 * in the writer rather than exploring inputs. The bound is on the
 * fuzzer's time, not on what rankplan accepts.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "compile.h"
#include "plan.h"
#include "rp_config.h"
#include "spec.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { FUZZ_MAX_GPUS = 512 };

static char plan_path[64];

static void run_compile(const Spec *s, Diags *d) {
  if (!plan_path[0]) snprintf(plan_path, sizeof plan_path, "/tmp/fuzz_pipeline.%ld.json", (long)getpid());
  char *what = NULL;
  int werr = 0;
  CompileOpts o = {plan_path, NULL, NULL};
  int rc = compile_spec_to_plan(s, &o, d, &what, &werr);
  free(what);
  if (rc != RP_EXIT_OK) {
    /* An error was reported exactly when the compile did not write. */
    if (rc == RP_EXIT_INPUT && !diags_failed(d)) abort();
    return;
  }
  char *err = NULL;
  Plan *p = plan_load(plan_path, NULL, &err);
  if (!p) {
    fprintf(stderr, "fuzz_pipeline: the loader refused the compiler's plan: %s\n", err);
    abort();
  }
  plan_free(p);
  unlink(plan_path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = fuzz_text(data, size);
  if (!text) return 0;
  Diags d;
  diags_init(&d);
  Spec *s = spec_parse(&d, "fuzz.yaml", text, size, RP_SOURCE_ROOT "/plans/catalog");
  if (s && !diags_failed(&d) && s->deployment.npools > 0) {
    int64_t gpus;
    if (ck_mul(s->hardware.nodes.v, s->hardware.gpus_per_node.v, &gpus) && gpus <= FUZZ_MAX_GPUS) {
      run_compile(s, &d);
    } else {
      Layout *L = compile_layout(s, &d);
      lay_free(L);
    }
  }
  spec_free(s);
  diags_free(&d);
  free(text);
  return 0;
}
