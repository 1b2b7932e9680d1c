//! Checks any [`Device`] must pass, written once against the trait: the
//! simulated device runs them in every `cargo test`, a real GPU through
//! `vram-cuda-check` (see `gpu/README.md`). Each check takes a fresh device
//! and returns a description of the first violation.

use vram_alloc::{AllocatorConfig, CachingAllocator, Device, DeviceError, Location, Policy};

/// A named check; it calls the factory for each fresh device it needs.
pub type Check<D> = (&'static str, fn(&dyn Fn() -> D) -> Result<(), String>);

/// Every check, in order.
pub fn checks<D: Device + 'static>() -> Vec<Check<D>> {
    vec![
        ("segments", segments::<D>),
        ("virtual_ranges", virtual_ranges::<D>),
        ("events", events::<D>),
        ("out_of_memory_is_an_error", out_of_memory::<D>),
        ("caching_allocator_all_policies", caching_allocator::<D>),
        ("host_migration", host_migration::<D>),
        ("migration_keeps_bytes", migration_keeps_bytes::<D>),
    ]
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

fn e(err: DeviceError) -> String {
    err.to_string()
}

/// Segments: allocate, distinct non-overlapping addresses, free memory drops
/// and comes back, bad releases are errors.
pub fn segments<D: Device>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut d = make();
    let (free0, total) = d.mem_info();
    ensure(total > 0 && free0 <= total, || {
        format!("mem_info {free0}/{total}")
    })?;
    let size = 64 << 20;
    let a = d.allocate(size).map_err(e)?;
    let b = d.allocate(size).map_err(e)?;
    ensure(a + size <= b || b + size <= a, || {
        format!("overlap {a:#x} {b:#x}")
    })?;
    let (free1, _) = d.mem_info();
    // Other processes may allocate too on a real GPU: only require a drop.
    ensure(free1 < free0, || {
        format!("free did not drop: {free0} -> {free1}")
    })?;
    d.release(a).map_err(e)?;
    d.release(b).map_err(e)?;
    ensure(d.release(a).is_err(), || "double release accepted".into())?;
    ensure(d.allocate(0).is_err(), || {
        "zero-byte segment accepted".into()
    })?;
    Ok(())
}

/// Expandable ranges: reserve, map at the granularity, partial unmap,
/// remap, refuse misaligned or double maps, unreserve only when unmapped.
pub fn virtual_ranges<D: Device>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut d = make();
    let g = d.granularity();
    ensure(g.is_power_of_two() && g >= 512, || {
        format!("granularity {g}")
    })?;
    let r = d.reserve(8 * g).map_err(e)?;
    ensure(r % g == 0, || {
        format!("reservation {r:#x} not aligned to {g}")
    })?;
    ensure(d.reserve(g + 1).is_err(), || {
        "unaligned reserve accepted".into()
    })?;
    d.map(r, 4 * g).map_err(e)?;
    ensure(d.map(r + g, g).is_err(), || "double map accepted".into())?;
    ensure(d.map(r + 1, g).is_err(), || {
        "misaligned map accepted".into()
    })?;
    ensure(d.map(r + 8 * g, g).is_err(), || {
        "map outside reservation accepted".into()
    })?;
    // Unmap the middle of a mapping, then map it again.
    d.unmap(r + g, 2 * g).map_err(e)?;
    ensure(d.unmap(r + g, g).is_err(), || {
        "unmap of unmapped range accepted".into()
    })?;
    d.map(r + g, 2 * g).map_err(e)?;
    ensure(d.unreserve(r).is_err(), || {
        "unreserve with mapped pages accepted".into()
    })?;
    d.unmap(r, 4 * g).map_err(e)?;
    d.unreserve(r).map_err(e)?;
    Ok(())
}

