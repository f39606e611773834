/*
 * bench.c: reads the result files of vLLM's `bench serve`, SGLang's
 * `bench_serving` and AIPerf (bench.h). Field names and units are the
 * writers' own; tests/calibrate/fixtures/README.md cites the source file
 * and commit of each.
 *
 * Input: a file of one or more JSON objects (one document, or JSON Lines).
 * Output: BenchPoints. Invariants: every value is checked (type, finite,
 * range) before use; each problem is one diagnostic naming the file, the
 * record and the field path.
 */
#include "bench.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "json_pos.h"

/* Result files with per-request details (`--save-detailed`,
 * `--output-details`) hold every prompt's timings; 256 MiB bounds them. */
#define BENCH_MAX_BYTES (256u << 20)

const char *bench_tool_name(BenchTool t) {
  switch (t) {
  case BENCH_VLLM: return "vllm";
  case BENCH_SGLANG: return "sglang";
  case BENCH_AIPERF: return "aiperf";
  }
  return "?";
}

/* The file as read, where a field's diagnostic finds the field. */
typedef struct {
  const char *text;
  size_t len;
} Raw;

/* One record being read: where it is (loc, and at in the raw text, the
 * start of loc's line), and whether it is still good. */
typedef struct {
  Diags *d;
  SrcLoc loc;
  int record;
  json_t *root;
  bool ok;
  Raw raw;
  size_t at;
} Rd;

/* A field's diagnostic points at its key, or at the record when the key
 * is absent. A record that shares its line with another may be matched
 * to the line's first one. */
static void rd_fail(Rd *r, const char *path, const char *what, const char *help) {
  SrcLoc at = json_pos(r->raw.text, r->raw.len, r->at, (SrcLoc){r->loc.file, r->loc.line, 1}, path, r->loc);
  Diag *g = diag_at(r->d, DIAG_E0563, at, "benchmark file `%s`, run %d: field `%s` %s",
                    r->loc.file, r->record, path, what);
  if (help) diag_help(g, "%s", help);
  r->ok = false;
}

/* The value at dotted path `path` (`input_config.loadgen.concurrency`);
 * NULL when a part is absent or null, or a parent is not an object. */
static json_t *rd_get(json_t *root, const char *path) {
  char buf[128];
  size_t n = strlen(path);
  if (n >= sizeof buf) rp_internal("bench: field path too long: %s", path);
  memcpy(buf, path, n + 1);
  json_t *v = root;
  for (char *part = buf, *dot; part; part = dot ? dot + 1 : NULL) {
    dot = strchr(part, '.');
    if (dot) *dot = '\0';
    if (!json_is_object(v)) return NULL;
    v = json_object_get(v, part);
  }
  return json_is_null(v) ? NULL : v;
}

static const char *json_kind(const json_t *v) {
  if (json_is_string(v)) return "a string";
  if (json_is_object(v)) return "an object";
  if (json_is_array(v)) return "an array";
  return json_is_boolean(v) ? "a boolean" : "a number";
}

/* Python's json module writes NaN and infinities as these bare words;
 * bench__clean turns them into strings, read here as non-finite. */
static bool rd_nonfinite_word(const json_t *v) {
  if (!json_is_string(v)) return false;
  const char *s = json_string_value(v);
  return strcmp(s, "NaN") == 0 || strcmp(s, "Infinity") == 0 || strcmp(s, "-Infinity") == 0;
}

/* The number at path, inside [lo, hi]. Absent: an error when required;
 * returns false and leaves *out as it is either way. */
static bool rd_num(Rd *r, const char *path, double lo, double hi, bool required, double *out) {
  json_t *v = rd_get(r->root, path);
  if (!v) {
    if (required)
      rd_fail(r, path, "is missing", "the tool writes it with its default metrics (vLLM: ttft and tpot in "
                                     "--percentile-metrics); pass the file it wrote, unchanged");
    return false;
  }
  if (rd_nonfinite_word(v)) {
    char what[64];
    snprintf(what, sizeof what, "is not a finite number (%s)", json_string_value(v));
    rd_fail(r, path, what, "a run that failed leaves NaN figures; drop it from --bench");
    return false;
  }
  if (!json_is_number(v)) {
    char what[64];
    snprintf(what, sizeof what, "must be a number, got %s", json_kind(v));
    rd_fail(r, path, what, NULL);
    return false;
  }
  double x = json_number_value(v);
  if (!(x >= lo && x <= hi)) {
    char what[128];
    snprintf(what, sizeof what, "is out of range: expected %g to %g, got %g", lo, hi, x);
    rd_fail(r, path, what, NULL);
    return false;
  }
  *out = x;
  return true;
}

/* An AIPerf metric object {"unit": ..., "avg": ...}: its average, in the
 * unit the writer uses for it. */
