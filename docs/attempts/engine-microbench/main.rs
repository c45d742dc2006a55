//! Engine-only microbenchmark (see README.md here): evaluates each script
//! 40 times through QuickJS's raw C API and prints its median and minimum.
//! `sys` is the engine crate under test, renamed in Cargo.toml.
use std::ffi::CString;
use std::time::Instant;
use sys::*;

fn run(ctx: *mut JSContext, name: &str, src: &str, reps: usize) {
    let code = CString::new(src).unwrap();
    let file = CString::new("<b>").unwrap();
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        unsafe {
            // Every script returns a number: nothing to free.
            JS_Eval(ctx, code.as_ptr(), src.len() as _, file.as_ptr(), JS_EVAL_TYPE_GLOBAL as i32);
            JS_RunGC(JS_GetRuntime(ctx));
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!("{name}: median {:.1} us min {:.1}", times[reps / 2], times[0]);
}

fn main() {
    unsafe {
        let rt = JS_NewRuntime();
        let ctx = JS_NewContext(rt);
        let reps = 40;
        run(ctx, "loop", "(() => { let s = 0; for (let i = 0; i < 1e6; i++) s += i; return s; })()", reps);
        run(ctx, "array1000", "(() => { const big = Array.from({length: 1000}, (_, i) => ({i, s: 'x' + i})); return big.length; })()", reps);
        run(ctx, "json", "(() => { const a = []; for (let i = 0; i < 1000; i++) a.push({id: i, name: 'n' + i, tags: ['a','b']}); return JSON.stringify(a).length + JSON.parse(JSON.stringify(a)).length; })()", reps);
        run(ctx, "props", "(() => { let o = {a:1,b:2,c:3}; let t = 0; for (let i = 0; i < 200000; i++) t += o.a + o.b + o.c; return t; })()", reps);
        run(ctx, "strings", "(() => { let s = []; for (let i = 0; i < 5000; i++) s.push(('k' + i).toUpperCase().slice(1)); return s.join(',').length; })()", reps);
    }
}
