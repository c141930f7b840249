//! Markdown tables of group results, with 95% bootstrap intervals.

use crate::run::record::{GroupResult, ResultsFile};
use crate::metrics::MetricValue;
use std::fmt::Write;

fn ci(v: &MetricValue, scale: f64, digits: usize) -> String {
    format!(
        "{:.d$} [{:.d$}, {:.d$}]",
        v.value * scale,
        v.ci_low * scale,
        v.ci_high * scale,
        d = digits
    )
}

/// The summary table: one row per task × runtime group.
pub fn groups_table(groups: &[GroupResult]) -> String {
    let mut s = String::new();
    s.push_str("| task | runtime | n | skipped | exact match | EM (ws-insensitive) | ROUGE-L | ROUGE-L (code) | chrF | chrF (corpus) |\n");
    s.push_str("|---|---|---:|---:|---|---|---|---|---|---:|\n");
    for g in groups {
        let m = &g.metrics;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.2} |",
            g.task,
            if g.runtime { "on" } else { "off" },
            g.n,
            g.skipped,
            ci(&m.exact_match, 1.0, 3),
            ci(&m.exact_match_ws, 1.0, 3),
            ci(&m.rouge_l, 1.0, 3),
            ci(&m.rouge_l_code, 1.0, 3),
            ci(&m.chrf, 1.0, 2),
            m.chrf_corpus,
        );
    }
    s
}

/// Prompt statistics per group.
pub fn context_table(groups: &[GroupResult]) -> String {
    let mut s = String::new();
    s.push_str("| task | runtime | mean prompt tokens | mean steps kept | mean steps dropped | finish reasons |\n");
    s.push_str("|---|---|---:|---:|---:|---|\n");
    for g in groups {
        let reasons: Vec<String> = g.finish_reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {} |",
            g.task,
            if g.runtime { "on" } else { "off" },
            g.mean_prompt_tokens,
            g.mean_steps_kept,
            g.mean_dropped_steps,
            reasons.join(", ")
        );
    }
    s
}

/// `report.md` of one run.
pub fn report_markdown(r: &ResultsFile) -> String {
    let mut s = String::new();
    s.push_str("# themisto run report\n\n");
    if let Some(m) = &r.model {
        let _ = writeln!(s, "- model: `{}` ({}, {}, sha256 `{}`)", m.id, m.architecture, m.quantization, m.sha256);
    }
    if let Some(d) = &r.dataset {
        let _ = writeln!(s, "- data: `{}` ({} trajectories, {} steps, sha256 `{}`)", d.name, d.trajectories, d.steps, &d.sha256[..16.min(d.sha256.len())]);
    }
    if let Some(p) = r.config.get("prompt") {
        let _ = writeln!(
            s,
            "- budget: {} context tokens, {} new tokens",
            p.get("context_tokens").and_then(|v| v.as_u64()).unwrap_or(0),
            p.get("max_new_tokens").and_then(|v| v.as_u64()).unwrap_or(0)
        );
    }
    let _ = writeln!(s, "- created: {} (themisto {}, git {})", r.created, r.environment.themisto_version, r.environment.git_revision);
    s.push_str("\nScores are means over samples with 95% bootstrap intervals; exact match and ROUGE-L on 0–1, chrF on 0–100.\n\n");
    s.push_str(&groups_table(&r.groups));
    s.push('\n');
    s.push_str(&context_table(&r.groups));
    if let Some(t) = &r.throughput {
        let _ = writeln!(
            s,
            "\nThroughput: {} prompt tokens ({} computed) at {:.1} tokens/s, {} generated at {:.1} tokens/s, wall {:.1} s.",
            t.prompt_tokens, t.prompt_tokens_computed, t.prompt_tokens_per_s, t.generated_tokens, t.gen_tokens_per_s, t.wall_s
        );
    }
    if !r.metric_signatures.is_empty() {
        s.push_str("\nMetric signatures:\n\n");
        for (k, v) in &r.metric_signatures {
            let _ = writeln!(s, "- {k}: `{v}`");
        }
    }
    s
}
