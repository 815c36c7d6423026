graph clip(%x: f32[batch,4]) {
  %y = clip(%x) {min=-1.0, max=1.0} : f32[batch,4] loc("y")
  return (y=%y)
}
