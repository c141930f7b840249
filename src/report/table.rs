//! Markdown tables of group results, with 95% bootstrap intervals, and the
//! [`Table`] that the multi-run report renders as markdown and HTML.

use crate::metrics::MetricValue;
use crate::records::runtime_effect::EffectMetric;
use crate::records::{GroupResult, ResultsFile, RuntimeEffect, SweepIndex};
use std::fmt::Write;

/// A table: header, which columns are numbers (right-aligned), and rows of
/// cells as text.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub header: Vec<String>,
    pub right: Vec<bool>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names; a name starting with `>` is a
    /// right-aligned (number) column, the `>` dropped.
    pub fn new(columns: &[&str]) -> Self {
        Table {
            header: columns.iter().map(|c| c.trim_start_matches('>').to_string()).collect(),
            right: columns.iter().map(|c| c.starts_with('>')).collect(),
            rows: Vec::new(),
        }
    }

    /// The table in GitHub markdown (`|` in cells escaped).
    pub fn markdown(&self) -> String {
        let cell = |c: &str| c.replace('|', "\\|");
        let mut s = String::new();
        let _ = writeln!(s, "| {} |", self.header.iter().map(|h| cell(h)).collect::<Vec<_>>().join(" | "));
        let rule: Vec<&str> = (0..self.header.len())
            .map(|i| if self.right.get(i).copied().unwrap_or(false) { "---:" } else { "---" })
            .collect();
        let _ = writeln!(s, "|{}|", rule.join("|"));
        for row in &self.rows {
            let _ = writeln!(s, "| {} |", row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
        }
        s
    }
}

/// A value with its interval: `0.250 [0.100, 0.400]`.
pub fn ci(v: &MetricValue, scale: f64, digits: usize) -> String {
    format!("{:.d$} [{:.d$}, {:.d$}]", v.value * scale, v.ci_low * scale, v.ci_high * scale, d = digits)
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

/// The runtime effect (on − off) per task and metric: pairs, mean
/// difference with its 95% paired bootstrap interval, p-value, pairs that
/// got better / worse / stayed equal, and the smallest difference detectable
/// with 80% power at α = 0.05.
pub fn runtime_effect_table(effects: &[RuntimeEffect]) -> Table {
    let mut t = Table::new(&[
        "task",
        "metric",
        ">pairs",
        "Δ on − off [95% CI]",
        ">p",
        ">better",
        ">worse",
        ">equal",
        ">detectable Δ",
    ]);
    for e in effects {
        let rows: [(&str, &EffectMetric, usize); 3] =
            [("exact match", &e.exact_match, 3), ("ROUGE-L", &e.rouge_l, 3), ("chrF", &e.chrf, 2)];
        for (name, m, digits) in rows {
            let d = &m.diff;
            t.rows.push(vec![
                e.task.to_string(),
                name.to_string(),
                e.n_pairs.to_string(),
                format!("{:+.p$} [{:+.p$}, {:+.p$}]", d.mean_diff, d.ci_low, d.ci_high, p = digits),
                format!("{:.3}", d.p_value),
                m.better.to_string(),
                m.worse.to_string(),
                m.equal.to_string(),
                m.min_detectable_diff.map_or("–".into(), |v| format!("{v:.p$}", p = digits)),
            ]);
        }
    }
    t
}

/// The runtime-effect table as printed after a run, with one line saying
/// what it is; empty when the run has no pairs of runtime variants.
pub fn runtime_effect_text(effects: &[RuntimeEffect]) -> String {
    if effects.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nRuntime effect (runtime on minus off, steps scored in both; paired bootstrap interval and p-value; \
         detectable Δ: 80% power, α = 0.05):\n\n",
    );
    s.push_str(&runtime_effect_table(effects).markdown());
    s
}

