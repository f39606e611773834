-- A result whose fields come from __index: the compiler reads raw fields
-- only, so this is a list of empty tables and no user code runs.
return function(ctx)
  local out = {}
  local mt = {__index = function() while true do end end}
  for r = 0, ctx.world_size - 1 do
    out[#out + 1] = setmetatable({}, mt)
  end
  return out
end
