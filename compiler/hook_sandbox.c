/*
 * hook_sandbox.c: what bounds a hook's Lua state (hook_run.h): the counting
 * allocator (memory cap and string length), the count hook (instruction
 * budget and deadline), the message handler, and the environment a hook
 * sees: the whitelisted library, with every function that loops inside C
 * charged to the budget before it runs (docs/hooks.md, "Library calls").
 */
#include <errno.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hook_run.h"

/* The count hook's step for strings of up to `longest` bytes: HOOK_STEP,
 * halved until the step's instructions touch at most HOOK_WINDOW_BYTES. */
int hk_step_for(int64_t longest) {
  int step = HOOK_STEP;
  while (step > 1 && (int64_t)step * longest > HOOK_WINDOW_BYTES) step /= 2;
  return step;
}

/* The innermost line of the hook file on the stack, or while the file is
 * being compiled the line the lexer has read to; 0 when neither. Reads the
 * call frames only (lua_getinfo with "Sl" allocates nothing), so the
 * allocator may call it. */
static int hook_line(Run *r) {
  lua_Debug ar;
  for (int lv = 0; lua_getstack(r->L, lv, &ar); lv++)
    if (lua_getinfo(r->L, "Sl", &ar) && ar.currentline > 0 && strcmp(ar.source, r->chunkname) == 0)
      return ar.currentline;
  return r->phase == PH_LOAD ? r->load_line : 0;
}

/* A new string object of nsize bytes: refused (KILL_STRING, which no pcall
 * catches) when longer than HOOK_STRING_MAX while the hook's code counts;
 * otherwise remembered, and the count hook's step shortened when it is the
 * longest so far. Strings the sandbox makes before the cap (the context)
 * and the traceback of the message handler are not refused, only counted
 * for the step. */
static bool new_string_ok(Run *r, size_t nsize) {
  r->last_str = nsize;
  int64_t len = (int64_t)nsize - (int64_t)r->str_overhead;
  if (r->capped && !r->in_msgh && len > HOOK_STRING_MAX) {
    if (!r->kill) {
      r->kill = KILL_STRING;
      r->str_asked = len;
      r->str_line = hook_line(r);
    }
    return false;
  }
  if (len > r->longest) {
    r->longest = len;
    int step = hk_step_for(len);
    if (r->hooked && !r->kill && step < r->step) {
      /* at once: the instruction that made this string may be followed by
       * a thousand that compare it. Only the count changes (the
       * instructions counted toward the current step are dropped: fewer
       * than 2000 in all, over the step's ten values). */
      r->step = step;
      lua_sethook(r->L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, step);
    }
  }
  return true;
}

/* The counting allocator: the memory cap. Before the hook's code runs the
 * cap is off (the context counts against nothing); afterwards it allows
 * lim->memory bytes beyond what setup used, plus a small slack once the run
 * is killed so that the error message can still be built. New strings are
 * also held to HOOK_STRING_MAX (new_string_ok). */
void *hk_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  Run *r = ud;
  /* A new object: osize encodes its type. Short and long strings both come
   * as LUA_TSTRING (Lua passes the type without its variant bits). */
  if (!ptr && osize == LUA_TSTRING && nsize > 0 && !new_string_ok(r, nsize)) return NULL;
  if (!ptr) osize = 0;
  if (nsize == 0) {
    free(ptr);
    r->used -= (int64_t)osize;
    return NULL;
  }
  if (r->capped && nsize > osize) {
    int64_t limit = r->limit + (r->kill ? HOOK_SLACK : 0);
    int64_t room = limit - r->used;
    if (room < 0 || nsize - osize > (size_t)room) {
      if (!r->kill) r->kill = KILL_MEMORY;
      return NULL;
    }
  }
  /* The cap was checked above: a failure here is the machine's memory,
   * not the hook's, so an internal error rather than E0607. */
  void *p = realloc(ptr, nsize);
  if (!p) rp_internal("out of memory in the hook sandbox (%zu bytes)", nsize);
  r->used += (int64_t)nsize - (int64_t)osize;
  return p;
}

int hk_panic(lua_State *L) {
  const char *m = lua_tostring(L, -1);
  rp_internal("unprotected error in hook sandbox: %s", m ? m : "?");
}

static bool past(const struct timespec *t) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

static const char *kill_text(const Run *r) {
  switch (r->kill) {
  case KILL_BUDGET: return "instruction budget exhausted";
  case KILL_MEMORY: return "memory cap exceeded";
  case KILL_DEADLINE: return "wall-clock deadline passed";
  case KILL_DENIED: return "sandbox refused the operation";
  case KILL_COSTLY: return "library call would exceed the instruction budget";
  case KILL_STRING: return "string longer than the sandbox allows";
  default: return "killed";
  }
}

/* Count hook: instruction budget and deadline; remembers the last line run
 * in the hook file (for errors that carry no position). Return hook: the
 * line of the hook function's return, to point at the value it returned. */
