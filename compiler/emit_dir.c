/*
 * emit_dir.c: launch_emit (launch.h): a plan's launch target into a
 * directory, all files at once.
 *
 * The files are written into a new directory `.NAME.<16 hex digits>.tmp`
 * beside the target (mkdir: fails if the name exists; the name is
 * unpredictable), each created O_EXCL|O_NOFOLLOW and flushed, the
 * directory flushed; then one rename makes it the target. An existing
 * target is replaced only when it is an earlier emit output (it holds a
 * manifest.json of format rankplan.emit/1) or empty: the two are swapped
 * atomically (renameat2 RENAME_EXCHANGE) and the old files removed. Readers
 * see the old directory or the whole new one. An exit() while writing
 * (an internal error) removes the temporary directory; a process killed by
 * a signal leaves it behind (nothing replaced).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "emit_launch.h"
#include "outfile.h"

static int write_one(const char *dir, const LFile *f) {
  char *path = rp_sprintf("%s/%s", dir, f->name);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, f->exec ? 0777 : 0666);
  free(path);
  if (fd < 0) return errno;
  size_t off = 0;
  int e = 0;
  while (!e && off < f->text.len) {
    ssize_t w = write(fd, f->text.buf + off, f->text.len - off);
    if (w < 0 && errno != EINTR) e = errno;
    else if (w > 0) off += (size_t)w;
  }
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  return e;
}

/* Removes the plain files of dir and dir itself (an emit output is flat). */
static int remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return errno;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char *p = rp_sprintf("%s/%s", dir, e->d_name);
    unlink(p);
    free(p);
  }
  closedir(d);
  return rmdir(dir) == 0 ? 0 : errno;
}

static int sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno;
  int e = fsync(fd) == 0 ? 0 : errno;
  close(fd);
  return e;
}

/* 0 when dir may be replaced: empty, or an earlier emit output. */
static int replaceable(const char *dir) {
  char *m = rp_sprintf("%s/manifest.json", dir);
  char *text = NULL;
  size_t len = 0;
  int e = rp_read_file(m, 1 << 20, &text, &len);
  free(m);
  bool ours = !e && strstr(text, "\"format\": \"rankplan.emit/1\"") != NULL;
  free(text);
  if (ours) return 0;
  DIR *d = opendir(dir);
  if (!d && errno == ENOMEM) rp_internal("out of memory opening %s", dir);
  if (!d) return errno;
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d)))
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) n++;
  closedir(d);
  return n ? EEXIST : 0;
}

/* The temporary directory being written, removed by exit() (an internal
 * error or running out of memory mid-write leaves nothing behind). */
static char *pending;

static void remove_pending(void) {
  if (pending) remove_tree(pending);
}

static char *tmp_name(const char *dir) {
  char *copy = rp_strdup(dir);
  size_t n = strlen(copy);
  while (n > 1 && copy[n - 1] == '/') copy[--n] = '\0';
  char *slash = strrchr(copy, '/');
  unsigned char r[8] = {0};
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) rp_internal("getrandom failed: %s", strerror(errno));
  char hex[17];
  for (int i = 0; i < 8; i++) snprintf(hex + 2 * i, 3, "%02x", r[i]);
  char *t = slash ? rp_sprintf("%.*s/.%s.%s.tmp", (int)(slash - copy), copy, slash + 1, hex)
                  : rp_sprintf(".%s.%s.tmp", copy, hex);
  free(copy);
  return t;
}

