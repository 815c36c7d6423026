graph bn(%img: f32[batch,2,6,6]) {
  %s = param f32[2] [0.12573022, -0.13210486] loc("s")
  %bb = param f32[2] [0.12573022, -0.13210486] loc("bb")
  %m = param f32[2] [0.12573022, -0.13210486] loc("m")
  %v = param f32[2] [1, 1] loc("v")
  %y = batch_norm(%img, %s, %bb, %m, %v) : f32[batch,2,6,6] loc("y")
  return (y=%y)
}