static bool rd_metric(Rd *r, const char *metric, const char *unit, double lo, double hi,
                      double *out) {
  char path[96];
  snprintf(path, sizeof path, "%s.unit", metric);
  json_t *u = rd_get(r->root, path);
  if (!json_is_string(u) || strcmp(json_string_value(u), unit) != 0) {
    char what[128];
    snprintf(what, sizeof what, "must be \"%s\", got %s", unit,
             json_is_string(u) ? json_string_value(u) : u ? json_kind(u) : "nothing");
    rd_fail(r, path, what, NULL);
    return false;
  }
  snprintf(path, sizeof path, "%s.avg", metric);
  return rd_num(r, path, lo, hi, true, out);
}

/* The request rate: a positive number, or the tool's word for "no limit"
 * (vLLM writes "inf", SGLang's json.dumps Infinity). */
static void rd_rate(Rd *r, const char *path, bool required, double *rate) {
  json_t *v = rd_get(r->root, path);
  *rate = 0;
  if (!v && !required) return;
  if (v && json_is_string(v)) {
    const char *s = json_string_value(v);
    if (strcmp(s, "inf") == 0 || strcmp(s, "Infinity") == 0) return;
  }
  rd_num(r, path, 1e-9, 1e12, true, rate);
}

static void rd_model(Rd *r, json_t *v, const char *path, BenchPoint *p) {
  if (!json_is_string(v) || !*json_string_value(v)) {
    rd_fail(r, path, v ? "must be a non-empty string" : "is missing", NULL);
    return;
  }
  p->model = rp_strdup(json_string_value(v));
  p->model_field = path;
}

/* Mean tokens per request: total / completed, rounded. */
static int64_t rd_mean_tokens(double total, int64_t completed) {
  return (int64_t)llround(total / (double)completed);
}

/* vLLM and SGLang write the same names for what calibration reads
 * (SGLang's script started as a copy of vLLM's). */
static void bench__vllm_sglang(Rd *r, BenchPoint *p) {
  if (p->tool == BENCH_VLLM) rd_model(r, rd_get(r->root, "model_id"), "model_id", p);
  rd_rate(r, "request_rate", true, &p->rate);
  double conc = 0, comp = 0, tin = 0, tout = 0, ttft = 0, tpot = 0;
  if (rd_num(r, "max_concurrency", 1, 1e9, false, &conc)) p->concurrency = (int64_t)conc;
  rd_num(r, "completed", 1, 1e12, true, &comp);
  rd_num(r, "duration", 1e-9, 1e12, true, &p->duration);
  rd_num(r, "total_input_tokens", 1, 1e15, true, &tin);
  rd_num(r, "total_output_tokens", 1, 1e15, true, &tout);
  rd_num(r, "output_throughput", 1e-9, 1e12, true, &p->tok_s);
  rd_num(r, "mean_ttft_ms", 1e-9, 1e12, true, &ttft);
  rd_num(r, "mean_tpot_ms", 1e-9, 1e12, true, &tpot);
  p->tpot_field = "mean_tpot_ms";
  if (!r->ok) return;
  p->completed = (int64_t)comp;
  p->tin = rd_mean_tokens(tin, p->completed);
  p->tout = rd_mean_tokens(tout, p->completed);
  p->ttft = ttft / 1e3;
  p->tpot = tpot / 1e3;
}

/* AIPerf's profile_export_aiperf.json: metrics in display units (ms,
 * sec, tokens/sec), the user's configuration under input_config. */
static void bench__aiperf(Rd *r, BenchPoint *p) {
  json_t *names = rd_get(r->root, "input_config.endpoint.model_names");
  if (names && !json_is_array(names)) rd_fail(r, "input_config.endpoint.model_names", "must be an array", NULL);
  else rd_model(r, names ? json_array_get(names, 0) : NULL, "input_config.endpoint.model_names[0]", p);
  rd_rate(r, "input_config.loadgen.request_rate", false, &p->rate);
  double conc = 0, comp = 0, tin = 0, tout = 0, ttft = 0, itl = 0;
  if (rd_num(r, "input_config.loadgen.concurrency", 1, 1e9, false, &conc)) p->concurrency = (int64_t)conc;
  rd_metric(r, "request_count", "requests", 1, 1e12, &comp);
  rd_metric(r, "benchmark_duration", "sec", 1e-9, 1e12, &p->duration);
  rd_metric(r, "input_sequence_length", "tokens", 0.5, 1e9, &tin);
  rd_metric(r, "output_sequence_length", "tokens", 0.5, 1e9, &tout);
  rd_metric(r, "output_token_throughput", "tokens/sec", 1e-9, 1e12, &p->tok_s);
  rd_metric(r, "time_to_first_token", "ms", 1e-9, 1e12, &ttft);
  rd_metric(r, "inter_token_latency", "ms", 1e-9, 1e12, &itl);
  p->tpot_field = "inter_token_latency.avg";
  if (!r->ok) return;
  p->completed = (int64_t)llround(comp);
  p->tin = (int64_t)llround(tin);
  p->tout = (int64_t)llround(tout);
  p->ttft = ttft / 1e3;
  p->tpot = itl / 1e3;
}