/// Host-located backing at the same addresses ([`Device::migrate`]): the
/// middle of a mapping moves to host memory (device memory is freed), invalid
/// moves are refused, it comes back and goes again, and the host range is
/// then unmapped whole and the reservation returned. A backend without
/// host-located mappings must say so with [`DeviceError::Unsupported`]
/// (the check then passes and reports nothing else).
pub fn host_migration<D: Device>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut d = make();
    let g = d.granularity();
    let r = d.reserve(8 * g).map_err(e)?;
    d.map(r, 4 * g).map_err(e)?;
    let (free0, _) = d.mem_info();
    match d.migrate(r + g, 2 * g, Location::Host) {
        Err(DeviceError::Unsupported { .. }) => {
            d.unmap(r, 4 * g).map_err(e)?;
            return d.unreserve(r).map_err(e);
        }
        other => other.map_err(e)?,
    }
    let (free1, _) = d.mem_info();
    // Other processes may allocate too on a real GPU: only require a rise.
    ensure(free1 > free0, || {
        format!("device memory not freed by the move: {free0} -> {free1}")
    })?;
    ensure(d.migrate(r + 4 * g, g, Location::Host).is_err(), || {
        "migration of an unmapped range accepted".into()
    })?;
    ensure(d.migrate(r + 1, g, Location::Host).is_err(), || {
        "misaligned migration accepted".into()
    })?;
    ensure(d.migrate(r + g, 2 * g, Location::Host).is_err(), || {
        "second migration to the host accepted".into()
    })?;
    ensure(d.migrate(r, g, Location::Device).is_err(), || {
        "migration of a device range to the device accepted".into()
    })?;
    d.migrate(r + g, 2 * g, Location::Device).map_err(e)?;
    d.migrate(r + g, 2 * g, Location::Host).map_err(e)?;
    d.unmap(r + g, 2 * g).map_err(e)?;
    d.unmap(r, g).map_err(e)?;
    d.unmap(r + 3 * g, g).map_err(e)?;
    d.unreserve(r).map_err(e)?;
    Ok(())
}

/// Random bytes (a fixed-seed generator, so a failure repeats) written into a mapped range
/// and into live blocks of the caching allocator read back identical after every one of
/// eight round trips to host memory and back at the same addresses: part of a mapping, a
/// whole one, and each block's own pages (`CachingAllocator::migrate_to_host`/`_device`).
/// A backend that cannot move pages, or read and write its memory, says so with
/// [`DeviceError::Unsupported`] and the check passes.
pub fn migration_keeps_bytes<D: Device + 'static>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut random = |n: usize| -> Vec<u8> {
        let mut v: Vec<u8> = (0..n.div_ceil(8))
            .flat_map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed.to_le_bytes()
            })
            .collect();
        v.truncate(n);
        v
    };
    let unsupported = |e: &DeviceError| matches!(e, DeviceError::Unsupported { .. });
    let mut d = make();
    let g = d.granularity();
    let r = d.reserve(8 * g).map_err(e)?;
    d.map(r, 4 * g).map_err(e)?;
    let data = random((4 * g) as usize);
    match d.write_bytes(r, &data) {
        Err(ref x) if unsupported(x) => {
            d.unmap(r, 4 * g).map_err(e)?;
            return d.unreserve(r).map_err(e);
        }
        other => other.map_err(e)?,
    }
    let same = |d: &mut D, what: &str| -> Result<(), String> {
        let back = d.read_bytes(r, 4 * g).map_err(e)?;
        let first = back.iter().zip(&data).position(|(a, b)| a != b);
        ensure(first.is_none(), || {
            format!("{what}: byte {} differs", first.unwrap_or(0))
        })
    };
    same(&mut d, "written")?;
    for trip in 0..8 {
        let (at, len) = if trip % 2 == 0 {
            (r + g, 2 * g)
        } else {
            (r, 4 * g)
        };
        match d.migrate(at, len, Location::Host) {
            Err(ref x) if unsupported(x) => break,
            other => other.map_err(e)?,
        }
        same(&mut d, &format!("round trip {trip}, on the host"))?;
        d.migrate(at, len, Location::Device).map_err(e)?;
        same(&mut d, &format!("round trip {trip}, back on the device"))?;
    }
    d.unmap(r, 4 * g).map_err(e)?;
    d.unreserve(r).map_err(e)?;
    // Blocks of the caching allocator: each one's whole pages go and come back.
    let alloc = CachingAllocator::new(make(), AllocatorConfig::new(Policy::Vramkit))
        .map_err(|x| x.to_string())?;
    let sizes = [3 * g + 12_345, 5 * g, 2 * g + 512];
    let mut blocks = Vec::new();
    for &size in &sizes {
        let a = alloc.malloc(size, 0).map_err(|x| x.to_string())?;
        let bytes = random(size as usize);
        alloc.with_device(|d| d.write_bytes(a, &bytes)).map_err(e)?;
        blocks.push((a, bytes));
    }
    for trip in 0..8 {
        for (a, bytes) in &blocks {
            let moved = alloc.migrate_to_host(*a).map_err(|x| x.to_string())?;
            let back = alloc.migrate_to_device(*a).map_err(|x| x.to_string())?;
            ensure(moved == back, || format!("moved {moved} B, back {back} B"))?;
            let got = alloc
                .with_device(|d| d.read_bytes(*a, bytes.len() as u64))
                .map_err(e)?;
            ensure(&got == bytes, || {
                format!("block at {a:#x}: bytes differ after round trip {trip}")
            })?;
        }
        alloc.check_invariants()?;
    }
    for (a, _) in blocks {
        alloc.free(a).map_err(|x| x.to_string())?;
    }
    alloc.empty_cache();
    Ok(())
}

