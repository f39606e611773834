-- One VM instruction reads its string operands whole: `a < b` compares in
-- C (strcoll, one call per NUL-separated piece, so strings of NUL bytes
-- are the slowest), `a == c` of two distinct equal strings runs memcmp,
-- `h .. h` copies both halves and `d + 0` reads all of d's digits. With
-- the longest strings a hook may make (1 MiB), a thousand such
-- instructions between two count-hook checks would take seconds; once such
-- strings exist the count hook runs every instruction, so the loop ends on
-- its deadline (E0608) within an instruction of it.
-- Run with a large instruction budget and a short deadline.
return function(ctx)
  local n = 1 << 20
  local a = string.rep("\0", n - 1) .. "a"
  local b = string.rep("\0", n - 1) .. "b"
  local c = string.rep("\0", n - 1) .. "a" -- equal to a, another object
  local h = string.rep("\0", n // 2)
  local d = string.rep("0", n - 2) .. ".5"
  local hits = 0
  while true do
    -- each comparison is two instructions (the test and its jump)
    if a < b and a < b and a < b and a < b and a < b and a < b then
      hits = hits + 1
    end
    if a == c then hits = hits + 1 end
    if #(h .. h) == n then hits = hits + 1 end
    if d + 0 == 0.5 then hits = hits + 1 end
  end
end
