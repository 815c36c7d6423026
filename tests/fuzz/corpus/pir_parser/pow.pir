graph Pow(%x: f32[batch,4]) {
  %c = param f32[4] [0.34558418, 0.82161814, 0.33043706, -1.3031572] loc("c")
  %y = pow(%x, %c) : f32[batch,4] loc("y")
  return (y=%y)
}
