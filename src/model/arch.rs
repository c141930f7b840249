//! The model architectures this build knows, in one enum: which engine can
//! run each is a property of the architecture ([`Arch::native`]), not a
//! second list.

use super::ModelError;

/// A decoder-only architecture, by its GGUF `general.architecture` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// Llama family (SmolLM2, ...): interleaved rope, no biases.
    Llama,
    /// Qwen2 / Qwen2.5(-Coder): q/k/v biases, NEOX rope.
    Qwen2,
    /// Qwen3: per-head RMS norm of q and k, NEOX rope.
    Qwen3,
    /// Gemma 3 (candle engine only).
    Gemma3,
}

impl Arch {
    /// Every architecture, as named in GGUF files.
    pub const SUPPORTED: [&'static str; 4] = ["llama", "qwen2", "qwen3", "gemma3"];
    /// The architectures the native CPU engine implements.
    pub const NATIVE: [&'static str; 3] = ["llama", "qwen2", "qwen3"];

    /// The architecture of a GGUF name, if this build knows it.
    pub fn parse(s: &str) -> Option<Arch> {
        match s {
            "llama" => Some(Arch::Llama),
            "qwen2" => Some(Arch::Qwen2),
            "qwen3" => Some(Arch::Qwen3),
            "gemma3" => Some(Arch::Gemma3),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Qwen2 => "qwen2",
            Arch::Qwen3 => "qwen3",
            Arch::Gemma3 => "gemma3",
        }
    }

    /// Whether the native CPU engine implements this architecture.
    pub fn native(self) -> bool {
        Arch::NATIVE.contains(&self.as_str())
    }
}

impl std::str::FromStr for Arch {
    type Err = ModelError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Arch::parse(s).ok_or_else(|| ModelError::UnsupportedArch {
            arch: s.to_string(),
            file: None,
            supported: Arch::SUPPORTED.to_vec(),
        })
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::Arch;

    #[test]
    fn names_round_trip_and_native_is_a_subset() {
        for name in Arch::SUPPORTED {
            assert_eq!(Arch::parse(name).unwrap().as_str(), name);
        }
        assert!(Arch::NATIVE.iter().all(|n| Arch::SUPPORTED.contains(n)));
        assert!(!Arch::Gemma3.native() && Arch::Qwen2.native());
        let err = "mamba".parse::<Arch>().unwrap_err().to_string();
        assert!(err.contains("mamba") && err.contains("gemma3"), "{err}");
    }
}