/* Writes the files into dir at once; 0 or an errno, *what naming the path. */
static int write_tree(const char *dir, const LFile *files, size_t n, char **what) {
  struct stat st;
  bool exists = lstat(dir, &st) == 0;
  if (exists && !S_ISDIR(st.st_mode)) return *what = rp_strdup(dir), ENOTDIR;
  int e = exists ? replaceable(dir) : 0;
  if (e) return *what = rp_strdup(dir), e;
  char *tmp = tmp_name(dir);
  static bool registered;
  if (!registered) registered = atexit(remove_pending) == 0;
  e = mkdir(tmp, 0777) == 0 ? 0 : errno;
  if (!e) pending = tmp;
  for (size_t i = 0; !e && i < n; i++) {
    e = write_one(tmp, &files[i]);
    if (e) *what = rp_sprintf("%s/%s", dir, files[i].name);
  }
  if (!e) e = sync_dir(tmp);
  if (!e && exists) e = renameat2(AT_FDCWD, tmp, AT_FDCWD, dir, RENAME_EXCHANGE) == 0 ? 0 : errno;
  else if (!e) e = rename(tmp, dir) == 0 ? 0 : errno;
  if (e && !*what) *what = rp_strdup(dir);
  /* after the swap tmp holds the previous output; on error, the partial one */
  if (e || exists) remove_tree(tmp);
  pending = NULL;
  free(tmp);
  return e;
}

int launch_write_dir(Launch *l, const char *dir, FILE *err) {
  char *what = NULL;
  int e = write_tree(dir, l->files.items, l->files.len, &what);
  if (e == EEXIST)
    fprintf(err, "rankplan emit: `%s` exists and is neither empty nor an earlier emit output; remove it or "
                 "choose another directory\n", what);
  else if (e)
    fprintf(err, "rankplan emit: cannot write `%s`: %s\n", what, rp_strerror(e));
  free(what);
  return e ? RP_EXIT_USAGE : RP_EXIT_OK;
}

/* ---- launch_emit ------------------------------------------------------- */

static bool engine_target(LaunchTarget t) { return t == LT_VLLM || t == LT_SGLANG || t == LT_TRTLLM; }

const char *launch_spec_lacks(const Spec *s, LaunchTarget t) {
  Engine e = (Engine)s->deployment.engine.v;
  if (e == ENGINE_GENERIC) return "`deployment.engine` names no engine (it is `generic`)";
  if (engine_target(t) && strcmp(engine_name(e), launch_target_name(t)) != 0)
    return "`deployment.engine` is another engine than the target";
  if (!s->model.source.set) return "`model.source` is not set (where the engine loads the weights from)";
  if ((t == LT_K8S || t == LT_DYNAMO) && !s->deployment.image.set) return "`deployment.image` is not set";
  return NULL;
}

static const char *plan_lacks(const Plan *p, LaunchTarget t) {
  if (!p->launch.present) return "it has no `launch` key: compile a spec that names an engine (deployment.engine)";
  if (p->partial) return "it is a --split-by-node file, which holds one node; emit the whole plan";
  if (engine_target(t) && strcmp(p->launch.engine, launch_target_name(t)) != 0)
    return "it was compiled for another engine (launch.engine)";
  if (!p->launch.source) return "launch.source is null: set `model.source` in the spec";
  if ((t == LT_K8S || t == LT_DYNAMO) && !p->launch.image) return "launch.image is null: set `deployment.image`";
  return NULL;
}

static void launch_free(Launch *l) {
  for (size_t i = 0; i < l->ninst; i++) {
    if (l->inst[i].nruns) free(l->inst[i].runs[0].dev); /* the runs share one array */
    free(l->inst[i].runs);
  }
  free(l->inst);
  for (size_t i = 0; i < l->files.len; i++) {
    free(l->files.items[i].name);
    sb_free(&l->files.items[i].text);
  }
  free(l->files.items);
  free(l->next_port);
  free(l->host_used);
  free(l->hosts_named.items);
  free(l->node_first);
  free(l->node_runs.items);
  free(l->err);
}

int launch_emit(const Plan *p, LaunchTarget t, const char *dir, const char *catalog_dir, FILE *err) {
  return launch_emit_with_plan(p, t, dir, catalog_dir, err, NULL, 0);
}

/* The plan's launch setting its engine entry cannot honour, as a message
 * naming the key (caller frees); NULL when every one has its flag. */
