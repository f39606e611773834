-- Tries to catch the budget error with pcall and keep looping.
return function(ctx)
  while true do
    pcall(function()
      while true do end
    end)
  end
end
