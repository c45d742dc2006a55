// Side-by-side benchmark: the quickcell "await a slow tool, snapshot, restore,
// finish" scenario, run with the quickjs-wasi npm package on Node.
//
// Run: cd benches/compare && npm ci && node quickjs-wasi.mjs   (ITERATIONS=50)
// Prints one JSON line with the median time per step in microseconds.
//
// How the scenario maps onto quickjs-wasi, and where it differs from quickcell:
// - The cell source is wrapped as `(async () => {\n<cell>\n})()`, the same
//   wrapper quickcell uses, and evaluated as a global script with
//   vm.evalCode(); the call returns the cell's promise, pending at the await.
// - The WebAssembly.Module is compiled once, before the timed loop, and reused
//   by every QuickJS.create() and QuickJS.restore() (the package's recommended
//   use). Compilation is not in any step.
// - `create` = QuickJS.create({ wasm: module }) plus installing the host
//   function `slowTool` (vm.newFunction + vm.setProp on the global object).
// - `slowTool` is a host function that returns a guest Promise, built with
//   vm.construct(Promise, executor); the executor is a short-lived host
//   function that keeps (dup()s) the guest's resolve/reject functions so the
//   host can settle the call later. The package's own vm.newPromise() does not
//   expose its resolver handles, so they could not be carried over a restore.
// - A restored VM has no host-side JS state: the host keeps the pending call's
//   resolve/reject functions and the cell's promise as numbers from
//   vm.exportHandle() (pointers into the VM's linear memory, so they stay
//   valid in a VM restored from a snapshot taken while they were alive), and
//   imports them in the restored VM with vm.importHandle(). quickcell keeps
//   that bookkeeping inside its own snapshot instead.
// - Host functions are keyed by name in the snapshot and must be re-registered
//   after restore: `restore` = QuickJS.deserializeSnapshot(bytes) +
//   QuickJS.restore(snapshot, { wasm: module }) + vm.registerHostCallback(
//   'slowTool', ...). The cell does not call slowTool again; the callback is
//   registered so the restored VM is as usable as the original.
// - `snapshot` = vm.snapshot() (copies the whole WASM linear memory) +
//   QuickJS.serializeSnapshot() (versioned header + raw memory, uncompressed);
//   snapshot_bytes is the length of that serialized buffer.
// - `finish` = importHandle() the resolver and the cell's promise, call resolve
//   with vm.hostToHandle({ ok: true, n: 42 }), vm.executePendingJobs(), then
//   `await vm.resolvePromise(cellPromise)` to read the result, which must be 1042.
//   The await adds one host microtask turn to this step.
// - `loop` = vm.evalCode() of a 1e6-iteration loop in a fresh VM
//   (created outside the step), and reading its number; the same loop as
//   quickcell's `loop` step, which runs it with fuel metering on.
// - VM disposal is outside every timed step.
// - Times come from process.hrtime.bigint(); each step's median over the
//   iterations is reported, with no separate warm-up run.

import { readFile } from 'node:fs/promises';
import { QuickJS } from 'quickjs-wasi';

const pkg = JSON.parse(
  await readFile(new URL(import.meta.resolve('quickjs-wasi/package.json')), 'utf8'),
);
const wasmBytes = await readFile(new URL(import.meta.resolve('quickjs-wasi/quickjs.wasm')));
const wasmModule = await WebAssembly.compile(wasmBytes);

const CELL =
  'const big = Array.from({length: 1000}, (_, i) => ({i, s: "x" + i})); ' +
  'const r = await slowTool({q: "hi"}); return r.n + big.length;';
const WRAPPED = `(async () => {\n${CELL}\n})()`;
const EXPECTED = 1042;
const LOOP = '(() => { let s = 0; for (let i = 0; i < 1e6; i++) s += i; return s; })()';
const LOOP_VALUE = 499999500000;
const STEPS = ['create', 'evaluate', 'snapshot', 'restore', 'finish', 'loop'];

const iterations = Number.parseInt(process.env.ITERATIONS ?? '50', 10);
if (!Number.isInteger(iterations) || iterations < 1) {
  throw new Error(`ITERATIONS must be a positive integer, got ${process.env.ITERATIONS}`);
}

// After restore, a call to slowTool would start a new pending call; this cell
// never makes one, so the re-registered callback only needs to exist.
function installSlowTool(vm, pendingCalls, register) {
  const slowTool = function (argsHandle) {
    const args = vm.dump(argsHandle);
    let resolve;
    let reject;
    const executor = vm.newEphemeralFunction((res, rej) => {
      resolve = res.dup(); // argument handles are borrowed: keep our own
      reject = rej.dup();
      return vm.undefined;
    });
    const promiseCtor = vm.global.getProp('Promise');
    try {
      const promise = vm.construct(promiseCtor, executor);
      pendingCalls.push({ args, resolve, reject });
      return promise;
    } finally {
      promiseCtor.dispose();
      executor.dispose();
    }
  };
  if (register) {
    vm.registerHostCallback('slowTool', slowTool);
  } else {
    const fn = vm.newFunction('slowTool', slowTool);
    vm.setProp(vm.global, 'slowTool', fn);
    fn.dispose();
  }
}

