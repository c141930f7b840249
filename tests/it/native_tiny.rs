//! The native engine on tiny random models written here, one per
//! architecture (llama, qwen2, qwen3) and weight type, against candle's
//! quantized models with dequantized f32 weights (the exact weights).
//!
//! Float weight types are multiplied in f32 by both engines: the logits
//! agree to float rounding (and the half-float KV cache). Quantized types
//! add the 8-bit rounding of activations: the logits agree to 1–2% of their
//! range on these small random models.

use crate::common;

use candle_core::quantized::gguf_file::Value;
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use themisto::model::engine::{Engine, WeightsPolicy};
use themisto::model::source::resolve_spec;
use themisto::model::source::ResolvedModel;
use themisto::model::{load as load_model, LoadOptions, LoadedModel};
use themisto::model::{Feed, LanguageModel, Logits};

const HIDDEN: usize = 256;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
const FF: usize = 512;
const LAYERS: usize = 2;

struct Rng(u64);

impl Rng {
    fn tensor(&mut self, shape: &[usize], center: f32, scale: f32) -> Tensor {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                center + ((self.0 >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2.0 * scale
            })
            .collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }
}

/// Write a two-layer model of architecture `arch` with matrices of type `wt`.
pub fn write_model(path: &std::path::Path, arch: &str, wt: GgmlDType) {
    write_model_with(path, arch, wt, &[]);
}

/// [`write_model`] with more metadata (same weights).
pub fn write_model_with(path: &std::path::Path, arch: &str, wt: GgmlDType, extra: &[(String, Value)]) {
    let tokens = common::tiny_tokens();
    let vocab = tokens.len();
    let mut rng = Rng(0x5eed ^ wt as u64 ^ (arch.len() as u64) << 20);
    let mut t: Vec<(String, QTensor)> = Vec::new();
    let mut mat = |name: String, rows: usize, cols: usize, scale: f32, rng: &mut Rng| {
        t.push((name, QTensor::quantize(&rng.tensor(&[rows, cols], 0.0, scale), wt).unwrap()));
    };
    mat("token_embd.weight".into(), vocab, HIDDEN, 1.0, &mut rng);
    let (qd, kvd) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    for l in 0..LAYERS {
        let p = format!("blk.{l}");
        mat(format!("{p}.attn_q.weight"), qd, HIDDEN, 0.15, &mut rng);
        mat(format!("{p}.attn_k.weight"), kvd, HIDDEN, 0.15, &mut rng);
        mat(format!("{p}.attn_v.weight"), kvd, HIDDEN, 0.15, &mut rng);
        mat(format!("{p}.attn_output.weight"), HIDDEN, qd, 0.15, &mut rng);
        mat(format!("{p}.ffn_gate.weight"), FF, HIDDEN, 0.15, &mut rng);
        mat(format!("{p}.ffn_up.weight"), FF, HIDDEN, 0.15, &mut rng);
        mat(format!("{p}.ffn_down.weight"), HIDDEN, FF, 0.15, &mut rng);
    }
    if arch == "qwen2" {
        mat("output.weight".into(), vocab, HIDDEN, 0.3, &mut rng);
    }
    let mut vec = |name: String, n: usize, center: f32, scale: f32| {
        t.push((name, QTensor::quantize(&rng.tensor(&[n], center, scale), GgmlDType::F32).unwrap()));
    };
    vec("output_norm.weight".into(), HIDDEN, 1.0, 0.2);
    for l in 0..LAYERS {
        let p = format!("blk.{l}");
        vec(format!("{p}.attn_norm.weight"), HIDDEN, 1.0, 0.2);
        vec(format!("{p}.ffn_norm.weight"), HIDDEN, 1.0, 0.2);
        if arch == "qwen2" {
            vec(format!("{p}.attn_q.bias"), qd, 0.0, 0.5);
            vec(format!("{p}.attn_k.bias"), kvd, 0.0, 0.5);
            vec(format!("{p}.attn_v.bias"), kvd, 0.0, 0.5);
        }
        if arch == "qwen3" {
            vec(format!("{p}.attn_q_norm.weight"), HEAD_DIM, 1.0, 0.2);
            vec(format!("{p}.attn_k_norm.weight"), HEAD_DIM, 1.0, 0.2);
        }
    }
    let mut md: Vec<(String, Value)> = vec![
        ("general.architecture".into(), Value::String(arch.into())),
        ("general.name".into(), Value::String(format!("tiny-{arch}"))),
        // candle's qwen3 computes in f16 unless told f32.
        ("general.dtype".into(), Value::U32(0)),
        (format!("{arch}.context_length"), Value::U32(256)),
        (format!("{arch}.embedding_length"), Value::U32(HIDDEN as u32)),
        (format!("{arch}.feed_forward_length"), Value::U32(FF as u32)),
        (format!("{arch}.block_count"), Value::U32(LAYERS as u32)),
        (format!("{arch}.attention.head_count"), Value::U32(HEADS as u32)),
        (format!("{arch}.attention.head_count_kv"), Value::U32(KV_HEADS as u32)),
        (format!("{arch}.attention.key_length"), Value::U32(HEAD_DIM as u32)),
        (format!("{arch}.rope.dimension_count"), Value::U32(HEAD_DIM as u32)),
        (format!("{arch}.rope.freq_base"), Value::F32(10000.0)),
        (format!("{arch}.attention.layer_norm_rms_epsilon"), Value::F32(1e-5)),
    ];
    md.extend(extra.iter().cloned());
    md.extend(common::tokenizer_metadata(&tokens));
    common::write_gguf(path, &md, &t);
}

