use crate::{Result, Sample};

/// Something that can read GPU memory: the NVIDIA driver or a simulation.
///
/// `t_ms` is the wall-clock time to stamp on the reading (milliseconds since
/// the Unix epoch); the caller owns the clock so that sources stay
/// deterministic under test.
pub trait Source {
    /// Take one reading of all GPUs and their processes.
    fn sample(&mut self, t_ms: u64) -> Result<Sample>;
    /// A short human description, e.g. `NVML 550.54 (2 GPUs)`.
    fn describe(&self) -> String;
}

impl<S: Source + ?Sized> Source for Box<S> {
    fn sample(&mut self, t_ms: u64) -> Result<Sample> {
        (**self).sample(t_ms)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
