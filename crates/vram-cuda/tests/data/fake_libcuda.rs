//! A fake `libcuda.so` for tests: the driver functions vram-cuda calls, with
//! CUDA's documented rules checked strictly (a context must be current,
//! `cuMemUnmap` takes exactly one whole mapping, granularity alignment,
//! allocation properties of a pinned device allocation on device 0) on a
//! 1 GiB device (`FAKE_CUDA_TOTAL` bytes when that is set: a device as large
//! as the real one, far above a test's cap) with a 2 MiB granularity. Addresses
//! are numbers; the bytes of physical allocations (`cuMemCreate` handles, device
//! or host-located) are kept once written, so that `cuMemcpyHtoD`/`DtoH`/`DtoD`
//! through mapped ranges read back what was written, wherever the pages moved.
//! Compiled by the tests with `rustc --crate-type cdylib`.
#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

const OK: u32 = 0;
const INVALID_VALUE: u32 = 1;
const OUT_OF_MEMORY: u32 = 2;
const INVALID_DEVICE: u32 = 101;
const INVALID_CONTEXT: u32 = 201;
const INVALID_HANDLE: u32 = 400;
/// The device's memory: `FAKE_CUDA_TOTAL` bytes, else 1 GiB.
fn total() -> u64 {
    static T: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *T.get_or_init(|| std::env::var("FAKE_CUDA_TOTAL").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 30))
}
const GRAN: u64 = 2 << 20;
const CTX: usize = 0xC0_0000;

#[repr(C)]
pub struct Location {
    type_: u32,
    id: i32,
}
#[repr(C)]
pub struct Prop {
    type_: u32,
    handle_types: u32,
    location: Location,
    win32: *mut c_void,
    flags: [u8; 8],
}
#[repr(C)]
pub struct AccessDesc {
    location: Location,
    flags: u32,
}

#[derive(Default)]
struct State {
    used: u64,
    next: u64,
    segments: HashMap<u64, u64>,
    reservations: BTreeMap<u64, u64>,
    handles: HashMap<u64, (u64, bool)>,
    next_handle: u64,
    mappings: BTreeMap<u64, (u64, u64, bool)>,
    events: HashSet<usize>,
    next_event: usize,
    host: HashMap<u64, u64>,
    /// Handles created with a host location (`CU_MEM_LOCATION_TYPE_HOST`).
    host_handles: HashSet<u64>,
    host_located: u64,
    /// Bytes of handles written so far (zeros until then).
    backing: HashMap<u64, Vec<u8>>,
}

/// The handle and offset behind device address `va` and the bytes left in that mapping;
/// the mapping must allow access.
fn resolve(s: &State, va: u64) -> Option<(u64, u64, u64)> {
    let (&a, &(l, h, access)) = s.mappings.range(..=va).next_back()?;
    (va < a + l && access).then_some((h, va - a, a + l - va))
}
fn read_va(s: &State, mut va: u64, n: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(n as usize);
    while (out.len() as u64) < n {
        let (h, off, left) = resolve(s, va)?;
        let take = left.min(n - out.len() as u64);
        match s.backing.get(&h) {
            Some(b) => out.extend_from_slice(&b[off as usize..(off + take) as usize]),
            None => out.extend(std::iter::repeat_n(0u8, take as usize)),
        }
        va += take;
    }
    Some(out)
}
fn write_va(s: &mut State, mut va: u64, data: &[u8]) -> bool {
    let mut done = 0usize;
    while done < data.len() {
        let Some((h, off, left)) = resolve(s, va) else { return false };
        let take = (left as usize).min(data.len() - done);
        let size = s.handles[&h].0 as usize;
        let b = s.backing.entry(h).or_insert_with(|| vec![0u8; size]);
        b[off as usize..off as usize + take].copy_from_slice(&data[done..done + take]);
        done += take;
        va += take as u64;
    }
    true
}

static S: Mutex<Option<State>> = Mutex::new(None);
thread_local! { static CUR: std::cell::Cell<usize> = const { std::cell::Cell::new(0) }; }

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut g = S.lock().unwrap();
    let s = g.get_or_insert_with(|| State { next: 0x7000_0000_0000, next_handle: 1, next_event: 0xE000, ..State::default() });
    f(s)
}
fn ctx() -> bool {
    CUR.with(|c| c.get() == CTX)
}
fn take(s: &mut State, n: u64) -> bool {
    if s.used + n > total() {
        return false;
    }
    s.used += n;
    true
}
fn bump(s: &mut State, n: u64, align: u64) -> u64 {
    s.next = s.next.div_ceil(align) * align;
    let a = s.next;
    s.next += n + align;
    a
}
unsafe fn prop_ok(p: *const Prop) -> bool {
    let p = &*p;
    p.type_ == 1 && p.handle_types == 0 && p.location.type_ == 1 && p.location.id == 0 && p.win32.is_null()
}

