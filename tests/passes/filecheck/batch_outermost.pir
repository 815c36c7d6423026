# batch-outermost: a [T, batch, E] chain between a transpose in and a transpose out (as
# nn.MultiheadAttention's export has it) is rebuilt batch-first: the linear, the bias add, the
# reshape into heads, softmax over the last axis; both transposes become plain batch-first ones
# and no value keeps the batch inside. A chain through an op without a rule (pad) stays as it is.
# PASSES: batch-outermost,dce
# CHECK-LABEL: graph batch_outermost(%x: f32[batch,3,4]) {
# CHECK: linear(%x, %w, %b) : f32[batch,3,4]
# CHECK: relu({{.*}}) : f32[batch,3,4]
# CHECK: reshape({{.*}}) {shape=[-1,3,2,2]} : f32[batch,3,2,2]
# CHECK: softmax({{.*}}) {axis=3} : f32[batch,3,2,2]
# CHECK: %heads = transpose({{.*}}) {perm=[0,2,1,3]} : f32[batch,2,3,2]
# CHECK: %y = reshape({{.*}}) {shape=[-1,3,4]} : f32[batch,3,4]
# CHECK-NOT: f32[3,batch
# CHECK: %t2 = transpose(%x) {perm=[1,0,2]} : f32[3,batch,4]
# CHECK-NEXT: %p = pad(%t2) {{.*}} : f32[3,batch,6]
# CHECK: return (y=%y, heads=%heads, z=%z)
graph batch_outermost(%x: f32[batch,3,4]) {
  %w = param f32[4,4] [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]
  %b = param f32[4] [0.5, -0.5, 0.25, -0.25]
  %t = transpose(%x) {perm=[1,0,2]} : f32[3,batch,4]
  %l = linear(%t, %w, %b) : f32[3,batch,4]
  %r = relu(%l) : f32[3,batch,4]
  %h = reshape(%r) {shape=[3,-1,2,2]} : f32[3,batch,2,2]
  %s = softmax(%h) {axis=-1} : f32[3,batch,2,2]
  %heads = transpose(%s) {perm=[1,2,0,3]} : f32[batch,2,3,2]
  %back = reshape(%s) {shape=[3,-1,4]} : f32[3,batch,4]
  %y = transpose(%back) {perm=[1,0,2]} : f32[batch,3,4]
  %t2 = transpose(%x) {perm=[1,0,2]} : f32[3,batch,4]
  %p = pad(%t2) {pads=[0,0,1,0,0,1]} : f32[3,batch,6]
  %z = transpose(%p) {perm=[1,0,2]} : f32[batch,3,6]
  return (y=%y, heads=%heads, z=%z)
}
