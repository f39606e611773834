/*
 * hook_run.h: one sandboxed hook run, shared by the three files of the
 * hook sandbox (private to them):
 *   hooks.c        limits, hook files, the context, the run itself
 *                  (load, call, report) and the four entry points;
 *   hook_sandbox.c the Lua state's limits: the counting allocator, the
 *                  count hook, the message handler and the whitelisted,
 *                  cost-charged library;
 *   hook_result.c  the context as Lua tables, and each hook kind's result
 *                  converted and checked in C.
 */
#ifndef RANKPLAN_HOOK_RUN_H
#define RANKPLAN_HOOK_RUN_H

#include <lua.h>
#include <time.h>

#include "hooks.h"

typedef enum {
  KILL_NONE, KILL_BUDGET, KILL_MEMORY, KILL_DEADLINE, KILL_DENIED, KILL_COSTLY, KILL_STRING
} KillReason;
typedef enum { PH_SETUP, PH_LOAD, PH_CHUNK, PH_CALL, PH_CONVERT } Phase;

/* Instructions between two count-hook calls: small enough that a deadline
 * is noticed within microseconds, large enough to cost nothing. */
#define HOOK_STEP 1000
/* One VM instruction can read or copy its string operands whole (`..`,
 * `<`, `==` of two distinct equal strings, a string turned into a number
 * for arithmetic), so what an instruction costs grows with the longest
 * string in the state. Once strings longer than HOOK_WINDOW_BYTES /
 * HOOK_STEP exist, the count hook runs more often (the step halves, down to
 * every instruction) so that the instructions between two checks touch
 * about HOOK_WINDOW_BYTES string bytes at most: some 12 ms in the worst
 * case measured (`<` of strings of NUL bytes, which strcoll compares
 * byte by byte). With HOOK_STRING_MAX that also bounds one instruction. */
#define HOOK_WINDOW_BYTES (INT64_C(1) << 20)
/* Bytes a killed run may still allocate to build its error message. */
#define HOOK_SLACK (INT64_C(1) << 20)

typedef struct {
  /* what to run */
  HookKind kind;
  const HookLimits *lim;
  const char *path; /* interned */
  const char *text;
  size_t len;
  char *chunkname;  /* "@" path */
  const HookCtx *ctx;
  size_t pool;
  const HookKV *cand;
  size_t ncand;
  const char *cand_role; /* filter: the candidate's pool role */
  Diags *d;
  /* sandbox state */
  lua_State *L;
  int64_t used, limit;
  bool capped;
  bool hooked;  /* the count hook is installed (its step may change) */
  bool in_msgh; /* the sandbox's message handler builds its traceback */
  int64_t steps;
  int step;            /* the count hook's current interval */
  int line_due;        /* instructions until last_line is taken again */
  int64_t longest;     /* the longest string made in this state, bytes */
  size_t str_overhead; /* a string's allocation minus its length */
  size_t last_str;     /* the allocation of the latest new string */
  int64_t str_asked;   /* KILL_STRING: the length refused */
  int str_line;        /* KILL_STRING: the hook line that made it */
  size_t load_pos;     /* compiling the hook file: bytes fed to Lua */
  int load_line;       /* and the line they end on */
  struct timespec deadline;
  bool total_bound; /* the deadline is the command's total (E0621), not the call's */
  KillReason kill;
  char denied[64];
  char costly[256]; /* the library call refused by KILL_COSTLY, described */
  Phase phase;
  int fn_ref;
  int fn_line, ret_line, last_line, err_line;
  int err_type; /* lua type of the error object */
  char *errmsg, *traceback;
  const char *got_type; /* what the chunk returned, for E0603 */
  bool perturb;         /* second run of a determinism check */
  /* results */
  bool result_ok;
  int64_t *node, *gpu, *layers;
  HookExpertMap em;
  double score;
  bool keep;   /* filter */
  char *why;   /* filter: the reason a candidate was dropped, or NULL */
} Run;

static inline Run *run_of(lua_State *L) { return *(Run **)lua_getextraspace(L); }



/* ---- hook_sandbox.c ---- */

/* The counting allocator (lua_Alloc; ud is the Run): the memory cap and
 * HOOK_STRING_MAX. */
void *hk_alloc(void *ud, void *ptr, size_t osize, size_t nsize);
/* The count hook (instruction budget, deadline) and the return hook. */
void hk_count_hook(lua_State *L, lua_Debug *ar);
/* The message handler of a run: position, error object, traceback. */
int hk_msgh(lua_State *L);
int hk_panic(lua_State *L);
/* The count hook's step while strings of up to longest bytes exist. */
int hk_step_for(int64_t longest);
/* Pushes the environment a hook sees (the whitelisted library). */
void hk_build_env(lua_State *L);

/* ---- hook_result.c ---- */

/* Pushes the context table of r (docs/hooks.md, "The context table"). */
void hk_push_ctx(lua_State *L, const Run *r);
/* Converts and checks the result at stack index res into r (r->kind's
 * shape); false after reporting. Raw reads only. */
bool hk_convert(Run *r, lua_State *L, int res);
/* Where a diagnostic about the result points: the return line. */
SrcLoc hk_result_loc(const Run *r);
/* A number for a message: an integer as such, else %.17g. */
void hk_fmt_number(char *buf, size_t n, double v);

#endif
