//! The values a template sees: history cells, the target cell and the runtime
//! block, built from a trajectory under a [`Shape`] that says what to keep.
//!
//! Shortened texts keep their head and tail and say how much was cut:
//! `...[N characters cut]...`.

use crate::data::samples::Task;
use crate::data::{RuntimeSnapshot, Step, Trajectory, Variable};
use serde::Serialize;

/// What to keep of a sample's context. The fitter walks from the fullest shape
/// to the leanest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// History steps before this index are dropped.
    pub first_step: usize,
    /// Cap (characters) on outputs of history steps other than the newest.
    pub output_cap: Option<usize>,
    /// Runtime rows kept (most relevant first).
    pub runtime_rows: usize,
    /// Caps on the newest history step's output and code (last resort).
    pub newest_output_cap: Option<usize>,
    pub newest_code_cap: Option<usize>,
}

/// One history cell as a template sees it.
#[derive(Debug, Clone, Serialize)]
pub struct CellView {
    pub number: usize,
    pub code: String,
    pub output: String,
    pub output_kind: &'static str,
    pub output_cut: bool,
    pub code_cut: bool,
}

/// The cell whose output is predicted (output task).
#[derive(Debug, Clone, Serialize)]
pub struct TargetView {
    pub number: usize,
    pub code: String,
}

/// One variable row of the runtime block.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VarRow {
    pub name: String,
    #[serde(rename = "type")]
    pub type_name: String,
    /// Shape, length or size, as text (`891x12`, `len 5`, `64 B`), or `-`.
    pub size: String,
    /// One-line repr, shortened.
    pub repr: String,
}

/// The runtime block.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeView {
    pub after_cell: usize,
    pub exec_time: Option<String>,
    pub memory: Option<String>,
    pub rows: Vec<VarRow>,
    pub rows_omitted: usize,
}

/// Everything a template is rendered with.
#[derive(Debug, Clone, Serialize)]
pub struct PromptContext {
    pub trajectory: String,
    pub cells: Vec<CellView>,
    pub dropped_steps: usize,
    pub next_number: usize,
    pub target: Option<TargetView>,
    pub runtime: Option<RuntimeView>,
}

/// A context and what its shape cost.
#[derive(Debug, Clone)]
pub struct Built {
    pub context: PromptContext,
    /// Characters removed by shortening.
    pub truncated_chars: usize,
    pub runtime_rows_kept: usize,
}

/// Shorten `text` to about `cap` characters, keeping head (2/3) and tail (1/3).
/// Returns the text and how many characters were cut (0 when it fits).
pub fn cut_middle(text: &str, cap: usize) -> (String, usize) {
    let n = text.chars().count();
    if n <= cap {
        return (text.to_string(), 0);
    }
    let head_n = cap * 2 / 3;
    let tail_n = cap - head_n;
    let cut = n - head_n - tail_n;
    let head: String = text.chars().take(head_n).collect();
    let tail: String = text.chars().skip(n - tail_n).collect();
    (format!("{head}\n...[{cut} characters cut]...\n{tail}"), cut)
}

/// Make a repr one line and at most `max` characters.
pub fn one_line(repr: &str, max: usize) -> String {
    let flat: String = repr.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut s: String = flat.chars().take(max.saturating_sub(3)).collect();
        s.push_str("...");
        s
    }
}

fn size_text(v: &Variable) -> String {
    if let Some(shape) = &v.shape {
        shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x")
    } else if let Some(len) = v.len {
        format!("len {len}")
    } else {
        "-".to_string()
    }
}

fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn human_seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// Runtime rows for the state before step `k` runs (the snapshot after step
/// k-1), ordered by relevance: the variables changed most recently first (the
/// step where each last appeared or changed, later first), ties by name.
pub fn runtime_rows(traj: &Trajectory, k: usize, repr_chars: usize) -> Option<(usize, &RuntimeSnapshot, Vec<VarRow>)> {
    if k == 0 {
        return None;
    }
    let snap = traj.steps[k - 1].runtime.as_ref()?;
    let mut last_change: Vec<(usize, &Variable)> = Vec::new();
    for v in &snap.variables {
        // Walk back while the variable is unchanged.
        let mut since = k - 1;
        while since > 0 {
            let prev =
                traj.steps[since - 1].runtime.as_ref().and_then(|s| s.variables.iter().find(|p| p.name == v.name));
            match prev {
                Some(p) if p.type_name == v.type_name && p.repr == v.repr && p.shape == v.shape && p.len == v.len => {
                    since -= 1
                }
                _ => break,
            }
        }
        last_change.push((since, v));
    }
    last_change.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.name.cmp(&b.1.name)));
    let rows = last_change
        .into_iter()
        .map(|(_, v)| VarRow {
            name: v.name.clone(),
            type_name: v.type_name.clone(),
            size: size_text(v),
            repr: one_line(&v.repr, repr_chars),
        })
        .collect();
    Some((k, snap, rows))
}