pub fn resolved(path: &std::path::Path) -> ResolvedModel {
    ResolvedModel {
        card: resolve_spec(path.to_str().unwrap()).unwrap(),
        paths: vec![path.to_path_buf()],
        sha256: vec![themisto::util::sha256_file(path).unwrap()],
        origin: "test".into(),
        absent: Vec::new(),
    }
}

fn load(r: &ResolvedModel, engine: Engine, weights: WeightsPolicy) -> LoadedModel {
    load_model(r, &Device::Cpu, &LoadOptions { weights, engine, ..Default::default() }).unwrap()
}

/// Largest |a − b| as a fraction of b's range.
fn rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let (lo, hi) = b.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max) / (hi - lo)
}

/// Feed the same tokens to both engines (a prompt, then single tokens) and
/// return the worst logit difference.
fn compare(arch: &str, wt: GgmlDType) -> f32 {
    let dir = common::tempdir();
    let path = dir.path().join(format!("tiny-{arch}.gguf"));
    write_model(&path, arch, wt);
    let r = resolved(&path);
    let mut native = load(&r, Engine::Native, WeightsPolicy::Auto);
    let mut reference = load(&r, Engine::Candle, WeightsPolicy::F32);
    assert_eq!(native.info.engine, Engine::Native.as_str());
    let prompt = native.tokenizer.encode("df = pd.read_csv('data.csv')\nprint(df.head())\n").unwrap();
    let mut worst = rel_diff(&native.model.forward(&prompt).unwrap(), &reference.model.forward(&prompt).unwrap());
    for &t in prompt.iter().take(6) {
        worst = worst.max(rel_diff(&native.model.forward(&[t]).unwrap(), &reference.model.forward(&[t]).unwrap()));
    }
    worst
}

#[test]
fn float_weights_match_candle_closely() {
    for arch in ["llama", "qwen2", "qwen3"] {
        for wt in [GgmlDType::F32, GgmlDType::F16] {
            let d = compare(arch, wt);
            assert!(d < 2e-3, "{arch} {wt:?}: logits differ by {d} of their range");
        }
    }
}

