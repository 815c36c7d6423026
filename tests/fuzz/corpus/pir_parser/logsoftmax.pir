graph ls(%x: f32[batch,4]) {
  %y = log_softmax(%x) {axis=1} : f32[batch,4] loc("y")
  return (y=%y)
}
