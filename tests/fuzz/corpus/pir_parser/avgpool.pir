graph ap(%img: f32[batch,2,6,6]) {
  %y = avg_pool(%img) {kernel_shape=[3,3], strides=[1,1], pads=[1,1,1,1]} : f32[batch,2,6,6] loc("y")
  return (y=%y)
}
