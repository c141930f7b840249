//! The safetensors engine on real weights: the default model's GGUF
//! (SmolLM2-135M-Instruct Q4_1, llama) dequantized to f32 into a Hugging
//! Face folder by `scripts/gguf_to_safetensors.py` (which undoes llama.cpp's
//! q/k row permutation), against the same GGUF on candle's f32 path
//! (`--engine candle --weights f32`): the same weights in f32 through two
//! different implementations (candle's quantized llama with interleaved
//! rotary on permuted rows; candle's mistral with half-rotation on HF rows).
//!
//! Greedy tokens are compared position by position with the GGUF's choice
//! fed to both (so one disagreement does not shift the rest); at least 95%
//! must agree, and every disagreement is printed with the reference's top-2
//! margin (a near tie). Python 3 with pip is a prerequisite: without it
//! the test fails, saying so.

use crate::common;
use candle_core::Device;
use std::process::Command;
use themisto::decode::argmax;
use themisto::model::engine::{Engine, WeightsPolicy};
use themisto::model::source::FetchOptions;
use themisto::model::{gguf, LanguageModel, LoadOptions, OpenOptions};

const PROMPTS: &[&str] = &[
    "import pandas as pd\ndf = pd.read_csv(\"sales.csv\")\n",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
    "# In[ ]:\nimport numpy as np\nx = np.arange(10)\nprint(x.mean())\n# Out:\n",
    "The capital of France is",
    "for i in range(3):\n    print(i)\n# Output:\n",
];
const GREEDY_TOKENS: usize = 24;

/// `$THEMISTO_PYTHON` or `python3`, which must have pip (the README's
/// prerequisites): without it the test fails.
fn python_with_pip() -> String {
    let python = std::env::var("THEMISTO_PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python).args(["-m", "pip", "--version"]).output();
    assert!(
        out.as_ref().is_ok_and(|o| o.status.success()),
        "{python} -m pip does not run ({}), so scripts/gguf_to_safetensors.py cannot export the model; \
         install Python 3 with pip (Debian: python3-pip python3-venv) or set THEMISTO_PYTHON",
        match &out {
            Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
            Err(e) => e.to_string(),
        }
    );
    python
}

#[test]
fn smollm2_exported_to_safetensors_decodes_like_the_gguf_on_candle_f32() {
    let python = python_with_pip();
    let resolved = common::default_model();
    let (gguf_path, _) = resolved.gguf();
    let tmp = common::tempdir();
    let out = tmp.path().join("smollm2-135m-instruct-f32");
    let script = common::manifest_dir().join("scripts/gguf_to_safetensors.py");
    let status = Command::new(&python).arg(&script).arg(gguf_path).arg(&out).status().unwrap();
    assert!(status.success(), "{} failed: {status}", script.display());
    // The tokenizer: themisto's own GGUF tokenizer, saved as tokenizer.json.
    let (ct, _) = gguf::read_content(gguf_path).unwrap();
    let tok = themisto::tokenizer::Tokenizer::from_gguf(&ct).unwrap();
    std::fs::write(out.join("tokenizer.json"), tok.to_json().unwrap()).unwrap();

    let load = LoadOptions { weights: WeightsPolicy::F32, engine: Engine::Candle, ..Default::default() };
    let mut reference = themisto::model::load(&resolved, &Device::Cpu, &load).unwrap();
    let mut fetch = FetchOptions::from_env();
    fetch.progress = false;
    let open = OpenOptions { device: Default::default(), load: Default::default(), fetch };
    let mut st = themisto::model::open(out.to_str().unwrap(), &open).unwrap();
    assert_eq!((st.info.architecture.as_str(), st.info.quantization.as_str()), ("llama", "F32"));
    assert_eq!(st.info.dtype, "f32");
    assert_eq!(st.model.vocab_rows(), reference.model.vocab_rows());
    // Same chat template and end-of-turn ids through tokenizer_config / generation_config.
    assert_eq!(st.tokenizer.chat_template(), reference.tokenizer.chat_template());
    for id in reference.tokenizer.eos_ids().iter().take(1) {
        assert!(st.tokenizer.eos_ids().contains(id));
    }

    let (mut agree, mut total, mut worst_rel) = (0usize, 0usize, 0f32);
    // With THEMISTO_GREEDY_DUMP=FILE, the prompts' ids and the GGUF's greedy
    // tokens go to FILE (for scripts/hf_transformers_check.py).
    let mut dump: Vec<serde_json::Value> = Vec::new();
    for text in PROMPTS {
        let ids = reference.tokenizer.encode(text).unwrap();
        assert_eq!(st.tokenizer.encode(text).unwrap(), ids, "tokenizer.json encodes {text:?} differently");
        reference.model.truncate(0).unwrap();
        st.model.truncate(0).unwrap();
        let mut a = reference.model.forward(&ids).unwrap();
        let mut b = st.model.forward(&ids).unwrap();
        let mut greedy = Vec::new();
        for pos in 0..GREEDY_TOKENS {
            let (ta, tb) = (argmax(&a), argmax(&b));
            let (lo, hi) = a.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let diff = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
            worst_rel = worst_rel.max(diff / (hi - lo));
            total += 1;
            if ta == tb {
                agree += 1;
            } else {
                eprintln!(
                    "near tie? prompt {text:?} position {pos}: gguf picks {ta} ({:.4}), safetensors {tb} (gguf logit {:.4})",
                    a[ta as usize], a[tb as usize]
                );
            }
            greedy.push(ta);
            a = reference.model.forward(&[ta]).unwrap();
            b = st.model.forward(&[ta]).unwrap();
        }
        dump.push(serde_json::json!({ "prompt": ids, "greedy": greedy }));
    }
    if let Some(path) = std::env::var_os("THEMISTO_GREEDY_DUMP") {
        std::fs::write(path, serde_json::to_string(&dump).unwrap()).unwrap();
    }
    let share = agree as f64 / total as f64;
    eprintln!(
        "safetensors vs gguf (candle f32): {agree}/{total} greedy positions agree ({:.1}%), largest logit difference {:.2e} of the logit range",
        100.0 * share,
        worst_rel
    );
    assert!(share >= 0.95, "{agree}/{total}");
    assert!(worst_rel < 0.01, "largest logit difference {worst_rel} of the range");
}
