/*
 * fuzz_plan_mutate.c: libFuzzer target for the loader's consistency checks
 * (plan_load.c, "the compiler's guarantees"). Raw bytes rarely get past the
 * JSON reader and the key checks (fuzz_plan covers those); here the input is
 * a list of edits to the numbers of a valid compiled plan, so every input is
 * well-formed JSON with every key in place, and what varies is what the
 * consistency checks must catch: a bytes_per_token halved, a rank moved, a
 * layer range widened, an expert id out of range, a count made huge.
 *
 * Input: byte 0 picks one of the base plans (plans/examples/NAME.plan.json up
 * to 256 KiB, and the KV-transfer specs of tests/runtime compiled in-process,
 * whose maps have token ranges, dcp strides, pp stages, replicated heads and
 * MLA; made once); then each 6-byte record is one edit: 3 bytes pick
 * the number (its index among the plan's numbers, modulo their count), 1 byte
 * the operation, 2 bytes an operand. A mutated plan must load or be refused
 * with one message; one that loads must satisfy plan_invariants.h, including
 * that every kv_reshard pair moves exactly the bytes its decode replica
 * holds, and print in every explain view.
 *
 * FUZZ_PLAN_MUTATE_WRITE=FILE writes the mutated plan to FILE (to replay an
 * input with `rankplan explain FILE`).
 */
#include <dirent.h>

#include "compile.h"
#include "outfile.h"
#include "plan_invariants.h"
#include "rp_config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_BASES = 20, MAX_BASE_BYTES = 256 << 10 };

/* A base plan and where its numbers are: offset and length of each. */
typedef struct {
  char *text;
  size_t len, n;
  size_t *at, *width;
} Base;

static Base bases[MAX_BASES];
static size_t nbases;

/* Records every number outside a string. */
static void index_numbers(Base *b) {
  b->at = malloc(b->len * sizeof *b->at);
  b->width = malloc(b->len * sizeof *b->width);
  if (!b->at || !b->width) abort();
  bool in_str = false;
  for (size_t i = 0; i < b->len; i++) {
    char c = b->text[i];
    if (in_str) {
      if (c == '\\') i++;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') {
      in_str = true;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t j = i + 1;
      while (j < b->len && strchr("0123456789.eE+-", b->text[j])) j++;
      b->at[b->n] = i;
      b->width[b->n++] = j - i;
      i = j - 1;
    }
  }
}

/* Makes text a base plan: it must load as it is. */
static void add_base(const char *name, char *text, size_t len) {
  char *err = NULL;
  Plan *p = plan_load_mem(name, text, len, NULL, &err);
  if (!p) {
    fprintf(stderr, "fuzz_plan_mutate: the base plan %s does not load: %s\n", name, err);
    abort();
  }
  plan_free(p);
  Base *b = &bases[nbases++];
  b->text = text;
  b->len = len;
  index_numbers(b);
}

/* The runtime tests' KV-transfer specs compiled in-process: their maps have
 * what the example plans lack (token ranges of prefill cp, dcp strides, pp
 * stages, replicated heads, MLA). */
static void compile_base(const char *spec) {
  char *path = rp_sprintf("%s/tests/runtime/%s", RP_SOURCE_ROOT, spec), *text;
  size_t len;
  Diags d;
  diags_init(&d);
  if (rp_read_file(path, MAX_BASE_BYTES, &text, &len) != 0) abort();
  Spec *s = spec_parse(&d, path, text, len, RP_SOURCE_ROOT "/plans/catalog");
  Layout *L = s && !diags_failed(&d) ? compile_layout(s, &d) : NULL;
  if (!L) abort();
  char *plan = emit_plan(&d, s, L, NULL, -1, &len);
  add_base(path, plan, len);
  lay_free(L);
  spec_free(s);
  diags_free(&d);
  free(text);
  free(path);
}

static void load_bases(void) {
  const char *dir = RP_SOURCE_ROOT "/plans/examples";
  DIR *d = opendir(dir);
  if (!d) abort();
  struct dirent *e;
  while ((e = readdir(d)) && nbases < MAX_BASES) {
    size_t l = strlen(e->d_name);
    if (l < 10 || strcmp(e->d_name + l - 10, ".plan.json") != 0) continue;
    char *path = rp_sprintf("%s/%s", dir, e->d_name), *text;
    size_t len;
    if (rp_read_file(path, MAX_BASE_BYTES, &text, &len) == 0) add_base(path, text, len);
    free(path);
  }
  closedir(d);
  static const char *const specs[] = {"kv-cp-to-dcp.yaml", "kv-pp-to-pp1.yaml", "kv-replicated.yaml",
                                      "kv-mla-dp.yaml"};
  for (size_t i = 0; i < RP_ARRAY_LEN(specs) && nbases < MAX_BASES; i++) compile_base(specs[i]);
  if (nbases == 0) abort();
}

/* The new value of a number: op picks the change, v is the operand, other
 * the value of another number of the plan. Arithmetic wraps (unsigned), so
 * an edit of a large number is a large number, not undefined behaviour. */
static long long edit(long long x, unsigned op, unsigned v, long long other) {
  unsigned long long u = (unsigned long long)x;
  switch (op % 12) {
  case 0: return (long long)(u + 1);
  case 1: return (long long)(u - 1);
  case 2: return (long long)(u * 2);
  case 3: return x / 2;
  case 4: return 0;
  case 5: return (long long)v;
  case 6: return -(long long)v;
  case 7: return other;
  case 8: return 2147483647LL;
  case 9: return 1LL << 62;
  case 10: return (long long)(u + v);
  default: return (long long)(u ^ (1ULL << (v % 40)));
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static FILE *devnull;
  if (!nbases) load_bases();
  if (!devnull) devnull = fopen("/dev/null", "w");
  if (!devnull || size < 1) return 0;
  const Base *b = &bases[data[0] % nbases];
  size_t nedits = (size - 1) / 6;
  if (nedits > 64) nedits = 64;
  /* The replacement of each edited number, by number index; the last edit
   * of a number wins. */
  long long *val = calloc(b->n, sizeof *val);
  bool *set = calloc(b->n, sizeof *set);
  if (!val || !set) abort();
  for (size_t k = 0; k < nedits; k++) {
    const uint8_t *r = data + 1 + 6 * k;
    size_t i = ((size_t)r[0] | (size_t)r[1] << 8 | (size_t)r[2] << 16) % b->n;
    unsigned v = (unsigned)r[4] | (unsigned)r[5] << 8;
    long long x = set[i] ? val[i] : strtoll(b->text + b->at[i], NULL, 10);
    long long other = strtoll(b->text + b->at[v % b->n], NULL, 10);
    val[i] = edit(x, r[3], v, other);
    set[i] = true;
  }
  StrBuf sb;
  sb_init(&sb);
  size_t from = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (!set[i]) continue;
    sb_putn(&sb, b->text + from, b->at[i] - from);
    sb_printf(&sb, "%lld", val[i]);
    from = b->at[i] + b->width[i];
  }
  sb_putn(&sb, b->text + from, b->len - from);
  size_t len = sb.len;
  char *text = sb_take(&sb);
  const char *keep = getenv("FUZZ_PLAN_MUTATE_WRITE");
  if (keep && rp_write_file_atomic(keep, text, len) != 0) abort();
  load_and_check("mutated.plan.json", text, len, devnull);
  free(text);
  free(val);
  free(set);
  return 0;
}
