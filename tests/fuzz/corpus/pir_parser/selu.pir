graph Selu(%x: f32[batch,4]) {
  %y = selu(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
