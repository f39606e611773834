/*
 * emitted.c: the node script of `rankplan emit` output, for `rankrun
 * --emitted DIR`. DIR/manifest.json is input like any other: every field
 * used is checked and named in the message when wrong.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "emitted.h"
#include "rp_config.h"
#include "util.h"

/* Manifests are a few KiB; this bounds what a damaged one can make us read. */
#define MANIFEST_MAX (64u << 20)
#define SCRIPT_MAX (64u << 20)

static int bad(const char *where, const char *fmt, ...) RP_PRINTF(2, 3);
static int bad(const char *where, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rankrun: --emitted: %s: ", where);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return RP_EXIT_USAGE;
}

/* The plan identity the manifest records: format, spec digest, nodes. */
static int check_identity(const char *m, json_t *root, const Plan *plan) {
  const char *fmt = json_string_value(json_object_get(root, "format"));
  if (!fmt || strcmp(fmt, "rankplan.emit/1") != 0)
    return bad(m, "format: expected \"rankplan.emit/1\" (not `rankplan emit` output)");
  const char *sha = json_string_value(json_object_get(root, "spec_sha256"));
  if (!sha) return bad(m, "spec_sha256: expected a string");
  if (strcmp(sha, plan->spec_sha256) != 0)
    return bad(m, "spec_sha256: emitted from another plan (spec %.16s..., the plan's is "
               "%.16s...): run `rankplan emit` on this plan", sha, plan->spec_sha256);
  json_t *n = json_object_get(root, "nodes");
  if (!json_is_integer(n) || json_integer_value(n) != (json_int_t)plan->nnodes)
    return bad(m, "nodes: expected %zu, the plan's nodes", plan->nnodes);
  return 0;
}

/* The files[] entry of name, checked: its node, size and SHA-256. */
static int check_entry(const char *m, json_t *root, const char *name, int node,
                       json_t **entry) {
  json_t *files = json_object_get(root, "files");
  if (!json_is_array(files)) return bad(m, "files: expected an array");
  size_t i;
  json_t *f;
  json_array_foreach(files, i, f) {
    const char *p = json_string_value(json_object_get(f, "path"));
    if (!p) return bad(m, "files[%zu].path: expected a string", i);
    if (strcmp(p, name) != 0) continue;
    json_t *nd = json_object_get(f, "node");
    if (!json_is_integer(nd) || json_integer_value(nd) != node)
      return bad(m, "files[%zu].node: expected %d for %s", i, node, name);
    if (!json_is_integer(json_object_get(f, "bytes")) ||
        !json_is_string(json_object_get(f, "sha256")))
      return bad(m, "files[%zu]: expected bytes (an integer) and sha256 (a string)", i);
    *entry = f;
    return 0;
  }
  return bad(m, "files: no %s: the emit target writes no script for node %d", name, node);
}

/* The script on disk is the one the manifest lists. */
static int check_script(const char *m, json_t *entry, const char *path) {
  char *text = NULL, hex[65];
  size_t len = 0;
  int e = rp_read_file(path, SCRIPT_MAX, &text, &len);
  if (e) return bad(path, "%s (listed in %s)", rp_strerror(e), m);
  rp_sha256_hex(text, len, hex);
  free(text);
  if (json_integer_value(json_object_get(entry, "bytes")) != (json_int_t)len ||
      strcmp(json_string_value(json_object_get(entry, "sha256")), hex) != 0)
    return bad(path, "differs from its bytes and sha256 in %s (changed after emit)", m);
  return 0;
}

/* path with { and } doubled, so that template expansion gives it back. */
static char *template_literal(const char *path) {
  StrBuf sb;
  sb_init(&sb);
  for (const char *s = path; *s; s++) {
    if (*s == '{' || *s == '}') sb_putc(&sb, *s);
    sb_putc(&sb, *s);
  }
  return sb_take(&sb);
}

int rt_emitted_command(const char *dir, const Plan *plan, int node, char ***cmd) {
  *cmd = NULL;
  if (node >= (int)plan->nnodes)
    return bad(dir, "no node %d: the plan has %zu node(s)", node, plan->nnodes);
  char *m = rp_sprintf("%s/manifest.json", dir), *text = NULL;
  char *name = rp_sprintf("node-%d.sh", node), *path = rp_sprintf("%s/%s", dir, name);
  size_t len = 0;
  int e = rp_read_file(m, MANIFEST_MAX, &text, &len), code;
  json_error_t je;
  json_t *entry = NULL, *root = e ? NULL : json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (e) code = bad(m, "%s (is DIR `rankplan emit` output?)", rp_strerror(e));
  else if (!root) code = bad(m, "line %d: %s", je.line, je.text);
  else if (!json_is_object(root)) code = bad(m, "expected a JSON object");
  else if ((code = check_identity(m, root, plan)) == 0 &&
           (code = check_entry(m, root, name, node, &entry)) == 0)
    code = check_script(m, entry, path);
  if (code == 0) {
    *cmd = rp_malloc(3 * sizeof **cmd);
    (*cmd)[0] = rp_strdup("bash");
    (*cmd)[1] = template_literal(path);
    (*cmd)[2] = NULL;
  }
  json_decref(root);
  free(text), free(m), free(name), free(path);
  return code;
}

void rt_emitted_free(char **cmd) {
  if (!cmd) return;
  free(cmd[0]);
  free(cmd[1]);
  free(cmd);
}
