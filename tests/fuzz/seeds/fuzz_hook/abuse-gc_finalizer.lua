-- A finalizer would run after the hook returned.
return function(ctx)
  setmetatable({}, {__gc = function() while true do end end})
  return {}
end
