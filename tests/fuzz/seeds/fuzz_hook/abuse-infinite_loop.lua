-- Never returns: the instruction budget must stop it.
return function(ctx)
  local n = 0
  while true do
    n = n + 1
  end
end
