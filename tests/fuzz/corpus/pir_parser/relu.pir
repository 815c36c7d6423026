graph Relu(%x: f32[batch,4]) {
  %y = relu(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
