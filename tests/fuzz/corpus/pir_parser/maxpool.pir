graph mp(%img: f32[batch,2,6,6]) {
  %y = max_pool(%img) {kernel_shape=[2,2], strides=[2,2], pads=[0,0,0,0], dilations=[1,1]} : f32[batch,2,3,3] loc("y")
  return (y=%y)
}
