//! The budget bound and its monotonicity, with the real default tokenizer:
//! prompt tokens + max new tokens never exceed the window, and a larger budget
//! never keeps fewer steps.

use crate::common;

use proptest::prelude::*;
use std::sync::OnceLock;
use themisto::data::samples::{Sample, Task};
use themisto::data::{Dataset, OutputKind, RuntimeSnapshot, Step, Trajectory, Variable};
use themisto::prompt::PromptFormat;
use themisto::prompt::{FitMode, FitOutcome, FittedPrompt, PromptBuilder, PromptSettings};
use themisto::tokenizer::Tokenizer;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let m = common::default_model();
        let (ct, _) = themisto::model::gguf::read_content(m.gguf().0).unwrap();
        Tokenizer::from_gguf(&ct).unwrap()
    })
}

/// Settings of the independent fitting (whose larger budgets never keep fewer steps).
fn settings(context: usize, max_new: usize) -> PromptSettings {
    settings_fit(context, max_new, FitMode::Independent)
}

fn settings_fit(context: usize, max_new: usize, fit: FitMode) -> PromptSettings {
    PromptSettings {
        context_tokens: context,
        max_new_tokens: max_new,
        runtime_share: 0.25,
        repr_chars: 80,
        fit,
        format: None,
    }
}

const SNIPPETS: &[&str] = &[
    "import pandas as pd\nimport numpy as np",
    "df = pd.read_csv('data/sales.csv')\ndf.head()",
    "df['total'] = df['price'] * df['qty']",
    "print(df.describe())",
    "for col in df.columns:\n    print(col, df[col].isna().sum())",
    "df.groupby('region')['total'].sum().sort_values(ascending=False)",
    "def clean(s):\n    return s.strip().lower()\n\ndf['name'] = df['name'].map(clean)",
    "x = [i ** 2 for i in range(10)]\nx",
];

fn step_strategy() -> impl Strategy<Value = (usize, usize, bool, String)> {
    (0..SNIPPETS.len(), 0usize..4000, any::<bool>(), "[a-z0-9 ()\\n.=_'é日]{0,40}")
}

fn make_dataset(steps: Vec<(usize, usize, bool, String)>) -> Dataset {
    let mut out = Vec::new();
    for (i, (snip, out_len, with_rt, extra)) in steps.into_iter().enumerate() {
        let output: String = "   PassengerId  Survived  Pclass\n0            1         0       3\n"
            .chars()
            .cycle()
            .take(out_len)
            .collect();
        let runtime = with_rt.then(|| RuntimeSnapshot {
            exec_time_s: Some(0.01 * i as f64),
            memory_bytes: Some(100_000_000 + i as u64),
            variables: (0..(i % 7 + 1))
                .map(|v| Variable {
                    name: format!("var_{v}"),
                    type_name: "DataFrame".into(),
                    size_bytes: Some(1000),
                    repr: format!("value {v} at step {i} {extra}"),
                    shape: Some(vec![10, v as u64 + 1]),
                    len: None,
                })
                .collect(),
            state_hash: None,
        });
        out.push(Step {
            step: i,
            code: format!("{}\n{}", SNIPPETS[snip], extra),
            output,
            output_kind: if out_len > 0 { OutputKind::ExecuteResult } else { OutputKind::None },
            stderr: None,
            has_image: false,
            runtime,
            extra: Default::default(),
        });
    }
    Dataset {
        name: "prop".into(),
        source: "prop".into(),
        trajectories: vec![Trajectory { id: "t".into(), steps: out }],
        sha256: String::new(),
    }
}