#[no_mangle] pub extern "C" fn cuInit(flags: u32) -> u32 { if flags == 0 { OK } else { INVALID_VALUE } }
#[no_mangle] pub unsafe extern "C" fn cuDeviceGetCount(n: *mut i32) -> u32 { *n = 1; OK }
#[no_mangle] pub unsafe extern "C" fn cuDeviceGet(d: *mut i32, o: i32) -> u32 { if o != 0 { return INVALID_DEVICE; } *d = 0; OK }
#[no_mangle] pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(c: *mut usize, d: i32) -> u32 { if d != 0 { return INVALID_DEVICE; } *c = CTX; OK }
#[no_mangle] pub extern "C" fn cuDevicePrimaryCtxRelease_v2(d: i32) -> u32 { if d != 0 { INVALID_DEVICE } else { OK } }
#[no_mangle] pub unsafe extern "C" fn cuCtxGetCurrent(c: *mut usize) -> u32 { *c = CUR.with(|x| x.get()); OK }
#[no_mangle] pub extern "C" fn cuCtxSetCurrent(c: usize) -> u32 { if c != 0 && c != CTX { return INVALID_CONTEXT; } CUR.with(|x| x.set(c)); OK }
#[no_mangle] pub extern "C" fn cuCtxSynchronize() -> u32 { if ctx() { OK } else { INVALID_CONTEXT } }
#[no_mangle] pub unsafe extern "C" fn cuMemGetInfo_v2(f: *mut usize, t: *mut usize) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    with(|s| { *f = (total() - s.used) as usize; *t = total() as usize; }); OK
}
#[no_mangle] pub unsafe extern "C" fn cuMemAlloc_v2(p: *mut u64, n: usize) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    if n == 0 { return INVALID_VALUE; }
    with(|s| { if !take(s, n as u64) { return OUT_OF_MEMORY; } let a = bump(s, n as u64, 512); s.segments.insert(a, n as u64); *p = a; OK })
}
#[no_mangle] pub extern "C" fn cuMemFree_v2(p: u64) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    with(|s| match s.segments.remove(&p) { Some(n) => { s.used -= n; OK } None => INVALID_VALUE })
}
#[no_mangle] pub unsafe extern "C" fn cuMemGetAllocationGranularity(g: *mut usize, p: *const Prop, opt: u32) -> u32 {
    if !prop_ok(p) || opt > 1 { return INVALID_VALUE; } *g = GRAN as usize; OK
}
#[no_mangle] pub unsafe extern "C" fn cuMemAddressReserve(p: *mut u64, n: usize, align: usize, addr: u64, flags: u64) -> u32 {
    let n = n as u64;
    if n == 0 || n % GRAN != 0 || addr != 0 || flags != 0 || (align != 0 && (align as u64) % GRAN != 0) { return INVALID_VALUE; }
    with(|s| { let a = bump(s, n, GRAN); s.reservations.insert(a, n); *p = a; OK })
}
#[no_mangle] pub extern "C" fn cuMemAddressFree(p: u64, n: usize) -> u32 {
    with(|s| {
        if s.reservations.get(&p) != Some(&(n as u64)) || s.mappings.range(p..p + n as u64).next().is_some() { return INVALID_VALUE; }
        s.reservations.remove(&p); OK
    })
}
/// A pinned allocation located in host memory (location type 2, id 0), as
/// CUDA 12.2+ accepts for `cuMemCreate`; 4 GiB of host memory.
unsafe fn host_prop_ok(p: *const Prop) -> bool {
    let p = &*p;
    p.type_ == 1 && p.handle_types == 0 && p.location.type_ == 2 && p.location.id == 0 && p.win32.is_null()
}
#[no_mangle] pub unsafe extern "C" fn cuMemCreate(h: *mut u64, n: usize, p: *const Prop, flags: u64) -> u32 {
    let on_host = host_prop_ok(p);
    if !(prop_ok(p) || on_host) || flags != 0 || n == 0 || n as u64 % GRAN != 0 { return INVALID_VALUE; }
    with(|s| {
        if on_host {
            if s.host_located + n as u64 > 4 * total() { return OUT_OF_MEMORY; }
            s.host_located += n as u64;
        } else if !take(s, n as u64) {
            return OUT_OF_MEMORY;
        }
        let id = s.next_handle; s.next_handle += 1; s.handles.insert(id, (n as u64, false));
        if on_host { s.host_handles.insert(id); }
        *h = id; OK
    })
}
#[no_mangle] pub extern "C" fn cuMemRelease(h: u64) -> u32 {
    with(|s| match s.handles.get(&h) {
        Some(&(n, false)) => {
            s.handles.remove(&h);
            s.backing.remove(&h);
            if s.host_handles.remove(&h) { s.host_located -= n; } else { s.used -= n; }
            OK
        }
        _ => INVALID_VALUE,
    })
}
/// Both ranges must be mapped throughout with access granted; the bytes move.
#[no_mangle] pub extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    with(|s| {
        let Some(bytes) = read_va(s, src, n as u64) else { return INVALID_VALUE };
        if read_va(s, dst, n as u64).is_none() || !write_va(s, dst, &bytes) { return INVALID_VALUE; }
        OK
    })
}
#[no_mangle] pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const u8, n: usize) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    let data = std::slice::from_raw_parts(src, n).to_vec();
    with(|s| if read_va(s, dst, n as u64).is_some() && write_va(s, dst, &data) { OK } else { INVALID_VALUE })
}
#[no_mangle] pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut u8, src: u64, n: usize) -> u32 {
    if !ctx() { return INVALID_CONTEXT; }
    with(|s| match read_va(s, src, n as u64) {
        Some(b) => { std::ptr::copy_nonoverlapping(b.as_ptr(), dst, n); OK }
        None => INVALID_VALUE,
    })
}
/// Test hook: host bytes held by host-located handles.
#[no_mangle] pub extern "C" fn fake_host_located_bytes() -> u64 { with(|s| s.host_located) }
#[no_mangle] pub extern "C" fn cuMemMap(p: u64, n: usize, off: usize, h: u64, flags: u64) -> u32 {
    let n = n as u64;
    with(|s| {
        let Some(&(hn, mapped)) = s.handles.get(&h) else { return INVALID_HANDLE };
        if off != 0 || flags != 0 || mapped || hn != n || p % GRAN != 0 { return INVALID_VALUE; }
        let inside = s.reservations.range(..=p).next_back().is_some_and(|(&b, &l)| p + n <= b + l);
        let overlaps = s.mappings.range(..p + n).next_back().is_some_and(|(&a, &(l, _, _))| a + l > p);
        if !inside || overlaps { return INVALID_VALUE; }
        s.handles.insert(h, (hn, true));
        s.mappings.insert(p, (n, h, false));
        OK
    })
}
#[no_mangle] pub extern "C" fn cuMemUnmap(p: u64, n: usize) -> u32 {
    with(|s| match s.mappings.get(&p) {
        // CUDA: the range must be exactly one whole mapping.
        Some(&(l, h, _)) if l == n as u64 => { s.mappings.remove(&p); s.handles.get_mut(&h).unwrap().1 = false; OK }
        _ => INVALID_VALUE,
    })
}
#[no_mangle] pub unsafe extern "C" fn cuMemSetAccess(p: u64, n: usize, d: *const AccessDesc, count: usize) -> u32 {
    let d = &*d;
    if count != 1 || d.location.type_ != 1 || d.location.id != 0 || d.flags != 3 { return INVALID_VALUE; }
    with(|s| {
        // Every byte of the range must be mapped (possibly by several mappings).
        let mut at = p;
        while at < p + n as u64 {
            match s.mappings.get_mut(&at) { Some(m) => { m.2 = true; at += m.0; } None => return INVALID_VALUE }
        }
        OK
    })
}
#[no_mangle] pub unsafe extern "C" fn cuEventCreate(e: *mut usize, flags: u32) -> u32 {
    if flags != 2 { return INVALID_VALUE; }
    with(|s| { s.next_event += 16; s.events.insert(s.next_event); *e = s.next_event; OK })
}
#[no_mangle] pub extern "C" fn cuEventRecord(e: usize, _stream: usize) -> u32 { if !ctx() { return INVALID_CONTEXT; } with(|s| if s.events.contains(&e) { OK } else { INVALID_HANDLE }) }
#[no_mangle] pub extern "C" fn cuEventQuery(e: usize) -> u32 { with(|s| if s.events.contains(&e) { OK } else { INVALID_HANDLE }) }
#[no_mangle] pub extern "C" fn cuEventSynchronize(e: usize) -> u32 { cuEventQuery(e) }
#[no_mangle] pub extern "C" fn cuEventDestroy_v2(e: usize) -> u32 { with(|s| if s.events.remove(&e) { OK } else { INVALID_HANDLE }) }
#[no_mangle] pub unsafe extern "C" fn cuMemHostAlloc(p: *mut u64, n: usize, flags: u32) -> u32 {
    if flags & 2 == 0 || n == 0 { return INVALID_VALUE; }
    with(|s| { let a = bump(s, n as u64, 4096); s.host.insert(a, n as u64); *p = a; OK })
}
#[no_mangle] pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(d: *mut u64, p: u64, flags: u32) -> u32 {
    if flags != 0 { return INVALID_VALUE; }
    with(|s| if s.host.contains_key(&p) { *d = p; OK } else { INVALID_VALUE })
}
#[no_mangle] pub extern "C" fn cuMemFreeHost(p: u64) -> u32 { with(|s| if s.host.remove(&p).is_some() { OK } else { INVALID_VALUE }) }
#[no_mangle] pub unsafe extern "C" fn cuMemAllocManaged(p: *mut u64, n: usize, flags: u32) -> u32 {
    if flags != 1 || n == 0 { return INVALID_VALUE; }
    with(|s| { if !take(s, n as u64) { return OUT_OF_MEMORY; } let a = bump(s, n as u64, 4096); s.segments.insert(a, n as u64); *p = a; OK })
}
#[no_mangle] pub extern "C" fn cuMemAdvise(_p: u64, _n: usize, _a: u32, _d: i32) -> u32 { OK }
#[no_mangle] pub extern "C" fn cuMemPrefetchAsync(_p: u64, _n: usize, _d: i32, _s: usize) -> u32 { OK }
