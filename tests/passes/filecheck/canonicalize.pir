# canonicalize: a gemm with a transposed weight becomes linear, x * sigmoid(x) becomes silu, an
# identity goes away; x * sigmoid(h) with h another value stays what it is.
# PASSES: canonicalize,dce
# CHECK-LABEL: graph canonicalize(%x: f32[batch,3]) {
# CHECK: %g = linear(%x, %w, %b) : f32[batch,2]
# CHECK-NEXT: %y0 = silu(%g) : f32[batch,2]
# CHECK-NOT: identity
# CHECK: %s2 = sigmoid(%x2) : f32[batch,2]
# CHECK-NEXT: %z = mul(%g, %s2) : f32[batch,2]
# CHECK: return (y=%y0, z=%z)
graph canonicalize(%x: f32[batch,3]) {
  %w = param f32[2,3] [1, 2, 3, 4, 5, 6]
  %b = param f32[2] [0.5, -0.5]
  %g = gemm(%x, %w, %b) {trans_b=1} : f32[batch,2]
  %s = sigmoid(%g) : f32[batch,2]
  %y0 = mul(%g, %s) : f32[batch,2]
  %y = identity(%y0) : f32[batch,2]
  %x2 = tanh(%g) : f32[batch,2]
  %s2 = sigmoid(%x2) : f32[batch,2]
  %z = mul(%g, %s2) : f32[batch,2]
  return (y=%y, z=%z)
}