/// Events on the default stream complete; synchronize forgets them.
pub fn events<D: Device>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut d = make();
    let ev = d.record_event(0).map_err(e)?;
    d.synchronize_event(ev).map_err(e)?;
    ensure(d.query_event(ev).is_err(), || {
        "synchronized event still known".into()
    })?;
    let ev = d.record_event(0).map_err(e)?;
    // Nothing is queued: it completes (poll a bounded number of times).
    let mut done = false;
    for _ in 0..1_000_000 {
        if d.query_event(ev).map_err(e)? {
            done = true;
            break;
        }
    }
    ensure(done, || "event on an idle stream never completed".into())?;
    ensure(d.query_event(ev).is_err(), || {
        "completed event still known".into()
    })?;
    Ok(())
}

/// Asking for more than the device has is `OutOfMemory`, never a panic, and
/// leaves the device usable.
pub fn out_of_memory<D: Device>(make: &dyn Fn() -> D) -> Result<(), String> {
    let mut d = make();
    let (_, total) = d.mem_info();
    match d.allocate(total.saturating_mul(2)) {
        Err(DeviceError::OutOfMemory { .. }) => {}
        other => return Err(format!("allocating twice the device gave {other:?}")),
    }
    let a = d.allocate(1 << 20).map_err(e)?;
    d.release(a).map_err(e)?;
    Ok(())
}

/// The caching allocator under every policy over this device: allocate,
/// free, reuse, empty the cache, invariants hold.
pub fn caching_allocator<D: Device + 'static>(make: &dyn Fn() -> D) -> Result<(), String> {
    for policy in Policy::ALL {
        let alloc = CachingAllocator::new(make(), AllocatorConfig::new(policy))
            .map_err(|x| x.to_string())?;
        let sizes = [512u64, 4096, 1 << 20, 3 << 20, 25 << 20, 100 << 20];
        let mut ptrs = Vec::new();
        for &s in &sizes {
            ptrs.push(alloc.malloc(s, 0).map_err(|x| format!("{policy:?}: {x}"))?);
        }
        for p in ptrs.drain(..) {
            alloc.free(p).map_err(|x| x.to_string())?;
        }
        let again = alloc.malloc(1 << 20, 0).map_err(|x| x.to_string())?;
        alloc.free(again).map_err(|x| x.to_string())?;
        alloc
            .check_invariants()
            .map_err(|x| format!("{policy:?}: {x}"))?;
        alloc.empty_cache();
        let st = alloc.memory_stats();
        ensure(st.reserved_bytes[0].current == 0, || {
            format!(
                "{policy:?}: {} bytes still reserved after empty_cache",
                st.reserved_bytes[0].current
            )
        })?;
    }
    Ok(())
}

