-- As xpcall_loop_handler.lua, stopped by the wall-clock deadline instead of the budget.
-- inside the count hook, where Lua would run the handler with hooks off.
return function(ctx)
  return xpcall(function() while true do end end, function() while true do end end)
end
