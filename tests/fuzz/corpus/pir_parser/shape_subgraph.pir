graph shp(%x: f32[batch,4]) {
  %y = reshape(%x) {shape=[0,-1]} : f32[batch,4] loc("y")
  return (y=%y)
}
