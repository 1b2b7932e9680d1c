//! The crate's one error type.

use vram_alloc::DeviceError;

/// Everything that can go wrong opening or driving a CUDA device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CudaError {
    /// No NVIDIA driver library could be loaded.
    #[error("no NVIDIA driver: libcuda.so.1 not found (tried {})", tried.join(", "))]
    NoDriver {
        /// The library names tried, in order.
        tried: Vec<String>,
    },
    /// The driver library lacks a function this crate needs (driver too old).
    #[error("the NVIDIA driver is too old: it has no {name}")]
    MissingSymbol {
        /// The missing symbol.
        name: &'static str,
    },
    /// The device ordinal does not exist.
    #[error("no CUDA device {ordinal} (this machine has {count})")]
    NoDevice {
        /// The ordinal asked for.
        ordinal: i32,
        /// Devices the driver reports.
        count: i32,
    },
    /// A driver call failed.
    #[error("{call} failed: {code}")]
    Driver {
        /// The driver function, e.g. `cuMemCreate`.
        call: &'static str,
        /// The `CUresult` name, e.g. `CUDA_ERROR_INVALID_VALUE`.
        code: String,
        /// Whether the code is `CUDA_ERROR_OUT_OF_MEMORY`.
        out_of_memory: bool,
    },
    /// A stream id was used that was never registered with
    /// [`crate::CudaDevice::register_stream`].
    #[error("stream {0} is not registered")]
    UnknownStream(u32),
}

impl CudaError {
    /// The [`DeviceError`] an allocator sees; out-of-memory keeps its meaning
    /// (`requested` and `free` come from the caller).
    pub fn into_device_error(self, requested: u64, free: u64) -> DeviceError {
        match self {
            CudaError::Driver {
                out_of_memory: true,
                ..
            } => DeviceError::OutOfMemory { requested, free },
            CudaError::Driver { call, code, .. } => DeviceError::Driver {
                call,
                message: code,
            },
            other => DeviceError::Driver {
                call: "vram-cuda",
                message: other.to_string(),
            },
        }
    }
}
