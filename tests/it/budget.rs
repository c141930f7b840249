//! The budget bound and its monotonicity, with the real default tokenizer:
//! prompt tokens + max new tokens never exceed the window, and a larger budget
//! never keeps fewer steps.

use crate::common;

use proptest::prelude::*;
use std::sync::OnceLock;
use themisto::data::samples::{Sample, Task};
use themisto::data::{Dataset, OutputKind, RuntimeSnapshot, Step, Trajectory, Variable};
use themisto::prompt::PromptFormat;
use themisto::prompt::{FitOutcome, PromptBuilder, PromptSettings};
use themisto::tokenizer::Tokenizer;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let m = common::default_model();
        let (ct, _) = themisto::model::gguf::read_content(m.gguf().0).unwrap();
        Tokenizer::from_gguf(&ct).unwrap()
    })
}

fn settings(context: usize, max_new: usize) -> PromptSettings {
    PromptSettings { context_tokens: context, max_new_tokens: max_new, runtime_share: 0.25, repr_chars: 80 }
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
