-- A refusal cannot be caught and ignored.
return function(ctx)
  local ok = pcall(function() return io.open("/etc/passwd") end)
  return {}
end