/// The host tier over a device and its host memory: under a 64 MiB cap the
/// third 30 MiB request lands in pinned host memory, every tier's counters
/// add up, and freeing returns the host memory once the stream's work is
/// done (an event per block).
pub fn tiered_spill<D: Device, H: vram_tier::HostMemory>(
    make: &dyn Fn() -> (D, H),
) -> Result<(), String> {
    use vram_tier::{Tier, TierConfig, TieredAllocator};
    const MIB: u64 = 1 << 20;
    let (d, h) = make();
    let cfg = TierConfig {
        device_limit: Some(64 * MIB),
        host_limit: 256 * MIB,
        migrate: false,
        ..TierConfig::default()
    };
    let t = TieredAllocator::new(d, h, cfg).map_err(|x| x.to_string())?;
    let mut ptrs = Vec::new();
    for _ in 0..3 {
        ptrs.push(t.malloc(30 * MIB, 0).map_err(|x| x.to_string())?);
    }
    let tiers: Vec<_> = ptrs.iter().map(|&p| t.tier_of(p)).collect();
    ensure(tiers[2] == Some(Tier::Host), || format!("tiers {tiers:?}"))?;
    let st = t.stats();
    ensure(
        st.host.current_bytes == 30 * MIB && st.num_spills == 1,
        || format!("{st:?}"),
    )?;
    ensure(st.device_used_bytes <= 64 * MIB, || {
        format!("device used {}", st.device_used_bytes)
    })?;
    t.check_invariants()?;
    for p in ptrs {
        t.free(p).map_err(|x| x.to_string())?;
    }
    t.empty_cache();
    let st = t.stats();
    ensure(st.host.current_bytes == 0 && st.num_leaked == 0, || {
        format!("after free: {st:?}")
    })?;
    t.check_invariants()
}

/// The tiered allocator with migration (`VRAM_MIGRATE=1`): under a 64 MiB
/// cap, a third 30 MiB request stays on the device because a block alive
/// across a step mark moves to host memory at the same address; freeing
/// everything returns the host memory. On a backend without host-located
/// mappings the request spills instead (the check accepts either, and says
/// which in its error otherwise).
pub fn tiered_migration<D: Device, H: vram_tier::HostMemory>(
    make: &dyn Fn() -> (D, H),
) -> Result<(), String> {
    use vram_tier::{Tier, TierConfig, TieredAllocator};
    const MIB: u64 = 1 << 20;
    let (d, h) = make();
    let cfg = TierConfig {
        device_limit: Some(64 * MIB),
        host_limit: 256 * MIB,
        ..TierConfig::default()
    };
    let t = TieredAllocator::new(d, h, cfg).map_err(|x| x.to_string())?;
    let a = t.malloc(30 * MIB, 0).map_err(|x| x.to_string())?;
    let b = t.malloc(30 * MIB, 0).map_err(|x| x.to_string())?;
    t.mark_step();
    let c = t.malloc(30 * MIB, 0).map_err(|x| x.to_string())?;
    let st = t.stats();
    let moved = st.device.num_migrations_to_host > 0;
    ensure(
        (moved && t.tier_of(c) == Some(Tier::Device) && st.num_spills == 0)
            || (!moved && t.tier_of(c) == Some(Tier::Host)),
        || format!("moved {moved}, tier {:?}: {st:?}", t.tier_of(c)),
    )?;
    ensure(st.device_used_bytes <= 64 * MIB, || {
        format!("device used {}", st.device_used_bytes)
    })?;
    t.check_invariants()?;
    for p in [a, b, c] {
        t.free(p).map_err(|x| x.to_string())?;
    }
    t.empty_cache();
    let st = t.stats();
    ensure(
        st.device.migrated_bytes.current == 0 && st.host.current_bytes == 0,
        || format!("after free: {st:?}"),
    )?;
    t.check_invariants()
}
