graph cat(%x: f32[batch,4]) {
  %y = concat(%x, %x) {axis=1} : f32[batch,8] loc("y")
  return (y=%y)
}
