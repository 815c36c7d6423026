graph sl(%x: f32[batch,4]) {
  %y = slice(%x) {starts=[1], ends=[3], axes=[1]} : f32[batch,2] loc("y")
  return (y=%y)
}
