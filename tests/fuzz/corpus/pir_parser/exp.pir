graph Exp(%x: f32[batch,4]) {
  %y = exp(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
