graph fl(%img: f32[batch,2,6,6]) {
  %y = flatten(%img) : f32[batch,72] loc("y")
  return (y=%y)
}