void hk_count_hook(lua_State *L, lua_Debug *ar) {
  Run *r = run_of(L);
  if (ar->event == LUA_HOOKRET) {
    if (r->phase != PH_CALL || !lua_getinfo(L, "fl", ar)) return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, r->fn_ref);
    if (lua_rawequal(L, -1, -2) && ar->currentline > 0) r->ret_line = ar->currentline;
    lua_pop(L, 2);
    return;
  }
  r->in_msgh = false; /* Lua code runs: the message handler is done */
  /* the line about every HOOK_STEP instructions, however short the step:
   * at a step of 1 it would cost more than the instructions */
  r->line_due -= r->step;
  if (r->line_due <= 0) {
    r->line_due = HOOK_STEP;
    if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0 && strcmp(ar->source, r->chunkname) == 0)
      r->last_line = ar->currentline;
  }
  if (!r->kill) {
    r->steps += r->step;
    if (r->steps > r->lim->instructions) r->kill = KILL_BUDGET;
    else if (past(&r->deadline)) r->kill = KILL_DEADLINE;
  }
  if (r->kill) {
    /* From now on every instruction raises, so no handler can go on. */
    lua_sethook(L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
    luaL_error(L, "%s", kill_text(r));
  }
}

/* Message handler: records the position in the hook file and the error
 * object, and appends a traceback. Never calls user metamethods. */
int hk_msgh(lua_State *L) {
  Run *r = run_of(L);
  r->in_msgh = true; /* the run is ending: its traceback may be long */
  lua_Debug ar;
  for (int lv = 0; lua_getstack(L, lv, &ar); lv++) {
    if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0 && strcmp(ar.source, r->chunkname) == 0) {
      r->err_line = ar.currentline;
      break;
    }
  }
  r->err_type = lua_type(L, 1);
  const char *msg;
  if (r->err_type == LUA_TSTRING || r->err_type == LUA_TNUMBER)
    msg = lua_tostring(L, 1);
  else
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  free(r->errmsg);
  r->errmsg = rp_strdup(msg);
  luaL_traceback(L, L, msg, 1);
  free(r->traceback);
  r->traceback = rp_strdup(lua_tostring(L, -1));
  r->in_msgh = false;
  return 1;
}

/* Raises a sandbox refusal that no pcall can catch. */
static int deny(lua_State *L, const char *what) {
  Run *r = run_of(L);
  if (!r->kill) {
    r->kill = KILL_DENIED;
    snprintf(r->denied, sizeof r->denied, "%.*s", (int)sizeof r->denied - 1, what);
  }
  lua_sethook(L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
  return luaL_error(L, "%s is not available in the hook sandbox", what);
}

/* _ENV's __index: names the sandbox removed raise instead of reading nil. */
static int sb_env_index(lua_State *L) {
  static const char *const denied[] = {"io", "os", "debug", "package", "require",
                                       "dofile", "loadfile", "loadstring", "print",
                                       "coroutine", "warn"};
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (k)
    for (size_t i = 0; i < RP_ARRAY_LEN(denied); i++)
      if (strcmp(k, denied[i]) == 0) {
        char what[48];
        snprintf(what, sizeof what, "`%s`", k);
        return deny(L, what);
      }
  lua_pushnil(L);
  return 1;
}

static int sb_dump(lua_State *L) { return deny(L, "`string.dump`"); }

static int sb_strmeta(lua_State *L) { return deny(L, "the string metatable"); }

/* pcall/xpcall that rethrow once the run is killed. */
static int sb_pcall(lua_State *L) {
  luaL_checkany(L, 1);
  int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
  if (run_of(L)->kill) return lua_error(L);
  lua_pushboolean(L, st == LUA_OK);
  lua_insert(L, 1);
  return lua_gettop(L);
}

/* The message handler xpcall installs: the user's handler (upvalue 1) runs
 * only for an error of the hook's own making. Once the run is killed the
 * error object passes through untouched: a kill is raised inside the count
 * hook, where Lua runs the handler with hooks off, so a user handler called
 * then would escape the budget and the deadline (a looping handler never
 * ends). A handler that errors or loops while it runs normally is counted
 * like any other code, and its kill passes through here too. */
static int sb_msgh(lua_State *L) {
  if (run_of(L)->kill) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int sb_xpcall(lua_State *L) {
  int n = lua_gettop(L);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, sb_msgh, 1);
  lua_replace(L, 2); /* f at 1, the wrapped msgh at 2, args after */
  lua_pushvalue(L, 1);
  lua_copy(L, 2, 1);
  lua_replace(L, 2); /* msgh at 1, f at 2, args after */
  int st = lua_pcall(L, n - 2, LUA_MULTRET, 1);
  if (run_of(L)->kill) return lua_error(L);
  lua_pushboolean(L, st == LUA_OK);
  lua_replace(L, 1);
  return lua_gettop(L);
}

static void charge_load(lua_State *L, size_t len);
static void charge_gc(lua_State *L);

/* load(chunk [, chunkname [, mode [, env]]]): strings only, text only; the
 * default environment is the sandbox's. */
static int sb_load(lua_State *L) {
  size_t len;
  const char *s = lua_tolstring(L, 1, &len);
  if (lua_type(L, 1) != LUA_TSTRING)
    return deny(L, "`load` with a reader function");
  if (len > 0 && s[0] == LUA_SIGNATURE[0]) return deny(L, "loading a precompiled (binary) chunk");
  charge_load(L, len);
  const char *name = luaL_optstring(L, 2, "=(load)");
  int st = luaL_loadbufferx(L, s, len, name, "t");
  if (st != LUA_OK) {
    lua_pushnil(L);
    lua_insert(L, -2);
    return 2;
  }
  if (!lua_isnone(L, 4)) lua_pushvalue(L, 4);
  else lua_pushvalue(L, lua_upvalueindex(1));
  if (!lua_setupvalue(L, -2, 1)) lua_pop(L, 1);
  return 1;
}

/* setmetatable without __gc: a finalizer would run code after the hook.
 * Nor with a metamethod that is a library (C) function: the VM and the
 * library loops call metamethods without counting an instruction, so a
 * C function there, `__index = rawlen` say, lets `table.sort` or
 * `table.concat` walk a table of any claimed length without one counted
 * instruction. Lua functions as metamethods are counted like any code.
 * (A field added to the metatable afterwards is not seen here; the
 * library wrappers charge such loops per element all the same.) */
static int sb_setmetatable(lua_State *L) {
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    int t = lua_rawget(L, 2);
    lua_pop(L, 1);
    if (t != LUA_TNIL) return deny(L, "a `__gc` metamethod");
    lua_pushnil(L);
    while (lua_next(L, 2)) {
      if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1)) {
        const char *k = lua_tostring(L, -2);
        if (k[0] == '_' && k[1] == '_') {
          char what[96];
          snprintf(what, sizeof what, "a library function as the `%.40s` metamethod", k);
          return deny(L, what);
        }
      }
      lua_pop(L, 1);
    }
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

