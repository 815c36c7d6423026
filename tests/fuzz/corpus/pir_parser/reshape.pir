graph rs(%img: f32[batch,2,6,6]) {
  %y = reshape(%img) {shape=[-1,72]} : f32[batch,72] loc("y")
  return (y=%y)
}
