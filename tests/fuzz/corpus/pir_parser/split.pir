graph sp(%x: f32[batch,4]) {
  %a, %b = split(%x) {axis=1} : f32[batch,2], f32[batch,2] loc("a")
  return (a=%a, b=%b)
}
