//! themisto: the Themisto notebook benchmark on local open-weight models.
//!
//! The program is one pipeline; each stage is a module and data moves forward only:
//!
//! ```text
//! sources ──> trajectories ──> samples ──> prompts ──> model ──> decoder ──> scores ──> records ──> reports
//! (.ipynb,     Trajectory/     task x        template    GGUF        greedy,     EM,        samples.jsonl  table,
//!  Themisto    Step/Runtime    runtime,      + token     CPU / CUDA  stop        ROUGE-L,   results.json   report.md
//!  rows, JuNE                  protocol      budget                  strings     chrF
//!  log, record)                sampling      fitter
//! ```
//!
//! - [`data`]: trajectory types, source readers, sampling.
//! - [`prompt`]: templates, runtime context, chat formats, the budget fitter.
//! - [`model`]: the model trait, registry, fetching, GGUF models, tokenizer.
//! - [`decode`]: greedy generation with stop strings.
//! - [`metrics`]: exact match, ROUGE-L, chrF, bootstrap intervals.
//! - [`record`]: the notebook recorder (drives a python3 process).
//! - [`run`]: the runner, run folders and their wire formats.
//! - [`sweep`]: context-length sweeps: one configuration at several budgets and models.
//! - [`report`]: tables for people; study reports with plots and paired tests.
//! - [`bench`]: model speed measurements.
//! - [`cli`]: the command line.
//! - [`util`]: hashing helpers.

pub mod bench;
pub mod cli;
pub mod data;
pub mod decode;
pub mod metrics;
pub mod model;
pub mod prompt;
pub mod record;
pub mod report;
pub mod run;
pub mod sweep;
pub mod util;
