graph Softplus(%x: f32[batch,4]) {
  %y = softplus(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