/// Inputs that do not change while fitting.
pub struct ContextSource<'a> {
    pub traj: &'a Trajectory,
    /// Index of the target step.
    pub step: usize,
    pub task: Task,
    pub runtime: bool,
    /// Relevance-ordered runtime rows (empty when there is no snapshot).
    pub rows: Vec<VarRow>,
    pub snapshot: Option<&'a RuntimeSnapshot>,
}

impl<'a> ContextSource<'a> {
    pub fn new(traj: &'a Trajectory, step: usize, task: Task, runtime: bool, repr_chars: usize) -> Self {
        let (rows, snapshot) = if runtime {
            match runtime_rows(traj, step, repr_chars) {
                Some((_, snap, rows)) => (rows, Some(snap)),
                None => (Vec::new(), None),
            }
        } else {
            (Vec::new(), None)
        };
        ContextSource { traj, step, task, runtime, rows, snapshot }
    }

    /// History steps available (all steps before the target).
    pub fn history_len(&self) -> usize {
        self.step
    }

    /// Build the context for a shape.
    pub fn build(&self, shape: &Shape) -> Built {
        let history: &[Step] = &self.traj.steps[..self.step];
        let first = shape.first_step.min(history.len());
        let mut truncated = 0usize;
        let mut cells = Vec::with_capacity(history.len() - first);
        for (i, s) in history.iter().enumerate().skip(first) {
            let newest = i + 1 == history.len();
            let out_cap = if newest { shape.newest_output_cap } else { shape.output_cap };
            let (output, out_cut) = match out_cap {
                Some(cap) => cut_middle(&s.output, cap),
                None => (s.output.clone(), 0),
            };
            let (code, code_cut) = match (newest, shape.newest_code_cap) {
                (true, Some(cap)) => cut_middle(&s.code, cap),
                _ => (s.code.clone(), 0),
            };
            truncated += out_cut + code_cut;
            cells.push(CellView {
                number: s.step + 1,
                code,
                output,
                output_kind: s.output_kind.as_str(),
                output_cut: out_cut > 0,
                code_cut: code_cut > 0,
            });
        }
        let target_step = &self.traj.steps[self.step];
        let target = match self.task {
            Task::Output => Some(TargetView { number: target_step.step + 1, code: target_step.code.clone() }),
            Task::NextCell => None,
        };
        let kept_rows = shape.runtime_rows.min(self.rows.len());
        let runtime = if self.runtime && self.step > 0 {
            Some(RuntimeView {
                after_cell: self.traj.steps[self.step - 1].step + 1,
                exec_time: self.snapshot.and_then(|s| s.exec_time_s).map(human_seconds),
                memory: self.snapshot.and_then(|s| s.memory_bytes).map(human_bytes),
                rows: self.rows[..kept_rows].to_vec(),
                rows_omitted: self.rows.len() - kept_rows,
            })
        } else {
            None
        };
        Built {
            context: PromptContext {
                trajectory: self.traj.id.clone(),
                cells,
                dropped_steps: first,
                next_number: target_step.step + 1,
                target,
                runtime,
            },
            truncated_chars: truncated,
            runtime_rows_kept: if self.runtime { kept_rows } else { 0 },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_middle_keeps_head_and_tail() {
        let (s, cut) = cut_middle("abcdefghijklmnopqrstuvwxyz", 9);
        assert_eq!(cut, 17);
        assert_eq!(s, "abcdef\n...[17 characters cut]...\nxyz");
        assert_eq!(cut_middle("short", 9), ("short".to_string(), 0));
        // Characters, not bytes.
        let (s, cut) = cut_middle("ééééé", 3);
        assert_eq!((s.as_str(), cut), ("éé\n...[2 characters cut]...\né", 2));
    }

    #[test]
    fn one_line_flattens_and_shortens() {
        assert_eq!(one_line("a  b\n c", 10), "a b c");
        assert_eq!(one_line("0123456789abc", 8), "01234...");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KB");
        assert_eq!(human_seconds(0.0123), "12 ms");
        assert_eq!(human_seconds(2.5), "2.50 s");
    }
}
