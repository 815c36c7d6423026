graph rm(%x: f32[batch,4]) {
  %y = reduce_mean(%x) {axes=[1]} : f32[batch,1] loc("y")
  return (y=%y)
}
