//! themisto: the Themisto notebook benchmark on local open-weight models.
//!
//! The program is one pipeline; each stage is a module and data moves forward only:
//!
//! ```text
//! sources ──> trajectories ──> samples ──> prompts ──> model ──> decoder ──> scores ──> records ──> reports
//! (.ipynb,     Trajectory/     task x        template    GGUF or     greedy,     EM,        samples.jsonl  table,
//!  Themisto    Step/Runtime    runtime,      + token     safetensors stop        ROUGE-L,   results.json   report.md,
//!  rows, JuNE                  protocol      budget      CPU / CUDA  strings     chrF       sweep.json     plots
//!  log, record)                sampling      fitter
//! ```
//!
//! The modules, in pipeline order. A module may import only the modules
//! listed before it (`util` is a leaf anyone may use); the test
//! `architecture::imports_only_go_forward` checks it.
//!
//! 1. [`util`]: hashing, atomic files, the common prefix of token lists (leaf).
//! 2. [`data`]: trajectory types, source readers, sample ids, the protocol.
//! 3. [`recorder`]: the notebook recorder (drives a python3 process; a source).
//! 4. [`tokenizer`]: the model's tokenizer, from `tokenizer.json` or GGUF metadata.
//! 5. [`prompt`]: templates, runtime context, chat formats, the budget fitter.
//! 6. [`model`]: the model seam, the opener, registry, fetching, engines.
//! 7. [`decode`]: greedy generation with stop strings.
//! 8. [`mod@bench`]: model speed measurements (model + decoder only).
//! 9. [`metrics`]: exact match, ROUGE-L, chrF, bootstrap intervals, answer kinds.
//! 10. [`config`]: the validated run, sweep and score configurations.
//! 11. [`records`]: the wire formats (samples, results, sweep index), aggregation.
//! 12. [`run`]: the runner: samples → prompts → model → decoder → scores → records.
//! 13. [`sweep`]: one configuration at several budgets and models.
//! 14. [`merge`]: joining the shards of a run or a sweep.
//! 15. [`report`]: tables and reports for people, from records only.
//! 16. [`cli`]: the command line: arguments → configurations → stages.

pub mod bench;
pub mod cli;
pub mod config;
pub mod data;
pub mod decode;
pub mod merge;
pub mod metrics;
pub mod model;
pub mod prompt;
pub mod recorder;
pub mod records;
pub mod report;
pub mod run;
pub mod sweep;
pub mod tokenizer;
pub mod util;

/// The top-level modules in pipeline order: each may import only those
/// before it (and `util`).
pub const MODULE_ORDER: [&str; 16] = [
    "util",
    "data",
    "recorder",
    "tokenizer",
    "prompt",
    "model",
    "decode",
    "bench",
    "metrics",
    "config",
    "records",
    "run",
    "sweep",
    "merge",
    "report",
    "cli",
];
