//! The content of a multi-run report, as [`Block`]s: the runs, one results
//! table per task (rows: model × runtime × budget, with intervals), the
//! plots, and for exactly two runs the paired comparison.

use super::document::Block;
use super::inputs::{Inputs, ReportRun};
use super::paired::{GroupComparison, PairedDiff};
use super::table::{ci, Table};
use crate::data::samples::Task;
use crate::metrics::bootstrap::RESAMPLES;

/// A rendered plot: stem, caption and SVG.
pub struct RenderedPlot {
    pub stem: String,
    pub caption: String,
    pub svg: String,
}

/// `label · ctx N` (or `label` without a known budget).
pub fn run_name(r: &ReportRun) -> String {
    match r.context_tokens {
        Some(b) => format!("{} · ctx {b}", r.label),
        None => r.label.clone(),
    }
}

fn on_off(runtime: bool) -> &'static str {
    if runtime {
        "on"
    } else {
        "off"
    }
}

/// Every block of the report.
pub fn blocks(
    inputs: &Inputs,
    folders: &[String],
    plots: &[RenderedPlot],
    comparison: Option<&[GroupComparison]>,
    seed: u64,
) -> Vec<Block> {
    let mut b = vec![
        Block::Heading(1, "themisto report".into()),
        Block::Para(format!(
            "Made {} by themisto {} from {}.",
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            env!("CARGO_PKG_VERSION"),
            folders.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
        )),
        Block::Para(format!(
            "Scores are means over the scored samples of a group with 95% percentile bootstrap intervals ({RESAMPLES} resamples): \
             exact match and ROUGE-L on 0–1, chrF on 0–100. n counts scored samples; skipped ones (e.g. a prompt over the budget) \
             are not scored. Steps kept is the mean number of earlier trajectory steps that fit in the prompt."
        )),
        Block::Heading(2, "Runs".into()),
        Block::Table(runs_table(&inputs.runs)),
    ];
    if !inputs.unfinished.is_empty() {
        b.push(Block::Para(
            "Runs of a sweep that are not finished (left out; run the sweep again to finish them):".into(),
        ));
        b.push(Block::List(
            inputs
                .unfinished
                .iter()
                .map(|u| {
                    format!(
                        "{} · ctx {}: {} (`{}`)",
                        u.model_id,
                        u.context_tokens,
                        u.status.as_str(),
                        u.folder.display()
                    )
                })
                .collect(),
        ));
    }
    let mut tasks: Vec<Task> = inputs.runs.iter().flat_map(|r| r.results.groups.iter().map(|g| g.task)).collect();
    tasks.sort();
    tasks.dedup();
    for task in tasks {
        b.push(Block::Heading(2, format!("Results: {task}")));
        b.push(Block::Table(results_table(&inputs.runs, task)));
    }
    if inputs.runs.iter().any(|r| !r.results.runtime_effect.is_empty()) {
        b.push(Block::Heading(2, "Runtime effect".into()));
        b.push(Block::Para(format!(
            "Per run and task, runtime on minus runtime off over the steps scored in both variants. Δ is the mean difference \
             with its 95% paired bootstrap interval ({RESAMPLES} resamples, the run's seed) and two-sided paired bootstrap p; \
             better / worse / equal count the pairs; detectable Δ is the smallest mean difference found with 80% power at \
             α = 0.05 for the observed spread of the differences and the number of pairs ((1.96 + 0.84) · sd / √n)."
        )));
        for r in inputs.runs.iter().filter(|r| !r.results.runtime_effect.is_empty()) {
            b.push(Block::Para(format!("Run {}:", run_name(r))));
            b.push(Block::Table(super::table::runtime_effect_table(&r.results.runtime_effect)));
        }
    }
    if !plots.is_empty() {
        b.push(Block::Heading(2, "Plots".into()));
        b.push(Block::Para(
            "One line per model × runtime variant (solid: with runtime information, dashed: without); shading: 95% interval.".into(),
        ));
        for p in plots {
            b.push(Block::Plot { stem: p.stem.clone(), caption: p.caption.clone(), svg: p.svg.clone() });
        }
    }
    if let (Some(cmp), [a, bb]) = (comparison, inputs.runs.as_slice()) {
        b.push(Block::Heading(2, "Paired comparison".into()));
        b.push(Block::Para(format!(
            "B = {} minus A = {}, per group, on the per-sample scores of the samples scored in both runs (matched by sample id). \
             Δ is the mean difference with its 95% paired bootstrap interval ({RESAMPLES} resamples, seed {seed}); \
             p is two-sided: (1 + #{{resamples with |mean − Δ| ≥ |Δ|}}) / ({RESAMPLES} + 1), so its smallest value is {:.4}.",
            run_name(bb),
            run_name(a),
            1.0 / (RESAMPLES as f64 + 1.0)
        )));
        b.push(Block::Table(comparison_table(cmp)));
    }
    b
}

