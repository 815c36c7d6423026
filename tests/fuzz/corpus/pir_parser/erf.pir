graph Erf(%x: f32[batch,4]) {
  %y = erf(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
