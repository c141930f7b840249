//! `bench-model`: prompt-processing and generation speed of a model, measured
//! the way the runner uses it (a prompt read from an empty cache, then greedy
//! steps one token at a time). The prompt is real notebook text from the
//! embedded sample, cut to the requested length. A [`Grid`] measures every
//! combination of prompt lengths, generated lengths, thread counts and
//! batches, each with mean ± standard deviation over its repeats.

use crate::data::embedded;
use crate::decode::argmax;
use crate::model::{Feed, LanguageModel, Logits, ModelError};
use crate::tokenizer::Tokenizer;
use serde::Serialize;
use std::time::Instant;

/// What to measure.
#[derive(Debug, Clone, Serialize)]
pub struct BenchConfig {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub repeats: usize,
    /// Sequences decoded together after the prompt (each continues the
    /// same prompt, copied into its own cache).
    pub batch: usize,
}

/// Speeds of each repeat, tokens per second (generation: all sequences
/// of the batch together).
#[derive(Debug, Clone, Serialize)]
pub struct BenchResult {
    pub prompt_tokens_per_s: Vec<f64>,
    pub gen_tokens_per_s: Vec<f64>,
}

/// The median of a list.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    if s.is_empty() {
        return 0.0;
    }
    let m = s.len() / 2;
    if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    }
}

/// A prompt of exactly `n` tokens made of the embedded sample's code and outputs.
pub fn prompt_ids(tokenizer: &Tokenizer, n: usize) -> Result<Vec<u32>, ModelError> {
    let mut text = String::new();
    for line in embedded::SAMPLE_JSONL.lines() {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| ModelError::Other(e.to_string()))?;
        for k in ["code", "output"] {
            if let Some(s) = v.get(k).and_then(|s| s.as_str()) {
                text.push_str(s);
                text.push('\n');
            }
        }
        if text.len() > n * 8 {
            break;
        }
    }
    let mut ids = tokenizer.encode(&text)?;
    if ids.len() < n {
        return Err(ModelError::Other(format!("the sample text has only {} tokens; ask for fewer", ids.len())));
    }
    ids.truncate(n);
    Ok(ids)
}

/// Measure a model.
pub fn bench(
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    cfg: &BenchConfig,
) -> Result<BenchResult, ModelError> {
    if cfg.prompt_tokens + cfg.gen_tokens > model.context_length() {
        return Err(ModelError::Other(format!(
            "{} prompt + {} generated tokens exceed the model window of {}",
            cfg.prompt_tokens,
            cfg.gen_tokens,
            model.context_length()
        )));
    }
    let prompt = prompt_ids(tokenizer, cfg.prompt_tokens)?;
    let batch = cfg.batch.max(1);
    model.set_slots(batch)?;
    let mut res = BenchResult { prompt_tokens_per_s: Vec::new(), gen_tokens_per_s: Vec::new() };
    for _ in 0..cfg.repeats {
        model.truncate(0)?;
        let t = Instant::now();
        let first = model.forward(&prompt)?;
        res.prompt_tokens_per_s.push(prompt.len() as f64 / t.elapsed().as_secs_f64());
        for slot in 1..batch {
            model.copy_prefix(0, slot, prompt.len())?;
        }
        let (mut feed, mut logits) = (Feed::new(), Logits::new());
        for row in logits.reset(batch, first.len()).chunks_exact_mut(first.len()) {
            row.copy_from_slice(&first);
        }
        let t = Instant::now();
        for _ in 0..cfg.gen_tokens {
            feed.clear();
            for (slot, l) in logits.iter().enumerate() {
                feed.push(slot, &[argmax(l)]);
            }
            model.forward_slots(&feed, &mut logits)?;
        }
        res.gen_tokens_per_s.push((batch * cfg.gen_tokens) as f64 / t.elapsed().as_secs_f64());
    }
    model.set_slots(1)?;
    Ok(res)
}

