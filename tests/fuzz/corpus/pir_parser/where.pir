graph wh(%x: f32[batch,4]) {
  %c = param f32[4] [0.18905339, -0.5227485, -0.41306356, -2.4414673] loc("c")
  %m = greater(%x, %c) : bool[batch,4] loc("m")
  %y = where(%m, %x, %c) : f32[batch,4] loc("y")
  return (y=%y)
}
