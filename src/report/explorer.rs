//! The sample explorer of `report.html`: every sample of the reported runs as
//! JSON embedded in the page (`<script type="application/json"
//! id="explorer-data">`), with the prompts the model saw where they were
//! recorded, and the page's own vanilla JavaScript and CSS
//! (`explorer.js`, `diff.js`, `explorer.css`, inlined) that list, filter,
//! sort and open samples, diff a prediction against its reference
//! character by character, and pair two runs sample by sample.
//!
//! A record's own `prompt_text` (written unless the run had
//! `--no-log-prompts`) is the prompt shown. Otherwise prompts come from
//! `themisto prompt ... --dump FILE.jsonl` files (given with `--prompts`, or
//! a `prompts.jsonl` inside a run folder), matched by sample id; a prompt is
//! shown only when its fit agrees with the record's (same prompt tokens,
//! dropped steps, steps kept, characters cut and template), so a dump made
//! at another budget is never passed off as what the model saw.
//!
//! The data is compact: samples are arrays in the order of [`FIELDS`], and
//! long texts (predictions, references, prompts) are indexes into one table
//! of distinct strings, so a reference shared by several runs is stored once.

use super::compose::run_name;
use super::inputs::ReportRun;
use super::ReportError;
use crate::records::SampleRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

/// The page's script (table, filters, sample view, paired view).
pub const SCRIPT: &str = include_str!("explorer.js");
/// The character and line diff used by [`SCRIPT`] (Myers' O(ND) algorithm).
pub const DIFF_SCRIPT: &str = include_str!("diff.js");
/// The explorer's styles.
pub const CSS: &str = include_str!("explorer.css");

/// The name of a prompt dump inside a run folder that is picked up by itself.
pub const RUN_PROMPTS: &str = "prompts.jsonl";

/// The columns of a sample in the embedded data, in order. `prediction`,
/// `raw_prediction`, `reference` and `prompt` are indexes into `strings`
/// (`prompt` is null when no matching prompt was recorded; `prompt_note`
/// then says why).
pub const FIELDS: &[&str] = &[
    "run",
    "id",
    "dataset",
    "trajectory",
    "step",
    "task",
    "runtime",
    "template",
    "prompt_tokens",
    "dropped_steps",
    "steps_kept",
    "truncated_chars",
    "runtime_rows_kept",
    "reused_prompt_tokens",
    "generated_tokens",
    "finish_reason",
    "answer_kind",
    "skipped",
    "skip_detail",
    "exact_match",
    "exact_match_ws",
    "rouge_l",
    "rouge_l_code",
    "chrf",
    "prediction",
    "raw_prediction",
    "reference",
    "prompt",
    "prompt_note",
];

/// One line of a prompt dump (`themisto prompt --dump`), the fields the
/// explorer uses.
#[derive(Debug, Clone, Deserialize)]
pub struct PromptLine {
    pub id: String,
    #[serde(default)]
    pub template: String,
    #[serde(default)]
    pub prompt: String,
    #[serde(default)]
    pub prompt_tokens: usize,
    #[serde(default)]
    pub dropped_steps: usize,
    #[serde(default)]
    pub steps_kept: usize,
    #[serde(default)]
    pub truncated_chars: usize,
    #[serde(default)]
    pub skipped: Option<Value>,
}

/// Prompts by sample id, each with the file it came from.
#[derive(Debug, Clone, Default)]
pub struct Prompts {
    by_id: HashMap<String, Vec<(PromptLine, PathBuf)>>,
}

impl Prompts {
    /// Read prompt dumps (JSONL, one [`PromptLine`] per line).
    pub fn read(files: &[PathBuf]) -> Result<Prompts, ReportError> {
        let mut p = Prompts::default();
        for f in files {
            p.add_file(f)?;
        }
        Ok(p)
    }

