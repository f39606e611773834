return function(ctx)
  return {{rank = 0, node = 0, gpu = 0}}
end
