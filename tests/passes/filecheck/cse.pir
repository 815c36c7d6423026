# cse: two tanh of the same value become one; tanh of another value, and exp of the same one,
# stay apart. dce then drops what no output reads.
# PASSES: cse,dce
# CHECK-LABEL: graph cse(%x: f32[batch,4], %v: f32[batch,4]) {
# CHECK: %a = tanh(%x) : f32[batch,4]
# CHECK-NOT: tanh(%x)
# CHECK: %o = tanh(%v) : f32[batch,4]
# CHECK: %e = exp(%x) : f32[batch,4]
# CHECK: %c = add(%a, %a) : f32[batch,4]
# CHECK-NOT: unused
# CHECK: return (c=%c, o=%o, e=%e)
graph cse(%x: f32[batch,4], %v: f32[batch,4]) {
  %a = tanh(%x) : f32[batch,4]
  %b = tanh(%x) : f32[batch,4]
  %o = tanh(%v) : f32[batch,4]
  %e = exp(%x) : f32[batch,4]
  %c = add(%a, %b) : f32[batch,4]
  %unused = exp(%v) : f32[batch,4]
  return (c=%c, o=%o, e=%e)
}
