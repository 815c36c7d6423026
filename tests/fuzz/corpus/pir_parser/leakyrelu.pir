graph LeakyRelu(%x: f32[batch,4]) {
  %y = leaky_relu(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
