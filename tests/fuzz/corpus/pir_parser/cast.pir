graph cast(%u: u8[batch,4]) {
  %y = cast(%u) {to="f32"} : f32[batch,4] loc("y")
  return (y=%y)
}
