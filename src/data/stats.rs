//! Dataset statistics for `data stats` and `data convert`.
//!
//! Owns the summary of a [`Dataset`]: trajectories, steps, steps with runtime,
//! outputs by kind, code and output lengths (chars; mean and median, the
//! median being the mean of the two middle values for an even count), and the
//! notebook facts: skipped cells (from the load report, so only when read from
//! notebooks) and non-linear notebooks (from the report, or recomputed from
//! the `execution_count` / `cell_index` that notebook steps keep in `extra`);
//! and which tasks the data supports (a trajectory whose outputs were logged
//! without their text gives next-cell samples only).

use super::loader::LoadReport;
use super::{Dataset, OutputKind};
use std::fmt;

/// Mean and median of a length distribution.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Lengths {
    pub mean: f64,
    pub median: f64,
}

impl Lengths {
    pub fn of(mut values: Vec<usize>) -> Lengths {
        if values.is_empty() {
            return Lengths::default();
        }
        values.sort_unstable();
        let n = values.len();
        let mean = values.iter().sum::<usize>() as f64 / n as f64;
        let median = if n % 2 == 1 { values[n / 2] as f64 } else { (values[n / 2 - 1] + values[n / 2]) as f64 / 2.0 };
        Lengths { mean, median }
    }
}

/// The summary `data stats` prints.
#[derive(Debug, Clone, PartialEq)]
pub struct DatasetStats {
    pub trajectories: usize,
    pub steps: usize,
    pub steps_with_runtime: usize,
    /// In the order stream, execute_result, error, display, none.
    pub outputs_by_kind: Vec<(OutputKind, usize)>,
    pub notebooks: Option<usize>,
    /// Only known when read from notebooks.
    pub skipped_cells: Option<usize>,
    pub non_linear_notebooks: Option<usize>,
    pub code: Lengths,
    pub output: Lengths,
    /// Steps whose output the source logged without its text (JuNE).
    pub steps_output_unknown: usize,
    /// Trajectories with at least one step whose output is known: the ones
    /// that give output-task samples. Every trajectory gives next-cell ones.
    pub trajectories_with_output: usize,
}

impl DatasetStats {
    /// One line saying which tasks the data supports.
    pub fn supported_tasks(&self) -> String {
        let next = format!("next_cell on all {} trajectories", self.trajectories);
        if self.steps_output_unknown == 0 {
            return format!("{next}; output on all {} trajectories", self.trajectories);
        }
        if self.trajectories_with_output == 0 {
            return format!(
                "{next}; output on none (no output text in the data; `themisto record --replay LOG --workdir DIR` re-executes the log to record outputs and runtime state)"
            );
        }
        format!(
            "{next}; output on {} of {} trajectories (outputs without text are no output targets)",
            self.trajectories_with_output, self.trajectories
        )
    }
}

const KINDS: [OutputKind; 5] =
    [OutputKind::Stream, OutputKind::ExecuteResult, OutputKind::Error, OutputKind::Display, OutputKind::None];

/// Summarise a dataset; `report` adds what only the source knew.
pub fn compute(dataset: &Dataset, report: Option<&LoadReport>) -> DatasetStats {
    let steps = dataset.trajectories.iter().flat_map(|t| t.steps.iter());
    let outputs_by_kind = KINDS.iter().map(|k| (*k, steps.clone().filter(|s| s.output_kind == *k).count())).collect();
    let from_report = report.filter(|r| r.notebooks() > 0);
    let (notebooks, skipped_cells, non_linear) = match from_report {
        Some(r) => (Some(r.notebooks()), Some(r.skipped_cells()), Some(r.non_linear_notebooks())),
        None => {
            let flags: Vec<bool> = dataset.trajectories.iter().filter_map(non_linear_from_extra).collect();
            if flags.is_empty() {
                (None, None, None)
            } else {
                (Some(flags.len()), None, Some(flags.iter().filter(|f| **f).count()))
            }
        }
    };
    DatasetStats {
        trajectories: dataset.trajectories.len(),
        steps: dataset.step_count(),
        steps_with_runtime: steps.clone().filter(|s| s.runtime.is_some()).count(),
        outputs_by_kind,
        notebooks,
        skipped_cells,
        non_linear_notebooks: non_linear,
        steps_output_unknown: steps.clone().filter(|s| !s.output_known()).count(),
        trajectories_with_output: dataset
            .trajectories
            .iter()
            .filter(|t| t.steps.iter().any(|s| s.output_known() && !s.output.trim().is_empty()))
            .count(),
        code: Lengths::of(steps.clone().map(|s| s.code.chars().count()).collect()),
        output: Lengths::of(steps.map(|s| s.output.chars().count()).collect()),
    }
}

/// For a trajectory read from a notebook (every step has `execution_count`
/// and `cell_index` in `extra`): whether it ran non-linearly.
fn non_linear_from_extra(t: &super::Trajectory) -> Option<bool> {
    if t.steps.is_empty() {
        return None;
    }
    let mut pairs = Vec::with_capacity(t.steps.len());
    for s in &t.steps {
        let count = s.extra.get("execution_count")?.as_u64()?;
        let cell = s.extra.get("cell_index")?.as_u64()?;
        pairs.push((count, cell));
    }
    let out_of_order = pairs.windows(2).any(|w| w[1].1 < w[0].1);
    let irregular = pairs.windows(2).any(|w| w[1].0 != w[0].0 + 1);
    Some(out_of_order || irregular)
}

impl fmt::Display for DatasetStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let opt = |v: Option<usize>| v.map_or_else(|| "n/a".to_string(), |n| n.to_string());
        writeln!(f, "trajectories         {}", self.trajectories)?;
        writeln!(f, "steps                {}", self.steps)?;
        writeln!(f, "steps with runtime   {}", self.steps_with_runtime)?;
        writeln!(f, "outputs by kind")?;
        for (kind, n) in &self.outputs_by_kind {
            writeln!(f, "  {:<18} {n}", kind.as_str())?;
        }
        writeln!(f, "notebooks            {}", opt(self.notebooks))?;
        writeln!(f, "skipped cells        {}", opt(self.skipped_cells))?;
        writeln!(f, "non-linear notebooks {}", opt(self.non_linear_notebooks))?;
        writeln!(f, "outputs without text {}", self.steps_output_unknown)?;
        writeln!(f, "tasks supported      {}", self.supported_tasks())?;
        writeln!(f, "code length (chars)   mean {:.1}  median {:.1}", self.code.mean, self.code.median)?;
        write!(f, "output length (chars) mean {:.1}  median {:.1}", self.output.mean, self.output.median)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_count_is_mid_mean() {
        assert_eq!(Lengths::of(vec![4, 1, 3, 2]), Lengths { mean: 2.5, median: 2.5 });
        assert_eq!(Lengths::of(vec![10, 0, 2]), Lengths { mean: 4.0, median: 2.0 });
        assert_eq!(Lengths::of(vec![]), Lengths::default());
    }
}
