# fold-constants: an op on params only becomes a param holding its value; an op that reads an
# input stays.
# PASSES: fold-constants,dce
# CHECK-LABEL: graph fold_constants(%x: f32[batch,2]) {
# CHECK: %s = param f32[2] [4, 6]
# CHECK-NEXT: %y = mul(%x, %s) : f32[batch,2]
# CHECK-NOT: add(
# CHECK: return (y=%y)
graph fold_constants(%x: f32[batch,2]) {
  %p = param f32[2] [1, 2]
  %q = param f32[2] [3, 4]
  %s = add(%p, %q) : f32[2]
  %y = mul(%x, %s) : f32[batch,2]
  return (y=%y)
}