    /// Add the lines of one dump.
    pub fn add_file(&mut self, path: &Path) -> Result<(), ReportError> {
        let io = |source| ReportError::Io { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(io)?;
        for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(io)?;
            if line.trim().is_empty() {
                continue;
            }
            let p: PromptLine = serde_json::from_str(&line).map_err(|e| ReportError::Input {
                path: path.to_path_buf(),
                message: format!("line {}: not a prompt record of `themisto prompt --dump`: {e}", i + 1),
            })?;
            self.by_id.entry(p.id.clone()).or_default().push((p, path.to_path_buf()));
        }
        Ok(())
    }

    /// Prompts read.
    pub fn len(&self) -> usize {
        self.by_id.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The prompt the model saw for `rec`, or why none is shown.
    pub fn find<'a>(&'a self, rec: &'a SampleRecord) -> Result<&'a str, String> {
        if let Some(reason) = rec.skipped {
            return Err(format!("skipped ({}): the model was not run on this sample", reason.as_str()));
        }
        if let Some(text) = &rec.prompt_text {
            return Ok(text);
        }
        let Some(found) = self.by_id.get(&rec.id) else {
            return Err(
                "prompt not recorded; run `themisto prompt` with the run's options and `--dump FILE.jsonl`, \
                 then give `--prompts FILE.jsonl` to `themisto report` (or save it as prompts.jsonl in the run folder)"
                    .into(),
            );
        };
        let fits = |p: &PromptLine| {
            p.skipped.is_none()
                && p.prompt_tokens == rec.prompt_tokens
                && p.dropped_steps == rec.dropped_steps
                && p.steps_kept == rec.steps_kept
                && p.truncated_chars == rec.truncated_chars
                && (p.template.is_empty() || rec.template.is_empty() || p.template == rec.template)
        };
        match found.iter().find(|(p, _)| fits(p)) {
            Some((p, _)) => Ok(&p.prompt),
            None => {
                let (p, file) = &found[0];
                Err(format!(
                    "the prompt of this id in {} was fitted differently ({} tokens, {} steps kept, {} dropped, {} characters cut, \
                     template {}; the run: {} tokens, {} kept, {} dropped, {} cut, template {}), so it is not what the model saw; \
                     dump the prompts with the run's own options",
                    file.display(),
                    p.prompt_tokens,
                    p.steps_kept,
                    p.dropped_steps,
                    p.truncated_chars,
                    p.template,
                    rec.prompt_tokens,
                    rec.steps_kept,
                    rec.dropped_steps,
                    rec.truncated_chars,
                    rec.template
                ))
            }
        }
    }
}

/// A run as the explorer shows it.
#[derive(Debug, Clone)]
pub struct ExplorerRun<'a> {
    pub name: String,
    pub model: String,
    pub context_tokens: Option<usize>,
    pub folder: PathBuf,
    pub records: &'a [SampleRecord],
}

impl<'a> ExplorerRun<'a> {
    pub fn of(run: &'a ReportRun) -> Self {
        ExplorerRun {
            name: run_name(run),
            model: run.model_id.clone(),
            context_tokens: run.context_tokens,
            folder: run.folder.clone(),
            records: &run.records,
        }
    }
}

/// A run in the embedded data.
#[derive(Debug, Serialize)]
struct RunInfo {
    name: String,
    model: String,
    context_tokens: Option<usize>,
    folder: String,
    samples: usize,
    prompts: usize,
}

#[derive(Debug, Serialize)]
struct Data<'a> {
    version: u32,
    fields: &'static [&'static str],
    runs: Vec<RunInfo>,
    strings: Vec<&'a str>,
    samples: Vec<Vec<Value>>,
}

/// Distinct strings, stored once.
#[derive(Default)]
struct Pool<'a> {
    index: HashMap<&'a str, usize>,
    strings: Vec<&'a str>,
}

impl<'a> Pool<'a> {
    fn add(&mut self, s: &'a str) -> Value {
        let next = self.strings.len();
        let i = *self.index.entry(s).or_insert(next);
        if i == next {
            self.strings.push(s);
        }
        Value::from(i)
    }
}

fn enum_value<T: Serialize>(v: &Option<T>) -> Value {
    v.as_ref().and_then(|x| serde_json::to_value(x).ok()).unwrap_or(Value::Null)
}