async function runOnce() {
  const t = {};
  let t0;

  // create
  t0 = process.hrtime.bigint();
  const vm = await QuickJS.create({ wasm: wasmModule });
  const pendingCalls = [];
  installSlowTool(vm, pendingCalls, false);
  t.create = process.hrtime.bigint() - t0;

  // evaluate: run the cell until it awaits slowTool
  t0 = process.hrtime.bigint();
  const cellPromise = vm.evalCode(WRAPPED, '<cell>');
  vm.executePendingJobs();
  t.evaluate = process.hrtime.bigint() - t0;
  if (cellPromise.promiseState !== 0 || pendingCalls.length !== 1) {
    throw new Error(
      `cell is not suspended on one slowTool call (promiseState=${cellPromise.promiseState}, calls=${pendingCalls.length})`,
    );
  }
  if (pendingCalls[0].args?.q !== 'hi') {
    throw new Error(`slowTool got unexpected arguments: ${JSON.stringify(pendingCalls[0].args)}`);
  }

  // snapshot: tokens for the host-held handles, then the memory image as bytes
  t0 = process.hrtime.bigint();
  const tokens = {
    cell: vm.exportHandle(cellPromise),
    resolve: vm.exportHandle(pendingCalls[0].resolve),
    reject: vm.exportHandle(pendingCalls[0].reject),
  };
  const bytes = QuickJS.serializeSnapshot(vm.snapshot());
  t.snapshot = process.hrtime.bigint() - t0;
  vm.dispose();

  // restore: a fresh VM from the bytes, with the host function re-registered
  t0 = process.hrtime.bigint();
  const vm2 = await QuickJS.restore(QuickJS.deserializeSnapshot(bytes), { wasm: wasmModule });
  installSlowTool(vm2, [], true);
  t.restore = process.hrtime.bigint() - t0;

  // finish: settle the pending tool call and run the cell to completion
  t0 = process.hrtime.bigint();
  const resolve = vm2.importHandle(tokens.resolve);
  const cell = vm2.importHandle(tokens.cell);
  const value = vm2.hostToHandle({ ok: true, n: 42 });
  vm2.callFunction(resolve, vm2.undefined, value).dispose();
  vm2.executePendingJobs();
  const settled = await vm2.resolvePromise(cell);
  t.finish = process.hrtime.bigint() - t0;

  if ('error' in settled) {
    const message = vm2.dump(settled.error);
    throw new Error(`cell rejected: ${message instanceof Error ? message.message : message}`);
  }
  const result = vm2.dump(settled.value);
  if (result !== EXPECTED) {
    throw new Error(`cell returned ${JSON.stringify(result)}, expected ${EXPECTED}`);
  }
  settled.value.dispose();
  value.dispose();
  resolve.dispose();
  cell.dispose();
  vm2.dispose();

  return { times: t, snapshotBytes: bytes.length };
}

// loop: a fresh VM (created outside the step) runs the 1e6-iteration loop.
// The loops run after the scenario, not inside its iterations, as on the
// quickcell side: a step right after 60 ms of interpreter loop would measure
// caches the loop evicted.
async function loopOnce() {
  const vm3 = await QuickJS.create({ wasm: wasmModule });
  const t0 = process.hrtime.bigint();
  const looped = vm3.evalCode(LOOP, '<loop>');
  const loopValue = vm3.dump(looped);
  const elapsed = process.hrtime.bigint() - t0;
  looped.dispose();
  vm3.dispose();
  if (loopValue !== LOOP_VALUE) {
    throw new Error(`the loop returned ${JSON.stringify(loopValue)}, expected ${LOOP_VALUE}`);
  }
  return elapsed;
}

function medianUs(values) {
  const sorted = [...values].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  const mid = sorted.length >> 1;
  const ns =
    sorted.length % 2 === 1 ? Number(sorted[mid]) : (Number(sorted[mid - 1]) + Number(sorted[mid])) / 2;
  return Math.round(ns / 100) / 10; // microseconds, one decimal
}

const samples = Object.fromEntries(STEPS.map((s) => [s, []]));
let snapshotBytes = 0;
for (let i = 0; i < iterations; i++) {
  const { times, snapshotBytes: size } = await runOnce();
  for (const s of STEPS) if (s !== 'loop') samples[s].push(times[s]);
  snapshotBytes = size;
}
for (let i = 0; i < iterations; i++) samples.loop.push(await loopOnce());

console.log(
  JSON.stringify({
    engine: 'quickjs-wasi',
    version: pkg.version,
    iterations,
    median_us: Object.fromEntries(STEPS.map((s) => [s, medianUs(samples[s])])),
    snapshot_bytes: snapshotBytes,
  }),
);
