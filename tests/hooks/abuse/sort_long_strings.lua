-- Sorting a thousand references to one 16 MiB string: every comparison
-- reads the whole string in C, about 10^4 comparisons of 2^24 bytes each,
-- with not one instruction counted. table.sort is charged for its
-- comparisons times the longest string and refused (E0619).
return function(ctx)
  local s = string.rep("x", 1 << 24)
  local t = {}
  for i = 1, 1000 do t[i] = s end
  table.sort(t)
  return t
end
