-- Turns a function into a precompiled chunk.
return function(ctx)
  local chunk = string.dump(function() return 1 end)
  return load(chunk)()
end
