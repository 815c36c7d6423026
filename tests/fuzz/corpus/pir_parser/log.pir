graph Log(%x: f32[batch,4]) {
  %y = log(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
