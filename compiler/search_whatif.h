/*
 * search_whatif.h: `rankplan search --what-if KEY=V1,V2,...`, one search per
 * value of one hardware choice, summarised as one table row each.
 *
 * Input: the spec's path (it is parsed again per GPU type), the cost
 * constants and the search options. Output: a text table or a JSON
 * document ("rankplan.search-what-if/1") with, per value, the winner under
 * the options' sort key (its layout, GPUs, load served, goodput per used
 * and per budget GPU, TTFT, TPOT), or the code of the error that left that
 * value without one (E0500: no layout meets the SLOs). Deterministic: rows
 * in the order given.
 */
#ifndef RANKPLAN_SEARCH_WHATIF_H
#define RANKPLAN_SEARCH_WHATIF_H

#include "search.h"

typedef enum { WHATIF_GPU, WHATIF_NODES } WhatIfKey;

typedef struct {
  WhatIfKey key;
  size_t n;
  char **vals;  /* gpu: catalog hardware entries; nodes: counts (validated) */
} WhatIf;

/* Parses "gpu=h100-sxm,h200-sxm" or "nodes=2,4,8". On error returns false
 * with *err (caller frees) saying why. */
bool search_what_if_parse(const char *arg, WhatIf *w, char **err);
void search_what_if_free(WhatIf *w);

/* Runs the searches and renders the table into *text (caller frees).
 * Diagnostics of a spec that does not parse with a value go to d; returns
 * false then (*text NULL). */
bool search_what_if_run(Diags *d, const WhatIf *w, const char *path, const char *catalog,
                        const CostConsts *k, const SearchOptions *o, bool json, char **text);

#endif