/// Largest logit difference allowed for quantized weights, as a fraction of
/// the logit range. It is set by the 8-bit activation rounding, not by the
/// weight formats: measured 0.012–0.022 over the types below (each type gets
/// its own random weights, so this is the spread over ten small random
/// models), and 0.0002–0.0007 for every type (the half-float KV cache) when
/// the same weight decoding is multiplied with unrounded f32 activations.
/// A wrong weight layout shows up as tens of percent here, and exactly in the
/// unit tests of `model::native` against candle's dequantizer.
const QUANTIZED_MAX_REL_DIFF: f32 = 0.03;

#[test]
fn quantized_weights_match_candle_within_activation_rounding() {
    let types = [
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];
    for wt in types {
        let d = compare("llama", wt);
        assert!(d < QUANTIZED_MAX_REL_DIFF, "llama {wt:?}: logits differ by {d} of their range");
    }
    for arch in ["qwen2", "qwen3"] {
        let d = compare(arch, GgmlDType::Q4K);
        assert!(d < QUANTIZED_MAX_REL_DIFF, "{arch} Q4_K: logits differ by {d} of their range");
    }
}

/// Linear rope scaling (deepseek-coder's files): both engines divide the
/// positions by the factor. A factor of 1 gives the unscaled bits; a factor
/// of 4 changes the logits, and the two engines (independent rotary code)
/// still agree as closely as unscaled; the older `rope.scale_linear` key
/// means the same. Kinds no engine computes (yarn) are refused by both.
#[test]
fn linear_rope_scaling_runs_on_both_engines_and_other_kinds_are_refused() {
    let dir = common::tempdir();
    for arch in ["llama", "qwen2", "qwen3"] {
        let write = |name: &str, extra: &[(&str, Value)]| {
            let path = dir.path().join(format!("{arch}-{name}.gguf"));
            let extra: Vec<(String, Value)> = extra.iter().map(|(k, v)| (format!("{arch}.{k}"), v.clone())).collect();
            write_model_with(&path, arch, GgmlDType::F32, &extra);
            resolved(&path)
        };
        let linear =
            |f: f32| [("rope.scaling.type", Value::String("linear".into())), ("rope.scaling.factor", Value::F32(f))];
        let files = [
            write("plain", &[]),
            write("one", &linear(1.0)),
            write("four", &linear(4.0)),
            write("legacy-four", &[("rope.scale_linear", Value::F32(4.0))]),
        ];
        let mut logits: Vec<[Vec<f32>; 2]> = Vec::new();
        for r in &files {
            let mut native = load(r, Engine::Native, WeightsPolicy::Auto);
            let mut candle = load(r, Engine::Candle, WeightsPolicy::F32);
            let prompt = native.tokenizer.encode("df = pd.read_csv('data.csv')\nprint(df.head())\n").unwrap();
            let (a, b) = (native.model.forward(&prompt).unwrap(), candle.model.forward(&prompt).unwrap());
            assert!(rel_diff(&a, &b) < 2e-3, "{arch} {}: engines differ by {}", r.paths[0].display(), rel_diff(&a, &b));
            logits.push([a, b]);
        }
        assert_eq!(logits[1], logits[0], "{arch}: a linear factor of 1 is no scaling");
        assert_eq!(logits[3], logits[2], "{arch}: rope.scale_linear is the same scaling");
        for (scaled, plain) in logits[2].iter().zip(&logits[0]) {
            assert!(rel_diff(scaled, plain) > 1e-2, "{arch}: a factor of 4 changes the logits");
        }
        let yarn = write(
            "yarn",
            &[("rope.scaling.type", Value::String("yarn".into())), ("rope.scaling.factor", Value::F32(4.0))],
        );
        for engine in [Engine::Native, Engine::Candle, Engine::Auto] {
            let opts = LoadOptions { engine, ..Default::default() };
            let err =
                load_model(&yarn, &Device::Cpu, &opts).err().unwrap_or_else(|| panic!("{arch} {engine:?}: yarn loads"));
            assert!(err.to_string().contains("rope scaling"), "{arch} {engine:?}: {err}");
        }
    }
}

