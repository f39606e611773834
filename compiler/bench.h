/*
 * bench.h: the result files of serving benchmark tools, read as load points
 * for `rankplan calibrate` (docs/cost-model.md, "Calibration").
 *
 * Input: files written by `vllm bench serve --save-result` (one JSON object,
 * or one per line with --append-result), SGLang's `python -m
 * sglang.bench_serving` (JSON Lines, one record per run) and AIPerf's
 * profile_export_aiperf.json (one object in the layout GenAI-Perf used).
 * The tool is recognised by the keys its writer always emits
 * (tests/calibrate/fixtures/README.md cites each writer).
 * Output: one BenchPoint per run: the offered load (request rate or
 * concurrency), the mean input and output lengths, and the measured mean
 * TTFT, TPOT and output throughput, in seconds and tokens/s.
 * Invariants: every file is untrusted. A missing field, a wrong type, a
 * non-finite or out-of-range number is E0563 naming the file, the record
 * and the JSON field path; nothing is guessed or defaulted.
 */
#ifndef RANKPLAN_BENCH_H
#define RANKPLAN_BENCH_H

#include "spec.h"

typedef enum { BENCH_VLLM, BENCH_SGLANG, BENCH_AIPERF } BenchTool;

/* The tool's name as the output prints it. */
const char *bench_tool_name(BenchTool t);

typedef struct {
  SrcLoc loc;          /* the file, and the record's line in a JSON Lines file */
  int record;          /* 1-based run number within the file */
  BenchTool tool;
  char *model;         /* the model id the run names; NULL when the format has none */
  const char *model_field; /* its JSON field path */
  double rate;         /* offered req/s; 0: none (requests sent as fast as allowed) */
  int64_t concurrency; /* most requests in flight; 0: none */
  int64_t tin, tout;   /* mean input and output tokens per request, rounded */
  int64_t completed;   /* requests that completed */
  double duration;     /* s */
  double ttft, tpot;   /* s, means over the completed requests */
  double tok_s;        /* output tokens/s */
  const char *tpot_field; /* the field TPOT came from */
} BenchPoint;

typedef struct {
  BenchPoint *items;
  size_t len, cap;
} BenchPoints;

/* Reads every run of one result file into pts. Problems are E0560 (cannot
 * read; *unreadable set), E0561 (syntax), E0562 (no known tool's layout),
 * E0563 (a field), E0565 (no steady load: neither a finite rate nor a
 * concurrency). Returns false on any error. */
bool bench_read_file(Diags *d, const char *path, BenchPoints *pts, bool *unreadable);
/* The same on a file's contents already read (raw, len bytes; `path` names
 * it in the diagnostics), for callers that hold the text. */
bool bench_read_text(Diags *d, const char *path, const char *raw, size_t len, BenchPoints *pts);

/* Whether the run's model id names the spec's model: the id (or its last
 * path component), compared without case, equals `model.source` (or its last
 * component) when the spec gives one; else the model's name or preset,
 * possibly followed by a `-` suffix (`-Instruct`). Runs without a model id
 * match. */
bool bench_model_matches(const BenchPoint *p, const ModelSpec *ms);

void bench_points_free(BenchPoints *pts);

#endif
