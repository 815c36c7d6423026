graph Neg(%x: f32[batch,4]) {
  %y = neg(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
