graph Tanh(%x: f32[batch,4]) {
  %y = tanh(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
