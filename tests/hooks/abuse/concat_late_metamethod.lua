-- The same trick with the metamethod added after setmetatable, which
-- setmetatable cannot see: table.concat is charged one step per element
-- before it starts, so 2^40 elements are refused (E0619).
return function(ctx)
  local mt = {}
  local t = setmetatable({}, mt)
  mt.__index = rawlen
  return #table.concat(t, "", 1, 2^40)
end