/* collectgarbage with the options that cannot change the collector. */
static int sb_collectgarbage(lua_State *L) {
  const char *opt = luaL_optstring(L, 1, "collect");
  if (strcmp(opt, "collect") != 0 && strcmp(opt, "count") != 0 && strcmp(opt, "step") != 0 &&
      strcmp(opt, "isrunning") != 0)
    return deny(L, "`collectgarbage` with this option");
  if (strcmp(opt, "collect") == 0 || strcmp(opt, "step") == 0) charge_gc(L);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
  return lua_gettop(L);
}

/* ---- library calls that loop inside C ----
 *
 * The count hook only sees Lua VM instructions, so a library function that
 * loops in C runs unchecked until it returns. Lua's pattern matcher
 * backtracks: `string.find(("a"):rep(48), ".-.-.-.-.-.-.-b")` is one call
 * that runs for minutes. The wrappers below bound such calls before they
 * start: they estimate the call's worst case in "steps" (about one subject
 * byte compared; the VM's instructions and these steps share the one
 * instruction budget), refuse the call (E0619, a kill no pcall catches) when
 * the estimate exceeds what is left of the budget, and otherwise charge it,
 * so that many cheap calls add up. After the call the deadline is checked
 * too. The wrappers replace the entries of the real string table, which is
 * also the string metatable's __index, so `s:find(p)` is bounded as well.
 * Each wrapper then runs the real function on the same stack (its C
 * pointer is the closure's upvalue), so results and error messages are
 * exactly the library's. docs/hooks.md states the rule. */

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pat_names[] = {"string.find", "string.match", "string.gmatch",
                                        "string.gsub"};

/* Where the pattern item starting at p ends, as lstrlib's classEnd finds
 * it: one character, `%x`, or a `[...]` set. A malformed item ends the
 * pattern (the library raises when it reaches it, which only shortens the
 * work). */
static size_t pat_class_end(const char *p, size_t i, size_t len) {
  char c = p[i++];
  if (c == '%') return i < len ? i + 1 : len;
  if (c != '[') return i;
  if (i < len && p[i] == '^') i++;
  do {
    if (i >= len) return len;
    if (p[i++] == '%' && i < len) i++;
  } while (i >= len || p[i] != ']');
  return i + 1;
}

/* The shape of a pattern that decides the matcher's worst case: q items
 * with a `*`, `+`, `-` or `?` suffix (each a choice of how many subject
 * bytes it takes), b items that scan the subject without choice (`%b` and
 * the back-references `%1`-`%9`), and whether a leading `^` anchors it
 * (find, match and gsub; gmatch treats `^` as a character). */
typedef struct {
  int64_t q, b;
  bool anchored;
} PatShape;

static PatShape pat_shape(const char *p, size_t len, bool anchor_ok) {
  PatShape sh = {0, 0, false};
  size_t i = 0;
  if (anchor_ok && len > 0 && p[0] == '^') {
    sh.anchored = true;
    i = 1;
  }
  while (i < len) {
    char c = p[i];
    if (c == '(') {
      i += (i + 1 < len && p[i + 1] == ')') ? 2 : 1;
      continue;
    }
    if (c == ')' || (c == '$' && i + 1 == len)) {
      i++;
      continue;
    }
    if (c == '%' && i + 1 < len) {
      char e = p[i + 1];
      if (e == 'b') {
        sh.b++;
        i = i + 4 < len ? i + 4 : len;
        continue;
      }
      if (e == 'f') {
        i += 2;
        if (i < len) i = pat_class_end(p, i, len);
        continue;
      }
      if (e >= '0' && e <= '9') {
        sh.b++;
        i += 2;
        continue;
      }
    }
    size_t ep = pat_class_end(p, i, len);
    if (ep < len && (p[ep] == '*' || p[ep] == '+' || p[ep] == '-' || p[ep] == '?')) {
      sh.q++;
      ep++;
    }
    i = ep;
  }
  return sh;
}

/* Saturating helpers: an estimate over INT64_MAX is simply "too much". */
static int64_t sat_mul(int64_t a, int64_t b) {
  int64_t r;
  return ck_mul(a, b, &r) ? r : INT64_MAX;
}
static int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  return ck_add(a, b, &r) ? r : INT64_MAX;
}

/* The worst-case steps of matching a pattern of length plen and shape sh
 * against n subject bytes, over every start position the call tries
 * (gmatch and gsub try each position at most once over the whole
 * iteration, like find and match do in one call):
 *   starts x C(n + q + 1, q) x (2 plen + b n + 1)
 * A path of the backtracking search is fixed by how many bytes each of the
 * q quantified items took (at most n in all), so the search visits at most
 * sum_k C(n + k, k) = C(n + q + 1, q) nodes; a node walks at most the
 * pattern (and the greedy count of `*`/`+`, charged once per child), plus n
 * bytes for each `%b` or back-reference. */
