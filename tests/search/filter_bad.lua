-- Returns a number where the filter hook expects true, false or a reason.
return function(ctx)
  return ctx.candidate.tp
end
