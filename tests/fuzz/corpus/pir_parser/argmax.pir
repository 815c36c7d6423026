graph am(%x: f32[batch,4]) {
  %y = argmax(%x) {axis=1, keepdims=0} : i64[batch] loc("y")
  return (y=%y)
}