int64_t hook__pattern_cost(size_t n, const char *pat, size_t plen, bool anchor_ok) {
  PatShape sh = pat_shape(pat, plen, anchor_ok);
  int64_t n64 = n > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)n;
  int64_t starts = sh.anchored ? 1 : n64 + 1;
  int64_t nodes = 1; /* C(n + 1 + k, k), k = 1 .. q; each step is exact */
  for (int64_t k = 1; k <= sh.q && nodes != INT64_MAX; k++) {
    int64_t t = sat_mul(nodes, n64 + 1 + k);
    nodes = t == INT64_MAX ? INT64_MAX : t / k;
  }
  int64_t per = sat_add(sat_add(sat_mul(2, (int64_t)plen), sat_mul(sh.b, n64)), 1);
  return sat_mul(sat_mul(starts, nodes), per);
}

/* Charges `cost` steps to the run's instruction budget, or refuses the call
 * (KILL_COSTLY, which no pcall catches) when fewer are left. what describes
 * the call for the diagnostic. */
static void charge(lua_State *L, int64_t cost, const char *what) {
  Run *r = run_of(L);
  int64_t left = r->lim->instructions - r->steps;
  if (cost <= left) {
    r->steps += cost;
    return;
  }
  if (!r->kill) {
    r->kill = KILL_COSTLY;
    char c[24];
    if (cost == INT64_MAX) snprintf(c, sizeof c, "more than 2^63");
    else snprintf(c, sizeof c, "%lld", (long long)cost);
    snprintf(r->costly, sizeof r->costly, "%s may take %s steps, more than the %lld left", what,
             c, (long long)(left > 0 ? left : 0));
  }
  lua_sethook(L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
  luaL_error(L, "%s", kill_text(r));
}

/* Runs the real library function (upvalue 1) on this call's stack, then
 * checks the deadline: a call the estimate let through still cannot end
 * past it unnoticed. */
static int call_real(lua_State *L) {
  lua_CFunction f = lua_tocfunction(L, lua_upvalueindex(1));
  RP_ASSERT(f != NULL);
  int n = f(L);
  Run *r = run_of(L);
  if (!r->kill && past(&r->deadline)) {
    r->kill = KILL_DEADLINE;
    lua_sethook(L, hk_count_hook, LUA_MASKCOUNT | LUA_MASKRET, 1);
    luaL_error(L, "%s", kill_text(r));
  }
  return n;
}

/* Quotes a pattern for a message: at most 40 bytes, control bytes as `?`. */
static void quote_pattern(char *buf, size_t size, const char *p, size_t len) {
  size_t show = len > 40 ? 40 : len;
  snprintf(buf, size, "\"%.*s\"%s", (int)show, p, len > show ? "..." : "");
  for (char *c = buf + 1; *c; c++)
    if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

/* string.find, string.match, string.gmatch, string.gsub (upvalue 2 says
 * which): estimate, charge, then the real function. */
static int sb_pattern(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  size_t n, plen;
  (void)luaL_checklstring(L, 1, &n);
  const char *pat = luaL_checklstring(L, 2, &plen);
  int64_t cost;
  bool plain = false;
  if (which == PAT_FIND) {
    plain = lua_toboolean(L, 4);
    if (!plain) {
      plain = true; /* the library searches literally when nothing is special */
      for (size_t i = 0; i < plen && plain; i++)
        if (strchr("^$*+?.([%-", pat[i]) && pat[i] != '\0') plain = false;
    }
  }
  if (plain) {
    /* memchr and memcmp at each position: at most (n + 1) x (plen + 1). */
    int64_t n64 = n > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)n;
    int64_t p64 = plen > (size_t)INT64_MAX / 4 ? INT64_MAX / 4 : (int64_t)plen;
    cost = sat_mul(n64 + 1, p64 + 1);
  } else {
    cost = hook__pattern_cost(n, pat, plen, which != PAT_GMATCH);
  }
  char q[64], what[160];
  quote_pattern(q, sizeof q, pat, plen);
  snprintf(what, sizeof what, "`%s` with pattern %s on a %zu-byte string", pat_names[which], q, n);
  charge(L, cost, what);
  return call_real(L);
}

/* table.move(a1, f, e, t [, a2]): moves e - f + 1 elements in C, nil ones
 * too, so `table.move({}, 1, math.maxinteger - 1, 2)` allocates nothing and
 * never ends. Each element costs one step. */
static int sb_move(lua_State *L) {
  lua_Integer f = luaL_checkinteger(L, 2);
  lua_Integer e = luaL_checkinteger(L, 3);
  if (e >= f) {
    uint64_t count = (uint64_t)e - (uint64_t)f + 1;
    int64_t cost = count == 0 || count > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)count;
    char what[96];
    snprintf(what, sizeof what, "`table.move` of %llu elements", (unsigned long long)count);
    charge(L, cost, what);
  }
  return call_real(L);
}

/* ---- more library calls that loop inside C ----
 *
 * The same rule for the rest of the exposed library: each wrapper below
 * estimates how many elements or bytes the real function will walk and
 * charges that before it starts. Counts come from the arguments and, where
 * the library would ask the table's length itself, from one `#t` the
 * wrapper takes and then passes on explicitly, so that a `__len` cannot
 * answer small to the estimate and large to the library. */