static char *launch_refused(const PlanLaunch *L, const EngineCaps *c, Engine e) {
  if (L->sampler && !engine_kv(c->samplers, c->nsamplers, L->sampler))
    return rp_sprintf("launch.sampler: engine %s %s has no sampler `%s`", L->engine, L->engine_version, L->sampler);
  if (L->attention_backend && !engine_flag(c, "attention_backend"))
    return rp_sprintf("launch.attention_backend: engine %s %s has no `attention_backend` flag", L->engine,
                      L->engine_version);
  const char *ot = L->overlap_schedule >= 0 ? engine_overlap_term(e, c->version, L->overlap_schedule == 1) : NULL;
  if (ot && !engine_flag(c, ot))
    return rp_sprintf("launch.overlap_schedule: engine %s %s has no `%s` flag", L->engine, L->engine_version, ot);
  if (L->cuda_graph_max_bs && !engine_takes(c, "cuda_graph_max_bs"))
    return rp_sprintf("launch.cuda_graph_max_bs: engine %s %s has no `cuda_graph_max_bs` flag or YAML key", L->engine,
                      L->engine_version);
  if (L->chunked_prefill >= 0 && !engine_takes_chunked_prefill(e))
    return rp_sprintf("launch.chunked_prefill: read for engine trtllm only, not %s (E0712)", L->engine);
  return NULL;
}

int launch_emit_with_plan(const Plan *p, LaunchTarget t, const char *dir, const char *catalog_dir, FILE *err,
                          const char *plan_text, size_t plan_len) {
  const char *why = plan_lacks(p, t);
  if (why) {
    fprintf(err, "rankplan emit: %s: cannot emit target `%s`: %s\n", p->path, launch_target_name(t), why);
    return RP_EXIT_INPUT;
  }
  const PlanLaunch *L = &p->launch;
  Engine e = strcmp(L->engine, "vllm") == 0 ? ENGINE_VLLM : strcmp(L->engine, "sglang") == 0 ? ENGINE_SGLANG : ENGINE_TRTLLM;
  char *cerr = NULL;
  bool none = false;
  EngineCaps *c = engine_caps_load(catalog_dir ? catalog_dir : spec_catalog_dir(), e, L->engine_version, &cerr, &none);
  if (!c) {
    fprintf(err, "rankplan emit: %s: engine %s %s: %s\n", p->path, L->engine, L->engine_version, cerr);
    free(cerr);
    return RP_EXIT_INPUT;
  }
  char *refused = launch_refused(L, c, e);
  if (refused) {
    fprintf(err, "rankplan emit: %s: %s\n", p->path, refused);
    free(refused);
    engine_caps_free(c);
    return RP_EXIT_INPUT;
  }
  Launch l;
  memset(&l, 0, sizeof l);
  l.p = p;
  l.L = L;
  l.c = c;
  l.target = t;
  l.next_port = rp_calloc(p->nnodes ? p->nnodes : 1, sizeof(int64_t));
  l.host_used = rp_calloc(p->nnodes ? p->nnodes : 1, sizeof(bool));
  for (size_t n = 0; n < p->nnodes; n++) l.next_port[n] = L->port;
  if (launch_instances(&l) && t == LT_K8S) {
    emit_k8s(&l);
  } else if (!l.err && t == LT_DYNAMO) {
    emit_dynamo(&l);
  } else if (!l.err) {
    if (e == ENGINE_VLLM) emit_vllm(&l);
    else if (e == ENGINE_SGLANG) emit_sglang(&l);
    else emit_trtllm(&l);
    if (t == LT_SHELL) emit_shell(&l);
    else if (t == LT_SLURM) emit_slurm(&l);
  }
  int rc = RP_EXIT_OK;
  if (l.err) {
    fprintf(err, "rankplan emit: %s: cannot emit target `%s`: %s\n", p->path, launch_target_name(t), l.err);
    rc = RP_EXIT_INPUT;
  } else {
    if (plan_text) sb_putn(lfile(&l, "plan.json", false, -1), plan_text, plan_len);
    launch_manifest(&l);
    rc = launch_write_dir(&l, dir, err);
  }
  launch_free(&l);
  engine_caps_free(c);
  return rc;
}
