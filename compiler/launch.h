/*
 * launch.h: the plan's `launch` key (docs/plan.md), written by the compile
 * when the spec names an engine, and the launch targets that turn a plan
 * into files (`rankplan emit`, `compile --emit`; docs/engines.md).
 *
 * Layering: launch_key.c is a compiler stage (it reads the Spec); the
 * emitters (emit_*.c) read only the loaded Plan (plan.h) and the engine's
 * catalog entry (engines.h), so a plan file is all a launch target needs.
 */
#ifndef RANKPLAN_LAUNCH_H
#define RANKPLAN_LAUNCH_H

#include "engines.h"
#include "plan.h"

struct Layout;

/* Appends `  "launch": {...},\n` for a spec whose engine is not generic;
 * nothing for the generic engine. The engine's catalog entry was checked
 * by engine_check; its version name is what the plan records. */
void launch_key_emit(StrBuf *sb, const Spec *s, const struct Layout *L);

/* The targets of `rankplan emit`. */
typedef enum { LT_VLLM, LT_SGLANG, LT_TRTLLM, LT_SHELL, LT_SLURM, LT_K8S, LT_DYNAMO, LT__COUNT } LaunchTarget;
const char *launch_target_name(LaunchTarget t);
bool launch_target_parse(const char *s, LaunchTarget *out);
/* The targets' names joined by ", " (for usage and help text). */
const char *launch_target_list(void);

/* Writes the files of target t for plan p into directory dir, atomically
 * (docs/engines.md, "Output directory"). catalog_dir: where engine entries
 * are (NULL: the default). Returns 0, or an exit code after printing one
 * message naming the problem to err: RP_EXIT_INPUT when the plan cannot
 * give what the target needs (no `launch` key, another engine's target, an
 * instance layout the engine's launcher cannot express), RP_EXIT_USAGE when
 * dir cannot be written. */
int launch_emit(const Plan *p, LaunchTarget t, const char *dir, const char *catalog_dir, FILE *err);
/* The same, adding plan.json with the plan's text (compile --emit). */
int launch_emit_with_plan(const Plan *p, LaunchTarget t, const char *dir, const char *catalog_dir, FILE *err,
                          const char *plan_text, size_t plan_len);

/* Why the spec cannot be emitted as target t (E0708), or NULL: the checks
 * `compile --emit` runs before compiling. */
const char *launch_spec_lacks(const Spec *s, LaunchTarget t);

#endif