/// Prompts per run: the run folder's `prompts.jsonl` (if any), then the
/// given dumps.
pub fn run_prompts(runs: &[ExplorerRun<'_>], shared: &[PathBuf]) -> Result<Vec<Prompts>, ReportError> {
    runs.iter()
        .map(|r| {
            let mut p = Prompts::default();
            let own = r.folder.join(RUN_PROMPTS);
            if own.is_file() {
                p.add_file(&own)?;
            }
            for f in shared {
                p.add_file(f)?;
            }
            Ok(p)
        })
        .collect()
}

/// The explorer's data as JSON, safe to place inside a `<script>` element:
/// every `<` is written as `\u003c`, so no `</script>` or `<!--` can end it.
pub fn data_json(runs: &[ExplorerRun<'_>], prompts: &[Prompts]) -> String {
    let mut pool = Pool::default();
    let mut samples = Vec::new();
    let mut infos = Vec::new();
    for (ri, run) in runs.iter().enumerate() {
        let mut shown = 0;
        for rec in run.records {
            let prompt = prompts.get(ri).map_or(Err("prompt not recorded".to_string()), |p| p.find(rec));
            let s = rec.scores.as_ref();
            let score = |f: fn(&crate::metrics::Scores) -> f64| s.map_or(Value::Null, |s| Value::from(f(s)));
            let (prompt_v, note) = match prompt {
                Ok(text) => {
                    shown += 1;
                    (pool.add(text), Value::Null)
                }
                Err(note) => (Value::Null, Value::from(note)),
            };
            samples.push(vec![
                Value::from(ri),
                Value::from(rec.id.as_str()),
                Value::from(rec.dataset.as_str()),
                Value::from(rec.trajectory.as_str()),
                Value::from(rec.step),
                enum_value(&Some(rec.task)),
                Value::from(rec.runtime),
                Value::from(rec.template.as_str()),
                Value::from(rec.prompt_tokens),
                Value::from(rec.dropped_steps),
                Value::from(rec.steps_kept),
                Value::from(rec.truncated_chars),
                Value::from(rec.runtime_rows_kept),
                Value::from(rec.reused_prompt_tokens),
                Value::from(rec.generated_tokens),
                enum_value(&rec.finish_reason),
                enum_value(&rec.answer_kind),
                enum_value(&rec.skipped),
                rec.skip_detail.as_deref().map_or(Value::Null, Value::from),
                score(|s| s.exact_match),
                score(|s| s.exact_match_ws),
                score(|s| s.rouge_l),
                score(|s| s.rouge_l_code),
                score(|s| s.chrf),
                pool.add(&rec.prediction),
                pool.add(&rec.raw_prediction),
                pool.add(&rec.reference),
                prompt_v,
                note,
            ]);
        }
        infos.push(RunInfo {
            name: run.name.clone(),
            model: run.model.clone(),
            context_tokens: run.context_tokens,
            folder: run.folder.display().to_string(),
            samples: run.records.len(),
            prompts: shown,
        });
    }
    let data = Data { version: 1, fields: FIELDS, runs: infos, strings: pool.strings, samples };
    let json = serde_json::to_string(&data).unwrap_or_else(|_| "{}".into());
    json.replace('<', "\\u003c")
}

/// The explorer's HTML: its section, the data and the scripts. `paired`
/// adds the paired view's section.
pub fn html(data_json: &str, paired: bool) -> String {
    let mut s = String::with_capacity(data_json.len() + SCRIPT.len() + DIFF_SCRIPT.len() + 4096);
    s.push_str(
        "<section id=\"explorer\">\n<h2>Samples</h2>\n<p>Every sample of the reported runs. Filter with the controls \
         under the column names (numbers take <code>&lt;0.5</code>, <code>&gt;=10</code>, <code>=0</code> or \
         <code>2..8</code>; text columns a substring), sort by clicking a column name, open a sample by clicking its \
         row (or with <code>report.html#sample=ID</code>; add <code>&amp;view=samples</code> to see the samples alone). The diff marks what the prediction lacks \
         (<del>struck out</del>) and adds (<ins>underlined</ins>) against the reference.</p>\n\
         <p><span id=\"explorer-status\">The explorer needs JavaScript.</span>\
         <button id=\"explorer-focus\" type=\"button\">samples only / whole report</button></p>\n\
         <div id=\"explorer-table-box\"><table id=\"explorer-table\"><thead></thead><tbody></tbody></table></div>\n\
         <div id=\"sample-view\" hidden></div>\n</section>\n",
    );
    if paired {
        s.push_str(
            "<section id=\"paired\">\n<h2>Paired samples</h2>\n<p>Two runs (or the two runtime variants of one run) \
             side by side, samples matched by id, or by trajectory step and task with runtime off in A and on in B. \
             Sorted by the score difference B − A: where B lost most first. Click a row to see both predictions \
             against the reference.</p>\n<div id=\"paired-controls\"></div>\n<p id=\"paired-summary\"></p>\n\
             <div id=\"paired-table-box\"><table id=\"paired-table\"><thead></thead><tbody></tbody></table></div>\n\
             <div id=\"pair-view\" hidden></div>\n</section>\n",
        );
    }
    s.push_str("<script type=\"application/json\" id=\"explorer-data\">");
    s.push_str(data_json);
    s.push_str("</script>\n<script>\n");
    s.push_str(DIFF_SCRIPT);
    s.push_str(SCRIPT);
    s.push_str("</script>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::{data_json, ExplorerRun, Prompts, FIELDS};
    use crate::records::SampleRecord;

    fn rec(id: &str, prompt_tokens: usize) -> SampleRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "task": "output", "runtime": true, "prediction": "a</script><!--b", "reference": "a",
            "prompt_tokens": prompt_tokens, "steps_kept": 3, "template": "t1",
        }))
        .unwrap()
    }

    #[test]
    fn prompts_match_only_the_same_fit() {
        let dir = std::env::temp_dir().join(format!("themisto-explorer-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("p.jsonl");
        std::fs::write(
            &f,
            "{\"id\":\"a\",\"template\":\"t1\",\"prompt\":\"P\",\"prompt_tokens\":10,\"steps_kept\":3}\n\n\
             {\"id\":\"b\",\"template\":\"t1\",\"prompt\":\"Q\",\"prompt_tokens\":11,\"steps_kept\":3}\n",
        )
        .unwrap();
        let p = Prompts::read(std::slice::from_ref(&f)).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p.find(&rec("a", 10)), Ok("P"));
        assert!(p.find(&rec("b", 12)).unwrap_err().contains("fitted differently (11 tokens"));
        assert!(p.find(&rec("c", 12)).unwrap_err().starts_with("prompt not recorded"));
        // A record's own prompt text comes first.
        let own = SampleRecord { prompt_text: Some("own".into()), ..rec("b", 12) };
        assert_eq!(p.find(&own), Ok("own"));
        assert_eq!(Prompts::default().find(&own), Ok("own"));
        std::fs::write(&f, "{\"id\": 3}\n").unwrap();
        let err = Prompts::read(std::slice::from_ref(&f)).unwrap_err().to_string();
        assert!(err.contains("line 1: not a prompt record"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn data_is_safe_inside_a_script_element_and_pools_strings() {
        let records = [rec("a", 1), rec("b", 2)];
        let run = ExplorerRun {
            name: "m · ctx 512".into(),
            model: "m".into(),
            context_tokens: Some(512),
            folder: "f".into(),
            records: &records,
        };
        let json = data_json(std::slice::from_ref(&run), &[Prompts::default()]);
        assert!(!json.contains('<'), "{json}");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["fields"].as_array().unwrap().len(), FIELDS.len());
        assert_eq!(v["samples"].as_array().unwrap().len(), 2);
        // prediction, raw prediction (empty) and reference: three strings for two samples.
        assert_eq!(v["strings"], serde_json::json!(["a</script><!--b", "", "a"]));
        assert_eq!(v["runs"][0]["name"], "m · ctx 512");
    }
}