#[test]
fn unsupported_files_fall_back_to_candle_or_fail_clearly() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny-llama.gguf");
    write_model(&path, "llama", GgmlDType::Q8_0);
    let r = resolved(&path);
    // Dequantized weights are candle's business.
    let err = load_model(
        &r,
        &Device::Cpu,
        &LoadOptions { weights: WeightsPolicy::F32, engine: Engine::Native, ..Default::default() },
    )
    .err()
    .expect("native with f32 weights must fail");
    assert!(err.to_string().contains("--engine candle"), "{err}");
    let m = load(&r, Engine::Auto, WeightsPolicy::F32);
    assert_eq!(m.info.engine, Engine::Candle.as_str());
    assert_eq!(m.info.engine, "candle");
}

/// Batched decoding on the native engine: several slots fed in one pass
/// (and a prefix copied between slots) give bit-identical logits to each
/// sequence fed alone, for every architecture and a float and two
/// quantized weight types.
#[test]
fn slots_fed_together_equal_each_fed_alone() {
    let texts = ["import numpy as np\nx = np.arange(10)\n", "df.describe()\n", "for i in range(3):\n    print(i)\n"];
    for (arch, wt) in
        [("llama", GgmlDType::F16), ("llama", GgmlDType::Q4_1), ("qwen2", GgmlDType::Q4K), ("qwen3", GgmlDType::Q6K)]
    {
        let dir = common::tempdir();
        let path = dir.path().join(format!("tiny-{arch}.gguf"));
        write_model(&path, arch, wt);
        let r = resolved(&path);
        let mut alone = load(&r, Engine::Native, WeightsPolicy::Auto);
        let mut batched = load(&r, Engine::Native, WeightsPolicy::Auto);
        let m = batched.model.as_mut();
        m.set_slots(texts.len()).unwrap();
        assert_eq!(m.slot_count(), 3);
        let prompts: Vec<Vec<u32>> = texts.iter().map(|t| alone.tokenizer.encode(t).unwrap()).collect();
        // Expected: each sequence alone from an empty cache, then 5 tokens.
        let mut expected = Vec::new();
        for p in &prompts {
            alone.model.truncate(0).unwrap();
            let mut seq = vec![alone.model.forward(p).unwrap()];
            for step in 0..5u32 {
                seq.push(alone.model.forward(&[p[step as usize % p.len()]]).unwrap());
            }
            expected.push(seq);
        }
        // Slot 2 starts from a copy of slot 0's first tokens when it shares them.
        let mut got: Vec<Vec<Vec<f32>>> = vec![Vec::new(); 3];
        let mut logits = Logits::new();
        let mut one = |m: &mut dyn LanguageModel, slot: usize, tokens: &[u32]| {
            m.forward_slots(&Feed::one(slot, tokens), &mut logits).unwrap();
            assert_eq!(logits.rows(), 1);
            logits.row(0).to_vec()
        };
        for (i, p) in prompts.iter().enumerate() {
            got[i].push(one(m, i, p));
        }
        let mut feed = Feed::new();
        let mut shared_logits = Logits::new();
        for step in 0..5usize {
            let feeds: Vec<[u32; 1]> = prompts.iter().map(|p| [p[step % p.len()]]).collect();
            // Slots in a varying order and number: slot 1 skips step 2 and catches up alone.
            let order: Vec<usize> = if step == 2 { vec![2, 0] } else { vec![0, 1, 2] };
            feed.clear();
            for &i in &order {
                feed.push(i, &feeds[i]);
            }
            m.forward_slots(&feed, &mut shared_logits).unwrap();
            assert_eq!(shared_logits.rows(), order.len());
            for (&i, l) in order.iter().zip(shared_logits.iter()) {
                got[i].push(l.to_vec());
            }
            if step == 2 {
                got[1].push(one(m, 1, &feeds[1]));
            }
        }
        assert_eq!(got, expected, "{arch} {wt:?}");
        // A copied prefix continues like the original.
        let shared = prompts[0].len();
        m.copy_prefix(0, 1, shared).unwrap();
        assert_eq!(m.slot_tokens(1), &prompts[0][..]);
        let from_copy = one(m, 1, &prompts[0][..1]);
        assert_eq!(from_copy, expected[0][1], "{arch} {wt:?}: continuing a copied prefix");
        feed.clear();
        feed.push(0, &[1]);
        feed.push(0, &[2]);
        assert!(m.forward_slots(&feed, &mut shared_logits).is_err(), "a slot twice in one pass");
    }
}

