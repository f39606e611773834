-- Sorting a thousand references to one 1 MiB string (the longest a hook
-- may make): every comparison reads it whole in C, 2 x 10^4 comparisons of
-- 2^20 bytes each, with not one instruction counted. table.sort is charged
-- for its comparisons times the longest string and refused (E0619).
return function(ctx)
  local s = string.rep("x", 1 << 20)
  local t = {}
  for i = 1, 1000 do t[i] = s end
  table.sort(t)
  return t
end