fn kept(outcome: &FitOutcome) -> Option<usize> {
    match outcome {
        FitOutcome::Fitted(p) => Some(p.steps_kept),
        FitOutcome::Skipped { .. } => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn bound_holds_and_larger_budgets_keep_more(
        steps in prop::collection::vec(step_strategy(), 1..25),
        budgets in prop::collection::vec(64usize..8192, 2..4),
        max_new in 8usize..200,
        output_task in any::<bool>(),
        runtime in any::<bool>(),
    ) {
        let dataset = make_dataset(steps);
        let k = dataset.trajectories[0].steps.len() - 1;
        let task = if output_task { Task::Output } else { Task::NextCell };
        let sample = Sample::new("prop", &themisto::data::samples::SampleRef { task, trajectory: "t".into(), step: k }, runtime);
        let tok = tokenizer();
        let mut budgets = budgets;
        budgets.sort();
        let mut last: Option<Option<usize>> = None;
        for context in budgets {
            let max_new = max_new.min(context / 2);
            let b = PromptBuilder::new(tok, PromptFormat::Chat, settings(context, max_new), vec![]).unwrap();
            let outcome = b.build(&dataset, &sample).unwrap();
            if let FitOutcome::Fitted(p) = &outcome {
                prop_assert!(p.tokens.len() + max_new <= context, "{} + {} > {}", p.tokens.len(), max_new, context);
                prop_assert_eq!(&p.tokens, &tok.encode(&p.text).unwrap());
                if task == Task::Output {
                    prop_assert!(p.text.contains(&dataset.trajectories[0].steps[k].code));
                }
            }
            let now = kept(&outcome);
            if let Some(prev) = last {
                // Skipped (None) < any fitted count; fitted counts never shrink.
                prop_assert!(prev <= now, "budget {} kept {:?} after {:?}", context, now, prev);
            }
            last = Some(now);
        }
    }
}

/// The four prompts of step `k` (next cell, next cell + runtime, output, output + runtime).
fn step_prompts(b: &PromptBuilder, dataset: &Dataset, k: usize) -> Vec<FitOutcome> {
    PromptBuilder::VARIANTS
        .iter()
        .map(|&(task, rt)| {
            let r = themisto::data::samples::SampleRef { task, trajectory: "t".into(), step: k };
            b.build(dataset, &Sample::new("prop", &r, rt)).unwrap()
        })
        .collect()
}

/// The runtime prompt without its runtime block (the lines from `# Runtime
/// state after` to the blank line after them).
fn without_runtime_block(text: &str) -> String {
    let Some(start) = text.find("\n# Runtime state after In[") else { return text.to_string() };
    let end = text[start + 1..].find("\n\n").map(|e| start + 1 + e + 1).expect("block ends");
    format!("{}{}", &text[..start], &text[end..])
}

/// The shown history of a chat prompt: everything before the task's own part.
fn history_part(p: &FittedPrompt) -> &str {
    let end = ["\n# Runtime state after In[", "\nWrite only the code", "\nNow I run this cell:"]
        .iter()
        .filter_map(|m| p.text.find(m))
        .min()
        .expect("a task part");
    &p.text[..end]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// `--fit shared`: the bound holds for every prompt; the four prompts of
    /// a step show the same history (runtime and plain differ only by the
    /// runtime block); while the window stays put, a step's history extends
    /// the previous step's; `shared_prefix_tokens` is the longest token
    /// prefix shared with another prompt of the step.
    #[test]
    fn shared_fit_keeps_the_bound_and_one_history_per_step(
        steps in prop::collection::vec(step_strategy(), 1..20),
        context in 96usize..6000,
        max_new in 8usize..200,
    ) {
        let dataset = make_dataset(steps);
        let n = dataset.trajectories[0].steps.len();
        let tok = tokenizer();
        let max_new = max_new.min(context / 2);
        let b = PromptBuilder::new(tok, PromptFormat::Chat, settings_fit(context, max_new, FitMode::Shared), vec![]).unwrap();
        let mut previous: Option<(themisto::prompt::shared::Window, String)> = None;
        for k in 0..n {
            let outcomes = step_prompts(&b, &dataset, k);
            let fitted: Vec<&FittedPrompt> = outcomes.iter().filter_map(|o| match o { FitOutcome::Fitted(p) => Some(p), _ => None }).collect();
            for p in &fitted {
                prop_assert!(p.tokens.len() + max_new <= context, "{} + {} > {}", p.tokens.len(), max_new, context);
                prop_assert_eq!(&p.tokens, &tok.encode(&p.text).unwrap());
                prop_assert!(p.template_id.ends_with(".chat.v3"), "{}", p.template_id);
                let others = fitted.iter().filter(|q| !std::ptr::eq(**q, *p));
                let want = others.map(|q| p.tokens.iter().zip(&q.tokens).take_while(|(a, b)| a == b).count()).max().unwrap_or(0);
                prop_assert_eq!(p.shared_prefix_tokens, want);
            }
            if let Some(window) = fitted.iter().find_map(|p| p.window) {
                // A common window: all four fit and show the same steps.
                prop_assert_eq!(fitted.len(), 4);
                prop_assert!(fitted.iter().all(|p| p.window == Some(window)));
                let kept: Vec<(usize, usize)> = fitted.iter().map(|p| (p.dropped_steps, p.steps_kept)).collect();
                prop_assert!(kept.iter().all(|x| *x == kept[0]), "{:?}", kept);
                prop_assert_eq!(without_runtime_block(&fitted[1].text), fitted[0].text.clone());
                prop_assert_eq!(without_runtime_block(&fitted[3].text), fitted[2].text.clone());
                let history = history_part(fitted[0]).to_string();
                prop_assert!(fitted.iter().all(|p| history_part(p) == history));
                if let Some((w, prev)) = &previous {
                    if *w == window {
                        prop_assert!(history.starts_with(prev.as_str()), "step {} does not extend step {}", k, k - 1);
                    }
                }
                previous = Some((window, history));
            } else {
                previous = None;
            }
        }
    }
}

#[test]
fn shared_fit_moves_the_window_in_jumps() {
    // 30 steps of about 100 tokens each in a 1024-token budget.
    let steps = (0..30).map(|i| (i % SNIPPETS.len(), 300, true, String::new())).collect();
    let dataset = make_dataset(steps);
    let b =
        PromptBuilder::new(tokenizer(), PromptFormat::Chat, settings_fit(1280, 256, FitMode::Shared), vec![]).unwrap();
    let mut dropped = Vec::new();
    for k in 0..30 {
        let outcomes = step_prompts(&b, &dataset, k);
        let FitOutcome::Fitted(p) = &outcomes[3] else { panic!("step {k} fits") };
        let w = p.window.unwrap_or_else(|| panic!("step {k} has a common window"));
        assert_eq!(w.first_step, p.dropped_steps);
        dropped.push(p.dropped_steps);
    }
    let moves: Vec<usize> = (1..30).filter(|&k| dropped[k] != dropped[k - 1]).collect();
    assert!(moves.len() >= 2, "{dropped:?}");
    // Between two moves the window stays put for several steps.
    assert!(moves.windows(2).all(|m| m[1] - m[0] >= 2), "{moves:?}: {dropped:?}");
    assert!(dropped.windows(2).all(|w| w[0] <= w[1]), "{dropped:?}");
}

#[test]
fn runtime_prompt_differs_from_plain_by_the_runtime_block() {
    let steps = (0..8).map(|i| (i % SNIPPETS.len(), 50, true, String::new())).collect();
    let dataset = make_dataset(steps);
    let tok = tokenizer();
    let b = PromptBuilder::new(tok, PromptFormat::Chat, settings(4096, 128), vec![]).unwrap();
    for task in Task::ALL {
        let r = themisto::data::samples::SampleRef { task, trajectory: "t".into(), step: 7 };
        let (FitOutcome::Fitted(plain), FitOutcome::Fitted(rt)) = (
            b.build(&dataset, &Sample::new("prop", &r, false)).unwrap(),
            b.build(&dataset, &Sample::new("prop", &r, true)).unwrap(),
        ) else {
            panic!("both fit in 4096 tokens")
        };
        assert_eq!(plain.dropped_steps, 0);
        assert_eq!(rt.dropped_steps, 0);
        // Removing the runtime block from the runtime prompt gives the plain prompt.
        let start = rt.text.find("\n# Runtime state after In[7]").expect("runtime block present");
        // The block ends at the first blank line after it.
        let end = rt.text[start + 1..].find("\n\n").map(|e| start + 1 + e + 1).expect("block ends");
        let without = format!("{}{}", &rt.text[..start], &rt.text[end..]);
        assert_eq!(without, plain.text, "task {task}");
        assert_eq!(rt.runtime_rows_kept, 7);
    }
}
