-- A sandbox refusal whose handler loops: the refusal must still end the run.
return function(ctx)
  return xpcall(function() return os.execute("true") end, function() while true do end end)
end
