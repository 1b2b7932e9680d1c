use vram_alloc::*;
fn main() {
    let m = &synthetic::presets()[0];
    println!("1-step events {}", synthetic::training_events(m, 1).len());
    let ev = synthetic::training_events(m, 3);
    for r in replay::replay_all(&ev, None).unwrap() {
        println!(
            "{} devallocs {} devfrees {}",
            r.name, r.device_allocs, r.device_frees
        );
    }
}
