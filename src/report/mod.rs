//! Reports for people: the summary table printed after a run and a run's
//! `report.md` ([`table`]), and the study report of `themisto report`
//! ([`write_report`]) over run folders and sweep folders:
//!
//! ```text
//! OUT/report.md        tables (markdown), plots linked
//! OUT/report.html      one standalone page: inline CSS, plots as inline SVG,
//!                      the sample explorer (inline data and script)
//! OUT/plots/<m>.svg    <m> = exact_match, rouge_l, chrf, steps_kept
//! OUT/plots/<m>.png    the same, 1200×460 pixels, drawn with the embedded font
//! ```
//!
//! - [`inputs`]: reading run and sweep folders back, without a model.
//! - [`table`]: tables of group results with intervals.
//! - [`plots`]: metrics and steps kept against the budget (plotters).
//! - [`paired`]: the paired bootstrap test between two runs (defined there).
//! - [`compose`] and [`document`]: the report's content, as markdown and HTML.
//! - [`explorer`]: every sample in the page (prompt, predictions, reference,
//!   diff), and two runs paired sample by sample.

pub mod compose;
pub mod document;
pub mod explorer;
pub mod inputs;
pub mod paired;
pub mod plots;
pub mod table;

use document::Block;
use std::path::{Path, PathBuf};

/// Errors of `themisto report`.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// An input folder that cannot be read as a run or a sweep.
    #[error("{}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("drawing plot {plot}: {message}")]
    Plot { plot: String, message: String },
    #[error("{0}")]
    Config(String),
}

impl ReportError {
    /// 2 for bad input, 1 otherwise (the CLI's convention).
    pub fn exit_code(&self) -> i32 {
        match self {
            ReportError::Input { .. } | ReportError::Config(_) => 2,
            ReportError::Io { .. } | ReportError::Plot { .. } => 1,
        }
    }
}

/// Whether `report.html` holds the sample explorer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Samples {
    /// When the report covers at most [`AUTO_EXPLORER_RUNS`] runs.
    #[default]
    Auto,
    Always,
    Never,
}

/// Reports over at most this many runs hold the sample explorer unless told
/// otherwise (`--samples` / `--no-samples`).
pub const AUTO_EXPLORER_RUNS: usize = 2;

/// Settings of a report.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    /// Seed of the paired bootstrap.
    pub seed: u64,
    /// The sample explorer.
    pub samples: Samples,
    /// Prompt dumps (`themisto prompt --dump`) to show the prompts from,
    /// besides any `prompts.jsonl` in a run folder.
    pub prompts: Vec<PathBuf>,
}

/// What the sample explorer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExplorerSummary {
    pub samples: usize,
    /// Samples shown with the prompt the model saw.
    pub with_prompt: usize,
    /// Whether the page has the paired view.
    pub paired: bool,
}

/// What [`write_report`] wrote and found.
#[derive(Debug, Clone)]
pub struct ReportOutput {
    pub markdown: PathBuf,
    pub html: PathBuf,
    /// SVG and PNG files, in pairs.
    pub plots: Vec<PathBuf>,
    /// Finished runs reported.
    pub runs: usize,
    /// Runs of sweeps left out as unfinished.
    pub unfinished: usize,
    /// The paired comparison, when exactly two runs were given.
    pub comparison: Option<Vec<paired::GroupComparison>>,
    /// The sample explorer, when the page has one.
    pub explorer: Option<ExplorerSummary>,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), ReportError> {
    std::fs::write(path, bytes).map_err(|source| ReportError::Io { path: path.to_path_buf(), source })
}

/// Read run and sweep folders and write the report into `out`.
pub fn write_report(folders: &[PathBuf], out: &Path, opts: &ReportOptions) -> Result<ReportOutput, ReportError> {
    let inputs = inputs::load(folders)?;
    let plots_dir = out.join("plots");
    std::fs::create_dir_all(&plots_dir).map_err(|source| ReportError::Io { path: plots_dir.clone(), source })?;
    let mut rendered = Vec::new();
    let mut files = Vec::new();
    for fig in plots::figures(&inputs.runs) {
        let svg = plots::render_svg(&fig)?;
        let svg_path = plots_dir.join(format!("{}.svg", fig.stem));
        write(&svg_path, svg.as_bytes())?;
        let png_path = plots_dir.join(format!("{}.png", fig.stem));
        plots::render_png(&fig, &png_path)?;
        files.extend([svg_path, png_path]);
        rendered.push(compose::RenderedPlot { stem: fig.stem.clone(), caption: fig.title.clone(), svg });
    }
    let comparison = match inputs.runs.as_slice() {
        [a, b] => Some(paired::compare(&a.records, &b.records, opts.seed)),
        _ => None,
    };
    let names: Vec<String> = folders.iter().map(|f| f.display().to_string()).collect();
    let mut blocks = compose::blocks(&inputs, &names, &rendered, comparison.as_deref(), opts.seed);
    let with_explorer = match opts.samples {
        Samples::Always => true,
        Samples::Never => false,
        Samples::Auto => inputs.runs.len() <= AUTO_EXPLORER_RUNS,
    };
    let mut explorer_summary = None;
    if with_explorer {
        let (block, summary) = explorer_block(&inputs.runs, &opts.prompts)?;
        blocks.push(block);
        explorer_summary = Some(summary);
    } else {
        for p in &opts.prompts {
            if !p.is_file() {
                return Err(ReportError::Io {
                    path: p.clone(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such prompt dump"),
                });
            }
        }
        blocks.push(Block::Para(format!(
            "The sample explorer is left out of reports over more than {AUTO_EXPLORER_RUNS} runs; \
             `themisto report --samples` puts it in."
        )));
    }
    let markdown = out.join("report.md");
    write(&markdown, document::markdown(&blocks).as_bytes())?;
    let html = out.join("report.html");
    write(&html, document::html("themisto report", &blocks).as_bytes())?;
    Ok(ReportOutput {
        markdown,
        html,
        plots: files,
        runs: inputs.runs.len(),
        unfinished: inputs.unfinished.len(),
        comparison,
        explorer: explorer_summary,
    })
}

/// The explorer's block: every sample of `runs`, the paired view when there
/// are two runs to pair (two or more runs, or one with both runtime variants).
fn explorer_block(
    runs: &[inputs::ReportRun],
    prompt_files: &[PathBuf],
) -> Result<(Block, ExplorerSummary), ReportError> {
    let eruns: Vec<explorer::ExplorerRun<'_>> = runs.iter().map(explorer::ExplorerRun::of).collect();
    let prompts = explorer::run_prompts(&eruns, prompt_files)?;
    let samples: usize = runs.iter().map(|r| r.records.len()).sum();
    let with_prompt: usize =
        runs.iter().zip(&prompts).map(|(r, p)| r.records.iter().filter(|rec| p.find(rec).is_ok()).count()).sum();
    let both_variants =
        |r: &inputs::ReportRun| r.records.iter().any(|x| x.runtime) && r.records.iter().any(|x| !x.runtime);
    let paired = runs.len() >= 2 || runs.iter().any(both_variants);
    let html = explorer::html(&explorer::data_json(&eruns, &prompts), paired);
    let note = format!(
        "The sample explorer ({samples} samples, {with_prompt} with the prompt the model saw{}) is in `report.html`.",
        if paired { "; and the paired view of two runs" } else { "" }
    );
    Ok((Block::Explorer { html, note }, ExplorerSummary { samples, with_prompt, paired }))
}
