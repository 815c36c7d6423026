graph softmax(%x: f32[batch,4]) {
  %y = softmax(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
