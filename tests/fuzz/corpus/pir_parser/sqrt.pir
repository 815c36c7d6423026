graph Sqrt(%x: f32[batch,4]) {
  %y = sqrt(%x) : f32[batch,4] loc("y")
  return (y=%y)
}
