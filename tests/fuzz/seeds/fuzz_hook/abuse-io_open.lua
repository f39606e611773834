return function(ctx)
  local f = io.open("/etc/passwd")
  return {}
end
