//! The budget bound and its monotonicity on real trajectories, with the real
//! default tokenizer and the built-in chat templates: every step with five
//! earlier steps of the embedded sample (every fourth) and of the shared
//! public notebooks (every sixth), both tasks, both runtime variants, at
//! budgets from 128 to 8192 tokens.

use crate::common;

use themisto::data::samples::{Sample, SampleRef, Task};
use themisto::data::{load_paths, Dataset, LoadOptions};
use themisto::prompt::PromptFormat;
use themisto::prompt::{FitMode, FitOutcome, PromptBuilder, PromptSettings};
use themisto::tokenizer::Tokenizer;

const BUDGETS: [usize; 7] = [128, 256, 512, 1024, 2048, 4096, 8192];
const MAX_NEW: usize = 64;

fn tokenizer() -> Tokenizer {
    let m = common::default_model();
    let (ct, _) = themisto::model::gguf::read_content(m.gguf().0).unwrap();
    Tokenizer::from_gguf(&ct).unwrap()
}

/// Checks every `every`-th candidate step; returns how many steps were
/// checked and how many prompts fitted.
fn check(dataset: &Dataset, every: usize) -> (usize, usize) {
    let tok = tokenizer();
    let builders: Vec<PromptBuilder> = BUDGETS
        .iter()
        .map(|&context| {
            let settings = PromptSettings {
                context_tokens: context,
                max_new_tokens: MAX_NEW,
                runtime_share: 0.25,
                repr_chars: 80,
                fit: FitMode::Independent,
                format: None,
            };
            PromptBuilder::new(&tok, PromptFormat::Chat, settings, vec![]).unwrap()
        })
        .collect();
    let (mut checked, mut fitted) = (0, 0);
    let candidates = dataset.trajectories.iter().flat_map(|t| (5..t.steps.len()).map(move |k| (t, k))).step_by(every);
    for (traj, k) in candidates {
        checked += 1;
        for task in Task::ALL {
            for runtime in [false, true] {
                let r = SampleRef { task, trajectory: traj.id.clone(), step: k };
                let sample = Sample::new(&dataset.name, &r, runtime);
                let mut last: Option<Option<usize>> = None;
                for (b, &context) in builders.iter().zip(&BUDGETS) {
                    let outcome = b.build(dataset, &sample).unwrap();
                    let now = match &outcome {
                        FitOutcome::Fitted(p) => {
                            assert!(
                                p.tokens.len() + MAX_NEW <= context,
                                "{} step {k} {task} runtime={runtime}: {} + {MAX_NEW} > {context}",
                                traj.id,
                                p.tokens.len()
                            );
                            if task == Task::Output {
                                assert!(
                                    p.text.contains(traj.steps[k].code.trim_end()),
                                    "{} step {k}: target code missing",
                                    traj.id
                                );
                            }
                            fitted += 1;
                            Some(p.steps_kept)
                        }
                        FitOutcome::Skipped { .. } => None,
                    };
                    if let Some(prev) = last {
                        assert!(
                            prev <= now,
                            "{} step {k} {task} runtime={runtime}: {context} tokens kept {now:?} after {prev:?}",
                            traj.id
                        );
                    }
                    last = Some(now);
                }
            }
        }
    }
    (checked, fitted)
}

#[test]
fn bound_and_monotonicity_on_the_embedded_sample() {
    let dataset = themisto::data::embedded::load().unwrap();
    let (checked, fitted) = check(&dataset, 4);
    // 2 tasks x 2 variants x 7 budgets per step; all but the smallest fit.
    assert!(checked >= 30 && fitted > checked * 4 * 4, "{fitted} prompts fitted for {checked} steps");
}

#[test]
fn bound_and_monotonicity_on_the_shared_notebooks() {
    let Some(dir) = common::shared_notebooks() else { return };
    let loaded = load_paths(&[dir], &LoadOptions::default()).unwrap();
    let (checked, fitted) = check(&loaded.dataset, 6);
    assert!(checked >= 50 && fitted > checked * 4 * 3, "{fitted} prompts fitted for {checked} steps");
}
