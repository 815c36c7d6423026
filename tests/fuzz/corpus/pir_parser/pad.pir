graph pad(%x: f32[batch,4]) {
  %y = pad(%x) {pads=[0,1,0,2], mode="reflect"} : f32[batch,7] loc("y")
  return (y=%y)
}