/// Draft checking's promise ([`LanguageModel::exact_rows`]) on every
/// architecture, four weight types and every kernel set: a pass that feeds
/// one slot five tokens (wanting the logits after each) beside another
/// slot's single token gives each row the bits of feeding the tokens one at
/// a time.
#[test]
fn rows_of_one_pass_equal_tokens_fed_one_at_a_time() {
    use themisto::model::native::{Kernels, NativeModel};
    for (arch, wt) in
        [("llama", GgmlDType::F16), ("llama", GgmlDType::Q4_1), ("qwen2", GgmlDType::Q4K), ("qwen3", GgmlDType::Q6K)]
    {
        let dir = common::tempdir();
        let path = dir.path().join(format!("tiny-{arch}.gguf"));
        write_model(&path, arch, wt);
        let (ct, _) = themisto::model::gguf::read_content(&path).unwrap();
        let tokenizer = themisto::model::gguf::tokenizer_for(&path, &ct).unwrap();
        let ids = tokenizer.encode("import pandas as pd\ndf = pd.read_csv('data.csv')\ndf.head()\n").unwrap();
        let (prompt, more) = ids.split_at(ids.len() - 5);
        let mut m = NativeModel::load(&path, &ct).unwrap();
        let mut sets = vec![Kernels::detect()];
        if Kernels::detect() != Kernels::Scalar {
            sets.extend([Kernels::Avx2, Kernels::Scalar]);
        }
        for kernels in sets {
            m.set_kernels(kernels);
            m.set_slots(1).unwrap();
            m.truncate(0).unwrap();
            m.forward(prompt).unwrap();
            let alone: Vec<Vec<f32>> = more.iter().map(|&t| m.forward(&[t]).unwrap()).collect();
            m.truncate(prompt.len()).unwrap();
            m.set_slots(2).unwrap();
            let mut logits = Logits::new();
            m.forward_slots(&Feed::one(1, &prompt[..3]), &mut logits).unwrap();
            let mut feed = Feed::new();
            feed.push_rows(0, more, more.len());
            feed.push(1, &prompt[3..4]);
            m.forward_slots(&feed, &mut logits).unwrap();
            for (i, want) in alone.iter().enumerate() {
                assert_eq!(logits.row(i), &want[..], "{arch} {wt:?} {}: row {i}", kernels.name());
            }
        }
    }
}

/// Two models on rayon's one pool at once, one warming its threads'
/// buffers (`set_slots`) while the other computes: a thread that waits
/// inside the warming may run a product of the other model, and must find
/// its buffers free (a shared borrow here once panicked "RefCell already
/// borrowed", in about one full test run out of three).
#[test]
fn a_model_warming_while_another_computes_on_the_same_pool() {
    let dir = common::tempdir();
    let path = dir.path().join("tiny-llama.gguf");
    write_model(&path, "llama", GgmlDType::Q4K);
    let r = resolved(&path);
    let mut computing = load(&r, Engine::Native, WeightsPolicy::Auto);
    let prompt = computing.tokenizer.encode("import pandas as pd\ndf = pd.read_csv('x.csv')\n").unwrap();
    let expected = computing.model.forward(&prompt).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut warming = load(&r, Engine::Native, WeightsPolicy::Auto);
            let m = warming.model.as_mut();
            for i in 0..400 {
                m.set_slots(1 + i % 8).unwrap();
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut passes = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) || passes < 10 {
            computing.model.truncate(0).unwrap();
            assert_eq!(computing.model.forward(&prompt).unwrap(), expected);
            passes += 1;
        }
    });
}
