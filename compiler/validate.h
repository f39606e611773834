/*
 * validate.h: the model, memory and topology rules `rankplan check` (and
 * every later stage) runs once parse succeeded.
 *
 * Input: a Spec without parse errors. Output: diagnostics only (codes
 * E0200-E0299, W0200-W0299, N0200-N0299 of codes_model.def); the Spec is
 * not changed. Every rule reports every violation it finds (collect all,
 * report once), with a message that names the numbers and a help line;
 * divisibility errors list the valid choices within the hardware.
 */
#ifndef RANKPLAN_VALIDATE_H
#define RANKPLAN_VALIDATE_H

#include "memory.h"

/* Runs every rule on every pool. Pools in MODE_SEARCH specs without pools
 * are skipped (only the model-level checks run). */
void validate_spec(Diags *d, const Spec *s);

/* Runs the rules for one pool (what validate_spec does per pool); the
 * search stage calls it on candidate layouts with a scratch Diags. */
void validate_pool(Diags *d, const Spec *s, const PoolSpec *p);

#endif
