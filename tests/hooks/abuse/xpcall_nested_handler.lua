-- Handlers that call xpcall again with looping handlers of their own.
return function(ctx)
  local function spin() while true do end end
  return xpcall(spin, function()
    return xpcall(spin, function() while true do end end)
  end)
end