/* The number of integers in [i, j], saturated; 0 when j < i. */
static int64_t span(lua_Integer i, lua_Integer j) {
  if (j < i) return 0;
  uint64_t c = (uint64_t)j - (uint64_t)i + 1;
  return c == 0 || c > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)c;
}

static int64_t len64(size_t n) { return n > (size_t)INT64_MAX ? INT64_MAX : (int64_t)n; }

/* charge() with a formatted description, built only when it is needed. */
static void charge_fmt(lua_State *L, int64_t cost, const char *fmt, ...) RP_PRINTF(3, 4);
static void charge_fmt(lua_State *L, int64_t cost, const char *fmt, ...) {
  Run *r = run_of(L);
  if (cost <= r->lim->instructions - r->steps) {
    r->steps += cost;
    return;
  }
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  charge(L, cost, what);
}

/* lstrlib's posrelatI and getendpos: the 1-based start and end of a
 * string range, clipped to a string of len bytes. */
static lua_Integer str_start(lua_Integer pos, size_t len) {
  if (pos > 0) return pos;
  if (pos == 0) return 1;
  if (pos < -(lua_Integer)len) return 1;
  return (lua_Integer)len + pos + 1;
}
static lua_Integer str_end(lua_Integer pos, size_t len) {
  if (pos > (lua_Integer)len) return (lua_Integer)len;
  if (pos >= 0) return pos;
  if (pos < -(lua_Integer)len) return 0;
  return (lua_Integer)len + pos + 1;
}

/* Which string or utf8 function a linear wrapper stands for. */
enum { LIN_LOWER, LIN_UPPER, LIN_REVERSE, LIN_SUB, LIN_BYTE, LIN_CHAR, LIN_FORMAT,
       LIN_PACKSIZE, LIN_UTF8_CHAR, LIN_UTF8_CODEPOINT, LIN_UTF8_LEN, LIN_UTF8_OFFSET,
       LIN_TONUMBER };
static const char *const lin_names[] = {
    "string.lower", "string.upper", "string.reverse", "string.sub", "string.byte",
    "string.char", "string.format", "string.packsize", "utf8.char", "utf8.codepoint",
    "utf8.len", "utf8.offset", "tonumber"};

/* String and utf8 functions whose work is linear in what they read or
 * write: one step per byte (or argument, or character), plus one. Ranges
 * are clipped as the library clips them, so `s:sub(i, i)` costs 2 steps
 * however long s is. Malformed arguments cost 1: the library raises. */
static int sb_linear(lua_State *L) {
  int which = (int)lua_tointeger(L, lua_upvalueindex(2));
  int top = lua_gettop(L);
  size_t len = 0;
  int64_t cost = 1;
  /* only a string: lua_tolstring would turn a number argument into a
   * string in place, and tonumber(0.1) must stay exact */
  if (lua_type(L, 1) == LUA_TSTRING) (void)lua_tolstring(L, 1, &len);
  switch (which) {
  case LIN_LOWER: case LIN_UPPER: case LIN_REVERSE: case LIN_PACKSIZE: case LIN_UTF8_OFFSET:
  case LIN_TONUMBER:
    cost = sat_add(len64(len), 1);
    break;
  case LIN_SUB: case LIN_UTF8_LEN: {
    lua_Integer i = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 1;
    lua_Integer j = lua_isinteger(L, 3) ? lua_tointeger(L, 3) : -1;
    cost = sat_add(span(str_start(i, len), str_end(j, len)), 1);
    break;
  }
  case LIN_BYTE: case LIN_UTF8_CODEPOINT: {
    lua_Integer i = lua_isinteger(L, 2) ? lua_tointeger(L, 2) : 1;
    lua_Integer pi = str_start(i, len);
    lua_Integer j = lua_isinteger(L, 3) ? lua_tointeger(L, 3) : pi;
    cost = sat_add(span(pi, str_end(j, len)), 1);
    break;
  }
  case LIN_CHAR: case LIN_UTF8_CHAR:
    cost = top + 1;
    break;
  case LIN_FORMAT:
    /* the format, each argument, and the bytes of string arguments (%s
     * and %q copy them whole) */
    cost = sat_add(len64(len), top);
    for (int a = 2; a <= top; a++)
      if (lua_type(L, a) == LUA_TSTRING) cost = sat_add(cost, len64(lua_rawlen(L, a)));
    break;
  default: break;
  }
  charge_fmt(L, cost, "`%s` over %zu bytes", lin_names[which], len);
  return call_real(L);
}

/* string.rep with a result that fits the memory cap: one step per result
 * byte (a result over the cap fails on its allocation at once). */
static int sb_rep(lua_State *L) {
  size_t l, lsep;
  (void)luaL_checklstring(L, 1, &l);
  lua_Integer n = luaL_checkinteger(L, 2);
  (void)luaL_optlstring(L, 3, "", &lsep);
  if (n > 0 && l == 0 && lsep == 0) {
    lua_pushliteral(L, "");
    return 1;
  }
  if (n > 0) {
    int64_t out = sat_add(sat_mul(len64(l), n), sat_mul(len64(lsep), n - 1));
    if (out <= run_of(L)->lim->memory)
      charge_fmt(L, out, "`string.rep` of a %lld-byte result", (long long)out);
  }
  return call_real(L);
}

/* string.pack and string.unpack: the format is walked once, before; the
 * strings they build (`c`, `s`, `z` items and the packed result) are
 * charged one step per byte after, when their size is known; they were
 * bounded by the memory cap while being built. */
