-- An ordinary error whose message handler never returns: the handler is
-- counted like any other code and the budget stops it.
return function(ctx)
  return xpcall(function() error("x") end, function() while true do end end)
end