/// Mean and sample standard deviation (n − 1; 0 for a single value).
pub fn mean_sd(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// The values of a grid (`--prompt-tokens 128,512 --gen-tokens 32 ...`).
#[derive(Debug, Clone)]
pub struct Grid {
    pub prompt_tokens: Vec<usize>,
    pub gen_tokens: Vec<usize>,
    /// Thread counts; `None`: the process's default pool.
    pub threads: Vec<Option<usize>>,
    pub batch: Vec<usize>,
    pub repeats: usize,
}

impl Grid {
    /// Every combination, in the order prompt, generated, threads, batch
    /// (the last varying fastest).
    pub fn combinations(&self) -> Vec<(BenchConfig, Option<usize>)> {
        let mut out = Vec::new();
        for &p in &self.prompt_tokens {
            for &g in &self.gen_tokens {
                for &t in &self.threads {
                    for &b in &self.batch {
                        out.push((BenchConfig { prompt_tokens: p, gen_tokens: g, repeats: self.repeats, batch: b }, t));
                    }
                }
            }
        }
        out
    }
}

/// One combination measured.
#[derive(Debug, Clone, Serialize)]
pub struct GridRow {
    pub prompt_tokens: usize,
    pub gen_tokens: usize,
    pub threads: usize,
    pub batch: usize,
    pub repeats: usize,
    pub prompt_tokens_per_s: Vec<f64>,
    pub gen_tokens_per_s: Vec<f64>,
    pub prompt_tokens_per_s_mean: f64,
    pub prompt_tokens_per_s_sd: f64,
    pub prompt_tokens_per_s_median: f64,
    pub gen_tokens_per_s_mean: f64,
    pub gen_tokens_per_s_sd: f64,
    pub gen_tokens_per_s_median: f64,
}

impl GridRow {
    fn new(cfg: &BenchConfig, threads: usize, r: BenchResult) -> Self {
        let (pm, ps) = mean_sd(&r.prompt_tokens_per_s);
        let (gm, gs) = mean_sd(&r.gen_tokens_per_s);
        GridRow {
            prompt_tokens: cfg.prompt_tokens,
            gen_tokens: cfg.gen_tokens,
            threads,
            batch: cfg.batch,
            repeats: cfg.repeats,
            prompt_tokens_per_s_mean: pm,
            prompt_tokens_per_s_sd: ps,
            prompt_tokens_per_s_median: median(&r.prompt_tokens_per_s),
            gen_tokens_per_s_mean: gm,
            gen_tokens_per_s_sd: gs,
            gen_tokens_per_s_median: median(&r.gen_tokens_per_s),
            prompt_tokens_per_s: r.prompt_tokens_per_s,
            gen_tokens_per_s: r.gen_tokens_per_s,
        }
    }
}

/// The model, handed to the pool thread that measures it while the calling
/// thread waits.
struct ModelRef<'a>(&'a mut dyn LanguageModel);

// SAFETY: `ThreadPool::install` blocks the calling thread until the closure
// has returned, so the model is used by exactly one thread at a time and
// never after the call; the engines' thread-local state is scratch space
// that any thread may rebuild.
unsafe impl Send for ModelRef<'_> {}

/// Measure every combination of the grid; `each` sees each row as it is
/// measured. Every combination's window is checked before any is measured.
pub fn bench_grid(
    model: &mut dyn LanguageModel,
    tokenizer: &Tokenizer,
    grid: &Grid,
    mut each: impl FnMut(&GridRow),
) -> Result<Vec<GridRow>, ModelError> {
    let combos = grid.combinations();
    for (cfg, _) in &combos {
        if cfg.prompt_tokens + cfg.gen_tokens > model.context_length() {
            return Err(ModelError::Other(format!(
                "{} prompt + {} generated tokens exceed the model window of {}",
                cfg.prompt_tokens,
                cfg.gen_tokens,
                model.context_length()
            )));
        }
    }
    let mut rows = Vec::with_capacity(combos.len());
    for (cfg, threads) in combos {
        let row = match threads {
            None => GridRow::new(&cfg, rayon::current_num_threads(), bench(model, tokenizer, &cfg)?),
            Some(n) => {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|e| ModelError::Other(format!("a pool of {n} threads: {e}")))?;
                // candle's CPU kernels read the count from the variable, rayon's
                // parallel loops from the pool they run in.
                let before = std::env::var_os("RAYON_NUM_THREADS");
                std::env::set_var("RAYON_NUM_THREADS", n.to_string());
                let m = ModelRef(&mut *model);
                let r = pool.install(move || {
                    let m = m;
                    bench(m.0, tokenizer, &cfg).map(|r| GridRow::new(&cfg, rayon::current_num_threads(), r))
                });
                match before {
                    Some(v) => std::env::set_var("RAYON_NUM_THREADS", v),
                    None => std::env::remove_var("RAYON_NUM_THREADS"),
                }
                r?
            }
        };
        each(&row);
        rows.push(row);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_sd() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        assert!((sd - (5.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(mean_sd(&[7.0]), (7.0, 0.0));
    }

    #[test]
    fn grid_combinations_vary_the_batch_fastest() {
        let g = Grid {
            prompt_tokens: vec![8, 16],
            gen_tokens: vec![2],
            threads: vec![None, Some(1)],
            batch: vec![1, 4],
            repeats: 2,
        };
        let c: Vec<(usize, Option<usize>, usize)> =
            g.combinations().iter().map(|(c, t)| (c.prompt_tokens, *t, c.batch)).collect();
        assert_eq!(
            c,
            [
                (8, None, 1),
                (8, None, 4),
                (8, Some(1), 1),
                (8, Some(1), 4),
                (16, None, 1),
                (16, None, 4),
                (16, Some(1), 1),
                (16, Some(1), 4)
            ]
        );
    }
}
