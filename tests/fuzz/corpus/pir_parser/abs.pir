graph Abs(%x: f32[batch,4]) {
  %y = abs(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