/// Prompt statistics per group.
pub fn context_table(groups: &[GroupResult]) -> String {
    let mut s = String::new();
    s.push_str(
        "| task | runtime | mean prompt tokens | mean steps kept | mean steps dropped | finish reasons | answers |\n",
    );
    s.push_str("|---|---|---:|---:|---:|---|---|\n");
    for g in groups {
        let reasons: Vec<String> = g.finish_reasons.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let kinds: Vec<String> = g.answer_kinds.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {} | {} |",
            g.task,
            if g.runtime { "on" } else { "off" },
            g.mean_prompt_tokens,
            g.mean_steps_kept,
            g.mean_dropped_steps,
            reasons.join(", "),
            kinds.join(", ")
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
        let e = &r.environment;
        let _ = writeln!(
            s,
            "- ran on: {} with the {} engine (weights {}), {} threads, batch {}",
            m.device, m.engine, m.weights, e.threads, e.batch
        );
    }
    if let Some(d) = &r.dataset {
        let _ = writeln!(
            s,
            "- data: `{}` ({} trajectories, {} steps, sha256 `{}`)",
            d.name,
            d.trajectories,
            d.steps,
            &d.sha256[..16.min(d.sha256.len())]
        );
    }
    if let Some(c) = r.config.run() {
        let _ =
            writeln!(s, "- budget: {} context tokens, {} new tokens", c.prompt.context_tokens, c.prompt.max_new_tokens);
    }
    let _ = writeln!(
        s,
        "- created: {} (themisto {}, git {})",
        r.created, r.environment.themisto_version, r.environment.git_revision
    );
    s.push_str("\nScores are means over samples with 95% bootstrap intervals; exact match and ROUGE-L on 0–1, chrF on 0–100.\n\n");
    s.push_str(&groups_table(&r.groups));
    s.push_str(&runtime_effect_text(&r.runtime_effect));
    s.push('\n');
    s.push_str(&context_table(&r.groups));
    if let Some(t) = &r.throughput {
        let _ = writeln!(
            s,
            "\nThroughput: {} prompt tokens ({} computed, {:.0}% reused from the cache) at {:.1} tokens/s, {} generated at {:.1} tokens/s, wall {:.1} s.",
            t.prompt_tokens,
            t.prompt_tokens_computed,
            100.0 * t.reuse_share,
            t.prompt_tokens_per_s,
            t.generated_tokens,
            t.gen_tokens_per_s,
            t.wall_s
        );
        if t.draft_tokens > 0 {
            let _ = writeln!(
                s,
                "Prompt lookup decoding: {} of {} draft tokens confirmed ({:.0}%).",
                t.accepted_draft_tokens,
                t.draft_tokens,
                100.0 * t.accepted_draft_tokens as f64 / t.draft_tokens as f64
            );
        }
    }
    if !r.metric_signatures.is_empty() {
        s.push_str("\nMetric signatures:\n\n");
        for (k, v) in &r.metric_signatures {
            let _ = writeln!(s, "- {k}: `{v}`");
        }
    }
    s
}

/// The summary of a sweep printed after it: one row per run and group.
pub fn sweep_table(index: &SweepIndex) -> String {
    let mut t = Table::new(&[
        "model",
        ">context tokens",
        "status",
        "task",
        "runtime",
        ">n",
        "exact match",
        "ROUGE-L",
        "chrF",
        ">mean steps kept",
    ]);
    for r in &index.runs {
        let head = vec![r.model_id.clone(), r.context_tokens.to_string(), r.status.as_str().to_string()];
        if r.groups.is_empty() {
            let mut row = head.clone();
            row.extend(std::iter::repeat_n(String::new(), 7));
            t.rows.push(row);
        }
        for g in &r.groups {
            let mut row = head.clone();
            row.extend([
                g.task.to_string(),
                if g.runtime { "on" } else { "off" }.to_string(),
                g.n.to_string(),
                ci(&g.exact_match, 1.0, 3),
                ci(&g.rouge_l, 1.0, 3),
                ci(&g.chrf, 1.0, 2),
                format!("{:.1}", g.mean_steps_kept),
            ]);
            t.rows.push(row);
        }
    }
    t.markdown()
}