fn runs_table(runs: &[ReportRun]) -> Table {
    let mut t = Table::new(&[
        "run",
        "model",
        ">context tokens",
        ">max new tokens",
        "data",
        ">scored",
        ">skipped",
        ">wall s",
        "folder",
    ]);
    for r in runs {
        let max_new = r.results.config.run().map(|c| c.prompt.max_new_tokens);
        let n: usize = r.results.groups.iter().map(|g| g.n).sum();
        let skipped: usize = r.results.groups.iter().map(|g| g.skipped).sum();
        t.rows.push(vec![
            run_name(r),
            r.model_id.clone(),
            r.context_tokens.map(|c| c.to_string()).unwrap_or_else(|| "—".into()),
            max_new.map(|c| c.to_string()).unwrap_or_else(|| "—".into()),
            r.results.dataset.as_ref().map(|d| d.name.clone()).unwrap_or_else(|| "—".into()),
            n.to_string(),
            skipped.to_string(),
            r.results.throughput.as_ref().map(|t| format!("{:.1}", t.wall_s)).unwrap_or_else(|| "—".into()),
            format!("`{}`", r.folder.display()),
        ]);
    }
    t
}

fn results_table(runs: &[ReportRun], task: Task) -> Table {
    let mut t = Table::new(&[
        "model",
        "runtime",
        ">context tokens",
        ">n",
        ">skipped",
        "exact match",
        "ROUGE-L",
        "chrF",
        ">chrF (corpus)",
        ">mean steps kept",
        ">mean prompt tokens",
    ]);
    let mut rows: Vec<(&str, bool, Option<usize>, Vec<String>)> = Vec::new();
    for r in runs {
        for g in r.results.groups.iter().filter(|g| g.task == task) {
            let m = &g.metrics;
            rows.push((
                r.label.as_str(),
                g.runtime,
                r.context_tokens,
                vec![
                    r.label.clone(),
                    on_off(g.runtime).into(),
                    r.context_tokens.map(|c| c.to_string()).unwrap_or_else(|| "—".into()),
                    g.n.to_string(),
                    g.skipped.to_string(),
                    ci(&m.exact_match, 1.0, 3),
                    ci(&m.rouge_l, 1.0, 3),
                    ci(&m.chrf, 1.0, 2),
                    format!("{:.2}", m.chrf_corpus),
                    format!("{:.2}", g.mean_steps_kept),
                    format!("{:.0}", g.mean_prompt_tokens),
                ],
            ));
        }
    }
    rows.sort_by(|a, b| (a.0, a.1, a.2).cmp(&(b.0, b.1, b.2)));
    t.rows = rows.into_iter().map(|r| r.3).collect();
    t
}

fn diff(d: &PairedDiff, digits: usize) -> [String; 2] {
    [format!("{:+.d$} [{:+.d$}, {:+.d$}]", d.mean_diff, d.ci_low, d.ci_high, d = digits), format!("{:.4}", d.p_value)]
}

fn comparison_table(cmp: &[GroupComparison]) -> Table {
    let mut t = Table::new(&[
        "task",
        "runtime",
        ">paired",
        ">only A",
        ">only B",
        "Δ exact match",
        ">p",
        "Δ ROUGE-L",
        ">p",
        "Δ chrF",
        ">p",
    ]);
    for g in cmp {
        let mut row = vec![
            g.task.to_string(),
            on_off(g.runtime).into(),
            g.n_paired.to_string(),
            g.only_a.to_string(),
            g.only_b.to_string(),
        ];
        row.extend(diff(&g.exact_match, 3));
        row.extend(diff(&g.rouge_l, 3));
        row.extend(diff(&g.chrf, 2));
        t.rows.push(row);
    }
    t
}
