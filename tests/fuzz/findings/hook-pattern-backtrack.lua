-- Finding (fuzz_hook): a pattern that backtracks runs inside one C call
-- (string.find), where neither the instruction budget nor the wall-clock
-- deadline is checked, so the hook runs far past RANKPLAN_HOOK_TIMEOUT_MS.
-- Replay: build-fuzz/tests/fuzz/fuzz_hook -timeout=30 this-file
return function(ctx)
  local s = string.rep("a", 48)
  return string.find(s, ".-.-.-.-.-.-.-b")
end
