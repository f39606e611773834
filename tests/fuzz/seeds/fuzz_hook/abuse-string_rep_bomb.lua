-- Asks for a 1 GiB string (string.rep's own limit is 2 GiB).
return function(ctx)
  local s = string.rep("x", 1 << 30)
  return #s
end
