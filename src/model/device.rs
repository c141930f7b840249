//! Choosing the compute device (`--device cpu|cuda|cuda:N`) in one place.
//!
//! A build without the `cuda` feature answers `cuda` with a clear error at run
//! time (candle's own stub backend reports it), never a compile error elsewhere.

use super::ModelError;
use candle_core::Device;
use serde::{Deserialize, Serialize};

/// A device as written on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeviceSpec {
    #[default]
    Cpu,
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" | "gpu" => Ok(DeviceSpec::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(DeviceSpec::Cuda)
                .ok_or_else(|| format!("unknown device {s:?}; use cpu, cuda or cuda:N")),
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Open the device.
    pub fn open(self) -> Result<Device, ModelError> {
        match self {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            DeviceSpec::Cuda(n) => Device::new_cuda(n).map_err(|e| {
                let hint = if cfg!(feature = "cuda") {
                    "this build has CUDA: it needs an NVIDIA GPU and its driver"
                } else {
                    "CUDA needs a build with `--features cuda`"
                };
                ModelError::Device(format!("cannot open cuda:{n}: {} ({hint})", without_backtrace(e)))
            }),
        }
    }
}

/// A device as results record it: `cpu`, or `cuda:N` with the GPU's ordinal
/// (the ordinal `--device` took; candle's own `Debug` form shows an internal
/// counter instead, `Cuda(CudaDevice(DeviceId(1)))` for `cuda:0`), followed
/// for a GPU by its name and memory as the driver reports them, e.g.
/// `cuda:0 (NVIDIA H200, 143771 MiB)`.
pub fn device_name(device: &Device) -> String {
    let name = match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    };
    match gpu_description(device) {
        Some(gpu) => format!("{name} ({gpu})"),
        None => name,
    }
}

/// The GPU's name and memory, from the CUDA driver.
#[cfg(feature = "cuda")]
fn gpu_description(device: &Device) -> Option<String> {
    let Device::Cuda(d) = device else { return None };
    let stream = d.cuda_stream();
    let ctx = stream.context();
    let name = ctx.name().ok()?;
    Some(match ctx.total_mem() {
        Ok(bytes) => format!("{name}, {} MiB", bytes >> 20),
        Err(_) => name,
    })
}

#[cfg(not(feature = "cuda"))]
fn gpu_description(_: &Device) -> Option<String> {
    None
}

/// candle wraps its errors with a captured backtrace when `RUST_LIB_BACKTRACE`
/// (or `RUST_BACKTRACE`) asks for one, and its message then holds the whole
/// trace; a user error is one line, so the trace is dropped.
fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        e => e,
    }
}

/// CPU features the build was compiled for, recorded in results (they decide
/// which quantized kernels candle uses).
pub fn compiled_cpu_features() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(target_feature = "avx") {
        v.push("avx");
    }
    if cfg!(target_feature = "avx2") {
        v.push("avx2");
    }
    if cfg!(target_feature = "fma") {
        v.push("fma");
    }
    if cfg!(target_feature = "f16c") {
        v.push("f16c");
    }
    if cfg!(target_feature = "avx512f") {
        v.push("avx512f");
    }
    if cfg!(target_feature = "neon") {
        v.push("neon");
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_devices() {
        assert_eq!("cpu".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cpu);
        assert_eq!("cuda".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(0));
        assert_eq!("cuda:2".parse::<DeviceSpec>().unwrap(), DeviceSpec::Cuda(2));
        assert!("tpu".parse::<DeviceSpec>().is_err());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn cuda_without_feature_is_a_clear_error() {
        let e = DeviceSpec::Cuda(0).open().unwrap_err().to_string();
        assert!(e.contains("--features cuda"), "{e}");
    }

    #[test]
    fn devices_are_named_as_the_command_line_names_them() {
        assert_eq!(device_name(&Device::Cpu), "cpu");
        assert_eq!(device_name(&DeviceSpec::Cpu.open().unwrap()), DeviceSpec::Cpu.to_string());
    }

    #[test]
    fn candle_backtraces_are_dropped_from_messages() {
        let e = candle_core::Error::Msg("no device".into());
        let wrapped = candle_core::Error::WithBacktrace {
            inner: Box::new(e),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert!(wrapped.to_string().contains('\n'));
        assert_eq!(without_backtrace(wrapped).to_string(), "no device");
    }
}