static int sb_pack(lua_State *L) {
  size_t flen = 0;
  if (lua_type(L, 1) == LUA_TSTRING) (void)lua_tolstring(L, 1, &flen);
  charge_fmt(L, sat_add(len64(flen), 1), "`string.pack` with a %zu-byte format", flen);
  int n = call_real(L);
  int64_t out = 0;
  for (int k = lua_gettop(L) - n + 1; k <= lua_gettop(L); k++)
    if (lua_type(L, k) == LUA_TSTRING) out = sat_add(out, len64(lua_rawlen(L, k)));
  charge_fmt(L, out, "`string.pack` or `string.unpack` of %lld bytes", (long long)out);
  return n;
}

/* utf8.codes: its iterator skips continuation bytes in C from any position
 * the caller passes. The wrapped iterator counts them first, at most one
 * more than the budget has left, and charges what it counted. */
static int sb_utf8_iter(lua_State *L) {
  size_t len;
  const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tolstring(L, 1, &len) : NULL;
  if (s && lua_isinteger(L, 2)) {
    Run *r = run_of(L);
    lua_Integer n = lua_tointeger(L, 2);
    int64_t left = r->lim->instructions - r->steps, count = 1;
    for (size_t k = n < 0 ? 0 : (size_t)n; k < len && count <= left; k++) {
      if (((unsigned char)s[k] & 0xC0) != 0x80) continue; /* ends the skip, at once or next */
      count++;
    }
    charge_fmt(L, count, "`utf8.codes` step over a %zu-byte string", len);
  }
  return call_real(L);
}

static int sb_utf8_codes(lua_State *L) {
  int n = call_real(L);
  if (n >= 1 && lua_tocfunction(L, -n) != NULL) {
    lua_pushvalue(L, -n);
    lua_pushinteger(L, 0);
    lua_pushcclosure(L, sb_utf8_iter, 2);
    lua_replace(L, -n - 1);
  }
  return n;
}

/* load compiles its text in one call: one step per byte. */
static void charge_load(lua_State *L, size_t len) {
  charge_fmt(L, sat_add(len64(len), 1), "`load` of a %zu-byte chunk", len);
}

/* collectgarbage("collect") and ("step") walk the heap: one step per 8
 * bytes in use (a small table is some 56 bytes, marked and swept in tens
 * of nanoseconds). */
static void charge_gc(lua_State *L) {
  Run *r = run_of(L);
  int64_t cost = (r->used > 0 ? r->used / 8 : 0) + 1;
  charge_fmt(L, cost, "`collectgarbage` over %lld bytes", (long long)r->used);
}

/* The table argument's length as the library takes it (`#t`, with
 * `__len`), taken once. Raises as the library would for a non-table. */
static lua_Integer tab_len(lua_State *L, bool want_table) {
  if (want_table && lua_type(L, 1) != LUA_TTABLE) luaL_checktype(L, 1, LUA_TTABLE);
  return luaL_len(L, 1);
}

/* table.concat(t [, sep [, i [, j]]]) and table.unpack(t [, i [, j]]):
 * one step per element (times 1 + the separator's length for concat)
 * before, and for concat one per byte of the result after; a missing j
 * is filled in with the one `#t` taken here. */
static int sb_span_call(lua_State *L) {
  bool concat = lua_tointeger(L, lua_upvalueindex(2)) == 1;
  int ia = concat ? 3 : 2;
  size_t lsep = 0;
  if (concat) (void)luaL_optlstring(L, 2, "", &lsep);
  lua_Integer i = luaL_optinteger(L, ia, 1);
  lua_Integer j = lua_isnoneornil(L, ia + 1) ? tab_len(L, concat) : luaL_checkinteger(L, ia + 1);
  lua_settop(L, ia + 1);
  lua_pushinteger(L, i);
  lua_replace(L, ia);
  lua_pushinteger(L, j);
  lua_replace(L, ia + 1);
  int64_t n = span(i, j);
  charge_fmt(L, sat_mul(n, sat_add(len64(lsep), 1)), "`table.%s` of %lld elements",
             concat ? "concat" : "unpack", (long long)n);
  int r = call_real(L);
  if (concat && lua_type(L, -1) == LUA_TSTRING) {
    /* the bytes copied, known now; the memory cap bounded them meanwhile */
    int64_t out = len64(lua_rawlen(L, -1));
    charge_fmt(L, out, "`table.concat` of a %lld-byte result", (long long)out);
  }
  return r;
}

/* table.insert and table.remove, as ltablib has them, with `#t` taken once
 * and the shift charged one step per element before it starts. */
static int sb_insert(lua_State *L) {
  lua_Integer e = tab_len(L, true);
  e = (lua_Integer)((lua_Unsigned)e + 1u); /* the first empty element */
  lua_Integer pos;
  switch (lua_gettop(L)) {
  case 2: pos = e; break;
  case 3:
    pos = luaL_checkinteger(L, 2);
    luaL_argcheck(L, (lua_Unsigned)pos - 1u < (lua_Unsigned)e, 2, "position out of bounds");
    charge_fmt(L, span(pos + 1, e), "`table.insert` shifting %lld elements",
               (long long)span(pos + 1, e));
    for (lua_Integer i = e; i > pos; i--) {
      lua_geti(L, 1, i - 1);
      lua_seti(L, 1, i);
    }
    break;
  default: return luaL_error(L, "wrong number of arguments to 'insert'");
  }
  lua_seti(L, 1, pos);
  return 0;
}

