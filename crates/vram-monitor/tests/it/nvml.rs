use vram_monitor::{MonitorError, NvmlSource, Source};

/// On a machine without the NVIDIA driver, opening NVML is an error (exit 2
/// in the CLI), never a panic. Where a driver exists the sample must be sane.
#[test]
fn nvml_is_an_error_without_a_driver_and_sane_with_one() {
    match NvmlSource::new() {
        Err(e) => {
            eprintln!("nvml test: no driver here ({e}); checked the error path");
            assert!(matches!(e, MonitorError::NvmlUnavailable { .. }), "{e:?}");
            assert!(e.is_bad_input());
            assert!(e.to_string().contains("--demo"));
        }
        Ok(mut src) => {
            eprintln!("nvml test: driver present: {}", src.describe());
            let s = src.sample(0).unwrap();
            assert!(!s.gpus.is_empty());
            assert!(s
                .gpus
                .iter()
                .all(|g| g.memory_used_bytes <= g.memory_total_bytes));
        }
    }
}
