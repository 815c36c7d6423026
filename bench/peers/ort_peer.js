// ONNX Runtime peer of bench/peers/run.sh: times one model through onnxruntime-node's native binding.
//
// Usage: node ort_peer.js SPEC.json
// SPEC: {"model": "x.onnx", "threads": 1, "min_time": 1.0, "min_calls": 5, "warmup": 3, "identity": "id.onnx",
//        "points": [{"batch": 1, "inputs": [{"name", "dtype", "dims", "file"}], "out_dir": "..."}]}
// Prints one JSON object: per point the sorted per-call times (µs) and the output files written, or
// the error of that point (the other points still run); `identity` is optional.
// The binding's `run` is called directly (synchronously), not through the promise-based API, so
// what is timed is the binding's per-call cost plus ONNX Runtime's own; `identity` measures the first.
'use strict';
const fs = require('fs');
const path = require('path');

const ortDir = process.env.POLICYC_ORT_NODE;  // .../node_modules/onnxruntime-node
if (!ortDir) throw new Error('POLICYC_ORT_NODE is not set (the onnxruntime-node package folder)');
const { binding } = require(path.join(ortDir, 'dist', 'binding.js'));
const { Tensor } = require(path.join(ortDir, '..', 'onnxruntime-common'));

const spec = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
// Typed arrays per ONNX Runtime tensor type; bool is one byte per element (numpy's layout), float16 raw bits.
const arrays = {
  float32: Float32Array, float64: Float64Array, float16: Uint16Array, bool: Uint8Array,
  uint8: Uint8Array, int8: Int8Array, uint16: Uint16Array, int16: Int16Array,
  uint32: Uint32Array, int32: Int32Array, uint64: BigUint64Array, int64: BigInt64Array,
};

function session(modelPath) {
  const s = new binding.InferenceSession();
  s.loadModel(modelPath, {
    intraOpNumThreads: spec.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  return s;
}

// Calls `call` until both min_calls and min_time are reached, after `warmup` untimed calls.
function timeCalls(call) {
  for (let i = 0; i < spec.warmup; ++i) call();
  const us = [];
  const start = process.hrtime.bigint();
  for (;;) {
    const t0 = process.hrtime.bigint();
    call();
    const t1 = process.hrtime.bigint();
    us.push(Number(t1 - t0) / 1e3);
    if (us.length >= spec.min_calls && Number(t1 - start) / 1e9 >= spec.min_time) break;
  }
  return us.sort((a, b) => a - b);
}

function tensorOf(input) {
  const buf = fs.readFileSync(input.file);
  const Arr = arrays[input.dtype];
  if (!Arr) throw new Error(`input '${input.name}': dtype ${input.dtype} is not handled`);
  const data = new Arr(buf.buffer, buf.byteOffset, buf.byteLength / Arr.BYTES_PER_ELEMENT);
  return new Tensor(input.dtype, data, input.dims);
}

const result = { threads: spec.threads, points: [] };
const s = session(spec.model);
const fetches = {};
for (const n of s.outputNames) fetches[n] = null;
for (const p of spec.points) {
  try {
    const feeds = {};
    for (const input of p.inputs) feeds[input.name] = tensorOf(input);
    const out = s.run(feeds, fetches, {});
    const files = {};
    for (const [k, n] of s.outputNames.entries()) {
      const t = out[n];
      if (!ArrayBuffer.isView(t.data)) throw new Error(`output '${n}' of type ${t.type} is not numeric`);
      // numbered: names that differ only in the characters replaced would otherwise share a file
      const file = path.join(p.out_dir, `ort_${k}_${n.replace(/[^A-Za-z0-9_.-]/g, '_')}.bin`);
      fs.writeFileSync(file, Buffer.from(t.data.buffer, t.data.byteOffset, t.data.byteLength));
      files[n] = { file, dims: t.dims, type: t.type };
    }
    result.points.push({ batch: p.batch, us: timeCalls(() => s.run(feeds, fetches, {})), outputs: files });
  } catch (e) {
    // One batch size that fails (a shape the model rejects) leaves the others' figures.
    result.points.push({ batch: p.batch, error: String(e && e.message ? e.message : e).split('\n')[0] });
  }
}
if (spec.identity) {
  // The binding's own per-call cost: an Identity model on a [1, 1] float tensor.
  const id = session(spec.identity);
  const feeds = { x: new Tensor('float32', new Float32Array(1), [1, 1]) };
  const f = {};
  for (const n of id.outputNames) f[n] = null;
  result.identity_us = timeCalls(() => id.run(feeds, f, {}));
}
process.stdout.write(JSON.stringify(result) + '\n');
