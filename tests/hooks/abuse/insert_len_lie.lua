-- A `__len` that claims 2^40 elements makes table.insert shift 2^40 nil
-- elements in C without allocating. The shift is charged before it starts
-- and refused (E0619).
return function(ctx)
  local t = setmetatable({}, {__len = function() return 1 << 40 end})
  table.insert(t, 1, "x")
  return t
end
