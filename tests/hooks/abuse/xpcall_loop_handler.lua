-- A looping body and a looping message handler: the budget error is raised
-- inside the count hook, where Lua would run the handler with hooks off.
return function(ctx)
  return xpcall(function() while true do end end, function() while true do end end)
end