static int sb_remove(lua_State *L) {
  lua_Integer size = tab_len(L, true);
  lua_Integer pos = luaL_optinteger(L, 2, size);
  if (pos != size)
    luaL_argcheck(L, (lua_Unsigned)pos - 1u <= (lua_Unsigned)size, 2, "position out of bounds");
  int64_t shift = pos < size ? span(pos, size - 1) : 0; /* size - 1 cannot wrap then */
  charge_fmt(L, sat_add(shift, 1), "`table.remove` shifting %lld elements", (long long)shift);
  lua_geti(L, 1, pos);
  for (; pos < size; pos++) {
    lua_geti(L, 1, pos + 1);
    lua_seti(L, 1, pos);
  }
  lua_pushnil(L);
  lua_seti(L, 1, pos);
  return 1;
}

/* table.sort: about 2 n log2 n comparisons (quicksort's expected count,
 * which ltablib keeps for any input by choosing pivots at random once a
 * partition is unbalanced), each comparing two values; a string
 * comparison reads up to the shorter string, so each comparison is
 * charged 1 + the longest string element. n is the larger of `#t` and
 * the raw length, so a `__len` that answers more the second time can
 * only reach nil elements, which a comparison without a comparator
 * rejects, or Lua code (a comparator or `__index`), which is counted; a C
 * comparator is charged per call. */
static int sb_counted_cmp(lua_State *L) {
  charge_fmt(L, 1, "a `table.sort` comparison");
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static int sb_sort(lua_State *L) {
  if (lua_iscfunction(L, 2)) {
    /* A C comparator counts no instruction; charged one step a call, it
     * bounds even a sort whose `__len` grew after the estimate. */
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, sb_counted_cmp, 1);
    lua_replace(L, 2);
  }
  if (lua_type(L, 1) == LUA_TTABLE) {
    lua_Integer n = luaL_len(L, 1);
    lua_Integer raw = (lua_Integer)lua_rawlen(L, 1);
    if (raw > n) n = raw;
    if (n > 1) {
      int64_t lg = 0;
      for (uint64_t v = (uint64_t)n; v; v >>= 1) lg++;
      int64_t comps = sat_mul(sat_mul(2, n), lg);
      charge_fmt(L, comps, "`table.sort` of %lld elements", (long long)n);
      int64_t longest = 0;
      for (lua_Integer k = 1; k <= raw; k++) {
        if (lua_rawgeti(L, 1, k) == LUA_TSTRING && len64(lua_rawlen(L, -1)) > longest)
          longest = len64(lua_rawlen(L, -1));
        lua_pop(L, 1);
      }
      if (longest > 0)
        charge_fmt(L, sat_mul(comps, longest),
                   "`table.sort` of %lld elements with strings of %lld bytes", (long long)n,
                   (long long)longest);
    }
  }
  return call_real(L);
}

/* Replaces lib[name] by wrapper, with the real function as upvalue 1 and
 * `which` as upvalue 2. lib is on the stack top. */
static void wrap(lua_State *L, const char *name, lua_CFunction wrapper, int which) {
  lua_getfield(L, -1, name);
  RP_ASSERT(lua_tocfunction(L, -1) != NULL);
  lua_pushinteger(L, which);
  lua_pushcclosure(L, wrapper, 2);
  lua_setfield(L, -2, name);
}

/* Deterministic pairs: keys sorted (false < true < numbers < strings);
 * other key types follow in traversal order. Lua's string hashing is
 * seeded per process, so the plain `pairs` order could change between two
 * compilations of the same spec. */
static const char prelude[] =
    "local next, type, sort, rawget, getmetatable = next, type, table.sort, rawget, getmetatable\n"
    "local rank = {boolean = 1, number = 2, string = 3}\n"
    "local function before(a, b)\n"
    "  local ta, tb = type(a), type(b)\n"
    "  if ta ~= tb then return (rank[ta] or 4) < (rank[tb] or 4) end\n"
    "  if ta == 'boolean' then return (not a) and b end\n"
    "  if ta == 'number' or ta == 'string' then return a < b end\n"
    "  return false\n"
    "end\n"
    "return function(t)\n"
    "  local mt = getmetatable(t)\n"
    "  if type(mt) == 'table' and rawget(mt, '__pairs') then return rawget(mt, '__pairs')(t) end\n"
    "  if type(t) ~= 'table' then error(\"bad argument #1 to 'pairs' (table expected, got \" .. type(t) .. ')', 2) end\n"
    "  local keys, n, plain = {}, 0, {}\n"
    "  for k in next, t do\n"
    "    if rank[type(k)] then n = n + 1; keys[n] = k else plain[#plain + 1] = k end\n"
    "  end\n"
    "  sort(keys, before)\n"
    "  for i = 1, #plain do keys[n + i] = plain[i] end\n"
    "  local i = 0\n"
    "  return function()\n"
    "    i = i + 1\n"
    "    local k = keys[i]\n"
    "    if k ~= nil then return k, rawget(t, k) end\n"
    "  end, t, nil\n"
    "end\n";

static void copy_fields(lua_State *L, int from, int to, const char *const *names, size_t n) {
  for (size_t i = 0; i < n; i++) {
    lua_getfield(L, from, names[i]);
    lua_setfield(L, to, names[i]);
  }
}

/* The base functions the sandbox keeps, pcall, xpcall, setmetatable,
 * collectgarbage and load guarded, and _G the sandbox itself. */