/* GenAI-Perf's profile_export_genai_perf.json: its input_config is the
 * command line (`model`, `concurrency`, `request_rate`: genai_perf/
 * parser.py), and it records no request count or duration. */
static bool bench__genai_perf(Rd *r) {
  json_t *ic = json_object_get(r->root, "input_config");
  if (!json_is_object(ic) || !json_object_get(ic, "model") || json_object_get(ic, "endpoint")) return false;
  Diag *g = diag_at(r->d, DIAG_E0562, r->loc,
                    "benchmark file `%s`, run %d: a GenAI-Perf export (`input_config.model`), "
                    "which calibration does not read", r->loc.file, r->record);
  diag_help(g, "it records neither the completed requests nor the duration; rerun with AIPerf, "
               "which writes profile_export_aiperf.json");
  return true;
}

/* Which tool wrote the record, by keys its writer always emits. */
static bool bench__detect(Rd *r, BenchTool *t) {
  json_t *o = r->root;
  if (bench__genai_perf(r)) return false;
  if (json_object_get(o, "input_config") || json_object_get(o, "time_to_first_token")) *t = BENCH_AIPERF;
  else if (json_object_get(o, "model_id") && json_object_get(o, "num_prompts")) *t = BENCH_VLLM;
  else if (json_object_get(o, "dataset_name") && json_object_get(o, "random_range_ratio")) *t = BENCH_SGLANG;
  else {
    Diag *g = diag_at(r->d, DIAG_E0562, r->loc,
                      "benchmark file `%s`, run %d: not a result of vllm bench serve, "
                      "sglang.bench_serving or aiperf", r->loc.file, r->record);
    diag_help(g, "expected `model_id` and `num_prompts` (vLLM --save-result), `dataset_name` and "
                 "`random_range_ratio` (SGLang --output-file) or `input_config` "
                 "(AIPerf profile_export_aiperf.json)");
    return false;
  }
  return true;
}

static bool bench__record(Diags *d, SrcLoc loc, int record, json_t *doc, Raw raw, size_t at, BenchPoints *pts) {
  Rd r = {d, loc, record, doc, true, raw, at};
  if (!json_is_object(doc)) {
    diag_at(d, DIAG_E0562, loc, "benchmark file `%s`, run %d: expected a JSON object, got %s",
            loc.file, record, json_kind(doc));
    return false;
  }
  BenchPoint p = {.loc = loc, .record = record};
  if (!bench__detect(&r, &p.tool)) return false;
  if (p.tool == BENCH_AIPERF) bench__aiperf(&r, &p);
  else bench__vllm_sglang(&r, &p);
  if (r.ok && !(p.rate > 0) && p.concurrency < 1) {
    Diag *g = diag_at(d, DIAG_E0565, loc,
                      "benchmark file `%s`, run %d: no steady load: the run has neither a finite "
                      "request rate nor a maximum concurrency", loc.file, record);
    diag_help(g, "a run that sends every request at once measures a burst, not a load the "
                 "cost model describes; rerun with --request-rate or --max-concurrency");
    r.ok = false;
  }
  if (!r.ok) {
    free(p.model);
    return false;
  }
  rp_vec_push(pts, p);
  return true;
}

/* Python's json module writes NaN, Infinity and -Infinity as bare words
 * (SGLang's default request rate is infinite), which JSON does not allow:
 * outside strings they become the strings "NaN", "Infinity", "-Infinity",
 * so the reader can name the field. Lines stay where they were. */
static char *bench__clean(const char *in, size_t n, size_t *outlen) {
  static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
  StrBuf sb;
  sb_init(&sb);
  bool str = false;
  for (size_t i = 0; i < n; i++) {
    char c = in[i];
    if (str) {
      if (c == '\\' && i + 1 < n) sb_putc(&sb, in[i++]), c = in[i];
      else if (c == '"') str = false;
      sb_putc(&sb, c);
      continue;
    }
    if (c == '"') str = true;
    bool word = false;
    for (size_t w = 0; w < RP_ARRAY_LEN(words) && !word; w++) {
      size_t wl = strlen(words[w]);
      if (n - i >= wl && memcmp(in + i, words[w], wl) == 0 &&
          (i + wl == n || !isalnum((unsigned char)in[i + wl])) &&
          (i == 0 || !isalnum((unsigned char)in[i - 1]))) {
        sb_printf(&sb, "\"%s\"", words[w]);
        i += wl - 1;
        word = true;
      }
    }
    if (!word) sb_putc(&sb, c);
  }
  *outlen = sb.len;
  return sb_take(&sb);
}

