graph Sigmoid(%x: f32[batch,4]) {
  %y = sigmoid(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
