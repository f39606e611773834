-- utf8.codes' iterator skips continuation bytes in C from any position it
-- is given: each call below walks 1 MiB, 10^5 calls 10^11 bytes. The
-- iterator counts what it skips against the budget (E0619).
return function(ctx)
  local s = "a" .. string.rep("\x80", (1 << 20) - 1)
  local f = utf8.codes(s)
  for i = 1, 100000 do f(s, 1) end
  return {}
end