static void env_base(lua_State *L, int G, int E) {
  static const char *const base[] = {"assert", "error", "ipairs", "next", "rawequal",
                                     "rawget", "rawlen", "rawset", "select", "tonumber",
                                     "tostring", "type", "getmetatable", "_VERSION"};
  copy_fields(L, G, E, base, RP_ARRAY_LEN(base));
  lua_pushcfunction(L, sb_pcall);
  lua_setfield(L, E, "pcall");
  lua_pushcfunction(L, sb_xpcall);
  lua_setfield(L, E, "xpcall");
  lua_getfield(L, G, "setmetatable");
  lua_pushcclosure(L, sb_setmetatable, 1);
  lua_setfield(L, E, "setmetatable");
  lua_getfield(L, G, "collectgarbage");
  lua_pushcclosure(L, sb_collectgarbage, 1);
  lua_setfield(L, E, "collectgarbage");
  lua_pushvalue(L, E);
  lua_pushcclosure(L, sb_load, 1);
  lua_setfield(L, E, "load");
  lua_pushvalue(L, E);
  lua_setfield(L, E, "_G");
}

/* The libraries: the real tables, minus what could leave the sandbox or
 * break determinism. string.dump goes from the real table because the
 * string metatable's __index reaches it. */
static void env_libs(lua_State *L, int G, int E) {
  static const char *const libnames[] = {LUA_STRLIBNAME, LUA_TABLIBNAME,
                                         LUA_MATHLIBNAME, LUA_UTF8LIBNAME};
  copy_fields(L, G, E, libnames, RP_ARRAY_LEN(libnames));
  lua_getfield(L, E, LUA_STRLIBNAME);
  lua_pushcfunction(L, sb_dump);
  lua_setfield(L, -2, "dump");
  wrap(L, "find", sb_pattern, PAT_FIND);
  wrap(L, "match", sb_pattern, PAT_MATCH);
  wrap(L, "gmatch", sb_pattern, PAT_GMATCH);
  wrap(L, "gsub", sb_pattern, PAT_GSUB);
  wrap(L, "rep", sb_rep, 0);
  wrap(L, "lower", sb_linear, LIN_LOWER);
  wrap(L, "upper", sb_linear, LIN_UPPER);
  wrap(L, "reverse", sb_linear, LIN_REVERSE);
  wrap(L, "sub", sb_linear, LIN_SUB);
  wrap(L, "byte", sb_linear, LIN_BYTE);
  wrap(L, "char", sb_linear, LIN_CHAR);
  wrap(L, "format", sb_linear, LIN_FORMAT);
  wrap(L, "packsize", sb_linear, LIN_PACKSIZE);
  wrap(L, "pack", sb_pack, 0);
  wrap(L, "unpack", sb_pack, 0);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_TABLIBNAME);
  wrap(L, "move", sb_move, 0);
  wrap(L, "concat", sb_span_call, 1);
  wrap(L, "unpack", sb_span_call, 0);
  wrap(L, "insert", sb_insert, 0);
  wrap(L, "remove", sb_remove, 0);
  wrap(L, "sort", sb_sort, 0);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_UTF8LIBNAME);
  wrap(L, "char", sb_linear, LIN_UTF8_CHAR);
  wrap(L, "codepoint", sb_linear, LIN_UTF8_CODEPOINT);
  wrap(L, "len", sb_linear, LIN_UTF8_LEN);
  wrap(L, "offset", sb_linear, LIN_UTF8_OFFSET);
  wrap(L, "codes", sb_utf8_codes, 0);
  lua_pop(L, 1);
  lua_pushvalue(L, E);
  wrap(L, "tonumber", sb_linear, LIN_TONUMBER);
  lua_pop(L, 1);
  lua_getfield(L, E, LUA_MATHLIBNAME);
  lua_getfield(L, -1, "randomseed");
  lua_pushinteger(L, 0);
  lua_call(L, 1, 0); /* math.random is seeded and therefore deterministic */
  lua_pushnil(L);
  lua_setfield(L, -2, "randomseed");
  lua_pop(L, 1);
}

/* The string metatable: a read-only proxy answers getmetatable(""). */
static void env_string_meta(lua_State *L) {
  lua_pushliteral(L, "");
  RP_ASSERT(lua_getmetatable(L, -1));
  lua_newtable(L); /* proxy */
  lua_newtable(L); /* its metatable */
  lua_pushcfunction(L, sb_strmeta);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, sb_strmeta);
  lua_setfield(L, -2, "__newindex");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 2);
}

/* Builds the sandbox environment and leaves it on the stack top. */
void hk_build_env(lua_State *L) {
  static const struct { const char *name; lua_CFunction fn; } libs[] = {
      {LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string},
      {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
      {LUA_UTF8LIBNAME, luaopen_utf8}};
  for (size_t i = 0; i < RP_ARRAY_LEN(libs); i++) {
    luaL_requiref(L, libs[i].name, libs[i].fn, 1);
    lua_pop(L, 1);
  }
  lua_pushglobaltable(L);
  int G = lua_gettop(L);
  lua_newtable(L);
  int E = lua_gettop(L);
  env_base(L, G, E);
  env_libs(L, G, E);
  env_string_meta(L);
  /* pairs, from the prelude. */
  RP_ASSERT(luaL_loadbufferx(L, prelude, sizeof prelude - 1, "=prelude", "t") == LUA_OK);
  lua_call(L, 0, 1);
  lua_setfield(L, E, "pairs");

  /* Removed names raise instead of reading nil; the metatable is hidden. */
  lua_newtable(L);
  lua_pushcfunction(L, sb_env_index);
  lua_setfield(L, -2, "__index");
  lua_pushboolean(L, 0);
  lua_setfield(L, -2, "__metatable");
  lua_setmetatable(L, E);
  lua_remove(L, G);
}

