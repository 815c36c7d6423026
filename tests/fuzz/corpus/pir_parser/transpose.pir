graph tp(%img: f32[batch,2,6,6]) {
  %y = transpose(%img) {perm=[0,2,3,1]} : f32[batch,6,6,2] loc("y")
  return (y=%y)
}