static int count_lines(const char *s, size_t n) {
  int k = 0;
  for (size_t i = 0; i < n; i++) k += s[i] == '\n';
  return k;
}

/* Moves *at, the start of line *line of raw, on to the start of line
 * `line` (the cleaned text keeps raw's lines). */
static void raw_seek(Raw raw, int line, int *at_line, size_t *at) {
  while (*at_line < line && *at < raw.len)
    if (raw.text[(*at)++] == '\n') ++*at_line;
}

/* Each JSON object of the text in turn (one document, or one per line).
 * raw (the file as read) is shown under a syntax error; a field's
 * diagnostic gives the field's line and column without showing the line
 * (a line can be megabytes). */
static bool bench__docs(Diags *d, const char *file, Raw raw, const char *text, size_t len, BenchPoints *pts) {
  size_t off = 0, raw_at = 0;
  int line = 1, raw_line = 1, record = 0;
  bool ok = true;
  for (;;) {
    while (off < len && isspace((unsigned char)text[off])) line += text[off++] == '\n';
    if (off == len) break;
    json_error_t je;
    json_t *doc = json_loadb(text + off, len - off, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
    if (!doc) {
      diags_add_source(d, file, raw.text, raw.len);
      Diag *g = diag_at(d, DIAG_E0561, (SrcLoc){file, line + (je.line > 0 ? je.line - 1 : 0),
                                                 je.column > 0 ? je.column : 1},
                        "benchmark file `%s` is not valid JSON: %s", file, je.text);
      diag_help(g, "pass the file the tool wrote: one JSON object, or one per line");
      return false;
    }
    raw_seek(raw, line, &raw_line, &raw_at);
    ok &= bench__record(d, (SrcLoc){file, line, 1}, ++record, doc, raw, raw_at, pts);
    json_decref(doc);
    line += count_lines(text + off, je.position);
    off += je.position;
  }
  if (record == 0) {
    diag_at(d, DIAG_E0561, (SrcLoc){file, 0, 0}, "benchmark file `%s` holds no JSON object", file);
    return false;
  }
  return ok;
}

bool bench_read_text(Diags *d, const char *path, const char *raw, size_t len, BenchPoints *pts) {
  const char *file = diags_intern(d, path);
  size_t n = 0;
  char *text = bench__clean(raw, len, &n);
  bool ok = bench__docs(d, file, (Raw){raw, len}, text, n, pts);
  free(text);
  return ok;
}

bool bench_read_file(Diags *d, const char *path, BenchPoints *pts, bool *unreadable) {
  char *raw = NULL;
  size_t len = 0;
  *unreadable = false;
  int err = rp_read_file(path, BENCH_MAX_BYTES, &raw, &len);
  if (err) {
    Diag *g = diag_at(d, DIAG_E0560, (SrcLoc){diags_intern(d, path), 0, 0},
                      "cannot read benchmark file `%s`: %s", path, rp_strerror(err));
    diag_help(g, "pass the result file of vllm bench serve --save-result, "
                 "sglang.bench_serving --output-file or aiperf (profile_export_aiperf.json)");
    *unreadable = true;
    return false;
  }
  bool ok = bench_read_text(d, path, raw, len, pts);
  free(raw);
  return ok;
}

/* The last path component of a model id or path. */
static const char *base_name(const char *s) {
  const char *slash = strrchr(s, '/');
  return slash && slash[1] ? slash + 1 : s;
}

/* a equals b, or a is b followed by `-` and more, without case. */
static bool same_or_variant(const char *a, const char *b) {
  size_t n = strlen(b);
  return n > 0 && strncasecmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '-');
}

bool bench_model_matches(const BenchPoint *p, const ModelSpec *ms) {
  if (!p->model) return true;
  const char *run = base_name(p->model);
  /* a preset's checkpoint is a default: runs of its variants (an
   * -Instruct) match it, as they match the name below */
  if (ms->source.set && ms->source.v && ms->source_preset)
    return same_or_variant(run, base_name(ms->source.v));
  if (ms->source.set && ms->source.v)
    return strcasecmp(p->model, ms->source.v) == 0 || strcasecmp(run, base_name(ms->source.v)) == 0;
  return (ms->name.set && ms->name.v && same_or_variant(run, ms->name.v)) ||
         (ms->preset.set && ms->preset.v && same_or_variant(run, ms->preset.v));
}

void bench_points_free(BenchPoints *pts) {
  for (size_t i = 0; i < pts->len; i++) free(pts->items[i].model);
  free(pts->items);
  pts->items = NULL;
  pts->len = pts->cap = 0;
}
