return function(ctx)
  local x = = 1
end
