graph Elu(%x: f32[batch,4]) {
  %y = elu(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
