//! The budget fitter: finds the fullest [`Shape`] whose final prompt (template,
//! chat format and special tokens included), counted with the model's own
//! tokenizer, leaves room for the answer: `prompt_tokens + max_new_tokens <=
//! context_tokens`. Every returned prompt has been counted exactly.
//!
//! What gives way, in order (each phase keeps what the earlier ones took away):
//! 1. outputs of older history steps are shortened (head and tail kept, marked);
//! 2. the oldest steps are dropped, whole, down to the newest one;
//! 3. runtime rows are dropped, least relevant first;
//! 4. the newest history step is shortened (output, then code);
//! 5. the newest history step is dropped.
//!
//! If nothing fits, the sample is skipped with reason `over_budget` (the target
//! code of the output task is never cut). The number of kept steps never
//! decreases along the walk, so a larger budget never keeps fewer steps.

use super::context::{ContextSource, Shape};

/// Output caps (characters) tried on older history steps, in order.
pub const OUTPUT_CAPS: [usize; 4] = [2000, 1000, 500, 250];
/// Caps on the newest history step's output, then its code.
pub const NEWEST_OUTPUT_CAPS: [usize; 3] = [500, 120, 0];
pub const NEWEST_CODE_CAPS: [usize; 3] = [1000, 300, 100];

/// The shapes to try, grouped in phases; within a phase later shapes are leaner.
pub fn phases(src: &ContextSource<'_>, max_rows: usize) -> Vec<Vec<Shape>> {
    let n = src.history_len();
    let last_cap = OUTPUT_CAPS.last().copied();
    let newest_first = n.saturating_sub(1);
    let mut out = Vec::new();
    // 1. Shorten older outputs.
    let mut a = vec![Shape { runtime_rows: max_rows, ..Shape::default() }];
    for cap in OUTPUT_CAPS {
        a.push(Shape { output_cap: Some(cap), runtime_rows: max_rows, ..Shape::default() });
    }
    out.push(a);
    // 2. Drop the oldest steps.
    let b: Vec<Shape> = (1..=newest_first)
        .map(|f| Shape { first_step: f, output_cap: last_cap, runtime_rows: max_rows, ..Shape::default() })
        .collect();
    if !b.is_empty() {
        out.push(b);
    }
    // 3. Drop runtime rows.
    let c: Vec<Shape> = (0..max_rows)
        .rev()
        .map(|r| Shape { first_step: newest_first, output_cap: last_cap, runtime_rows: r, ..Shape::default() })
        .collect();
    if !c.is_empty() {
        out.push(c);
    }
    if n > 0 {
        // 4. Shorten the newest step.
        let base = Shape { first_step: newest_first, output_cap: last_cap, runtime_rows: 0, ..Shape::default() };
        let mut d = Vec::new();
        for oc in NEWEST_OUTPUT_CAPS {
            d.push(Shape { newest_output_cap: Some(oc), ..base });
        }
        for cc in NEWEST_CODE_CAPS {
            d.push(Shape { newest_output_cap: NEWEST_OUTPUT_CAPS.last().copied(), newest_code_cap: Some(cc), ..base });
        }
        out.push(d);
        // 5. Drop it.
        out.push(vec![Shape { first_step: n, output_cap: last_cap, runtime_rows: 0, ..Shape::default() }]);
    }
    out
}

/// Find the first shape (in walk order) that fits. `eval` returns `Some` for
/// a shape that fits. Each phase's leanest shape is tried first; inside the
/// first phase whose leanest shape fits, a binary search finds the fullest
/// fitting shape (prompt length falls along a phase). Returns `None` when no
/// shape fits.
pub fn first_fit<T, E>(
    phases: &[Vec<Shape>],
    mut eval: impl FnMut(&Shape) -> Result<Option<T>, E>,
) -> Result<Option<T>, E> {
    for phase in phases {
        // Fullest first: often everything fits.
        if let Some(hit) = eval(&phase[0])? {
            return Ok(Some(hit));
        }
        let last = phase.len() - 1;
        let Some(mut best) = eval(&phase[last])? else { continue };
        // Invariant: phase[lo] does not fit, phase[hi] fits (its result is `best`).
        let (mut lo, mut hi) = (0usize, last);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match eval(&phase[mid])? {
                Some(hit) => {
                    best = hit;
                    hi = mid;
                }
                None => lo = mid,
            }
        }
        return Ok(Some(best));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::samples::Task;
    use crate::data::{OutputKind, Step, Trajectory};

    fn traj(n: usize) -> Trajectory {
        Trajectory {
            id: "t".into(),
            steps: (0..n)
                .map(|i| Step {
                    step: i,
                    code: format!("x{i} = {i}"),
                    output: "o".repeat(i * 300),
                    output_kind: OutputKind::Stream,
                    stderr: None,
                    has_image: false,
                    runtime: None,
                    extra: Default::default(),
                })
                .collect(),
        }
    }

    /// Cost model: characters of the built context.
    fn cost(src: &ContextSource<'_>, s: &Shape) -> usize {
        let b = src.build(s);
        b.context.cells.iter().map(|c| c.code.len() + c.output.len() + 20).sum::<usize>()
            + b.context.runtime.map(|r| r.rows.len() * 30).unwrap_or(0)
    }

    #[test]
    fn steps_kept_never_grow_along_the_walk() {
        let t = traj(8);
        let src = ContextSource::new(&t, 7, Task::NextCell, false, 60);
        let all: Vec<Shape> = phases(&src, 0).into_iter().flatten().collect();
        let kept: Vec<usize> = all.iter().map(|s| src.build(s).context.cells.len()).collect();
        assert!(kept.windows(2).all(|w| w[0] >= w[1]), "{kept:?}");
        assert_eq!(kept[0], 7);
        assert_eq!(*kept.last().unwrap(), 0);
    }

    #[test]
    fn first_fit_finds_the_fullest_fitting_shape() {
        let t = traj(8);
        let src = ContextSource::new(&t, 7, Task::NextCell, false, 60);
        let ph = phases(&src, 0);
        let all: Vec<Shape> = ph.iter().flatten().copied().collect();
        for budget in [50usize, 200, 700, 1500, 3000, 20000] {
            let got = first_fit(&ph, |s| Ok::<_, ()>((cost(&src, s) <= budget).then_some(*s))).unwrap();
            let want = all.iter().find(|s| cost(&src, s) <= budget).copied();
            assert_eq!(got, want, "budget {budget}");
        }
    }
}
