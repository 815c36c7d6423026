graph ln(%x: f32[batch,4]) {
  %g = param f32[4] [0.12573022, -0.13210486, 0.64042264, 0.104900114] loc("g")
  %bb = param f32[4] [0.12573022, -0.13210486, 0.64042264, 0.104900114] loc("bb")
  %y = layer_norm(%x, %g, %bb) : f32[batch,4] loc("y")
  return (y=%y)
}
