//! Prompt templates: one TOML file per task, runtime variant and prompt format
//! in `prompts/`, compiled in; `--prompt-template PATH` loads another.
//!
//! A template has a `user` text (a minijinja template; for completion models it
//! is the whole prompt), an optional `system` text, an `assistant_prefix` that
//! starts the model's answer, `stop` strings and a post-processing kind. The
//! partials `history` and `runtime` (`prompts/_history.jinja`,
//! `prompts/_runtime.jinja`) can be included. Variables:
//!
//! | variable | meaning |
//! |---|---|
//! | `cells` | history cells: `number` (1-based execution number), `code`, `output`, `output_kind`, `output_cut`, `code_cut` |
//! | `dropped_steps` | earlier steps left out to fit the budget |
//! | `target` | output task: the cell whose output is predicted (`number`, `code`) |
//! | `next_number` | execution number of the cell being predicted |
//! | `runtime` | runtime variant: `after_cell`, `exec_time`, `memory`, `rows` (`name`, `type`, `size`, `repr`), `rows_omitted` |
//! | `trajectory` | the trajectory id |

use super::PromptError;
use crate::data::samples::Task;
use crate::prompt::{FitMode, PromptFormat};
use crate::util::sha256_hex;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// Built-in templates (file name, text).
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    ("next_cell.plain.chat.v2.toml", include_str!("../../prompts/next_cell.plain.chat.v2.toml")),
    ("next_cell.runtime.chat.v2.toml", include_str!("../../prompts/next_cell.runtime.chat.v2.toml")),
    ("output.plain.chat.v2.toml", include_str!("../../prompts/output.plain.chat.v2.toml")),
    ("output.runtime.chat.v2.toml", include_str!("../../prompts/output.runtime.chat.v2.toml")),
    ("next_cell.plain.chat.v3.toml", include_str!("../../prompts/next_cell.plain.chat.v3.toml")),
    ("next_cell.runtime.chat.v3.toml", include_str!("../../prompts/next_cell.runtime.chat.v3.toml")),
    ("output.plain.chat.v3.toml", include_str!("../../prompts/output.plain.chat.v3.toml")),
    ("output.runtime.chat.v3.toml", include_str!("../../prompts/output.runtime.chat.v3.toml")),
    ("next_cell.plain.completion.v1.toml", include_str!("../../prompts/next_cell.plain.completion.v1.toml")),
    ("next_cell.runtime.completion.v1.toml", include_str!("../../prompts/next_cell.runtime.completion.v1.toml")),
    ("output.plain.completion.v1.toml", include_str!("../../prompts/output.plain.completion.v1.toml")),
    ("output.runtime.completion.v1.toml", include_str!("../../prompts/output.runtime.completion.v1.toml")),
];

/// Partials every template may include (name, text).
pub const PARTIALS: &[(&str, &str)] = &[
    ("history", include_str!("../../prompts/_history.jinja")),
    ("runtime", include_str!("../../prompts/_runtime.jinja")),
];

/// How the raw answer is cleaned (see [`super::post`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PostKind {
    /// Code: unwrap a fenced block, drop notebook markers, trim blank lines.
    #[default]
    Code,
    /// Output text: unwrap a fenced block, drop an `Out[n]:` marker, trim blank lines.
    Output,
    /// Keep the text as generated.
    None,
}

/// A prompt template.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromptTemplate {
    pub id: String,
    pub task: Task,
    pub runtime: bool,
    pub format: PromptFormat,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    pub user: String,
    #[serde(default)]
    pub assistant_prefix: String,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub post: PostKind,
    /// sha256 of the template file's text (filled in when loaded).
    #[serde(skip)]
    pub sha256: String,
}

impl PromptTemplate {
    /// Parse a template file's text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, PromptError> {
        let mut t: PromptTemplate = toml::from_str(text)
            .map_err(|e| PromptError::Template { origin: origin.to_string(), message: e.to_string() })?;
        t.sha256 = sha256_hex(text.as_bytes());
        // Check the user text compiles now, not in the middle of a run.
        let env = environment();
        env.template_from_str(&t.user)
            .map_err(|e| PromptError::Template { origin: origin.to_string(), message: format!("field `user`: {e}") })?;
        env.template_from_str(&t.assistant_prefix).map_err(|e| PromptError::Template {
            origin: origin.to_string(),
            message: format!("field `assistant_prefix`: {e}"),
        })?;
        Ok(t)
    }

    /// Load a template file from disk.
    pub fn load(path: &Path) -> Result<Self, PromptError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PromptError::Template { origin: path.display().to_string(), message: e.to_string() })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// The built-in template for a task, variant, format and fitting: chat
    /// prompts use the v2 templates with `--fit independent` (the prompts of
    /// runs made before `--fit` existed) and the v3 ones (one task-neutral
    /// system text) with `--fit shared`; completion prompts use v1 with both.
    pub fn builtin(task: Task, runtime: bool, format: PromptFormat, fit: FitMode) -> PromptTemplate {
        let id = builtin_id(task, runtime, format, fit);
        all_builtin()
            .into_iter()
            .find(|t| t.id == id)
            .expect("a built-in template exists for every task, variant, format and fitting")
    }

    /// Render the assistant prefix with a context (it may use the same
    /// variables as the user text, e.g. `{{ next_number }}`).
    pub fn render_prefix<S: Serialize>(&self, ctx: &S) -> Result<String, PromptError> {
        let env = environment();
        env.render_str(&self.assistant_prefix, ctx).map_err(|e| PromptError::Template {
            origin: self.id.clone(),
            message: format!("rendering `assistant_prefix`: {e:#}"),
        })
    }

    /// Render the user text with a context.
    pub fn render_user<S: Serialize>(&self, ctx: &S) -> Result<String, PromptError> {
        let env = environment();
        env.render_str(&self.user, ctx)
            .map_err(|e| PromptError::Template { origin: self.id.clone(), message: format!("rendering `user`: {e:#}") })
    }
}

/// The id of the built-in template of a task, variant, format and fitting
/// (see [`PromptTemplate::builtin`]).
pub fn builtin_id(task: Task, runtime: bool, format: PromptFormat, fit: FitMode) -> String {
    let (format_name, version) = match (format, fit) {
        (PromptFormat::Chat, FitMode::Independent) => ("chat", "v2"),
        (PromptFormat::Chat, FitMode::Shared) => ("chat", "v3"),
        (PromptFormat::Completion, _) => ("completion", "v1"),
    };
    let variant = if runtime { "runtime" } else { "plain" };
    format!("{}.{variant}.{format_name}.{version}", task.as_str())
}

/// All built-in templates.
pub fn all_builtin() -> Vec<PromptTemplate> {
    BUILTIN_TEMPLATES
        .iter()
        .map(|(name, text)| {
            PromptTemplate::parse(text, &format!("prompts/{name}"))
                .unwrap_or_else(|e| panic!("built-in template is invalid: {e}"))
        })
        .collect()
}

/// The template environment: partials registered, trailing newlines kept,
/// undefined variables are errors.
fn environment() -> minijinja::Environment<'static> {
    let mut env = minijinja::Environment::new();
    env.set_keep_trailing_newline(true);
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    for (name, text) in PARTIALS {
        env.add_template(name, text).expect("partials compile");
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_list_matches_prompts_folder() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".toml"))
            .collect();
        on_disk.sort();
        let mut compiled: Vec<String> = BUILTIN_TEMPLATES.iter().map(|(n, _)| n.to_string()).collect();
        compiled.sort();
        assert_eq!(on_disk, compiled);
    }

    #[test]
    fn one_builtin_per_task_variant_format_fitting_and_ids_match_files() {
        let all = all_builtin();
        for (t, (name, _)) in all.iter().zip(BUILTIN_TEMPLATES) {
            assert_eq!(format!("{}.toml", t.id), *name);
        }
        for task in Task::ALL {
            for runtime in [false, true] {
                for format in [PromptFormat::Chat, PromptFormat::Completion] {
                    for fit in [FitMode::Independent, FitMode::Shared] {
                        let t = PromptTemplate::builtin(task, runtime, format, fit);
                        assert_eq!((t.task, t.runtime, t.format), (task, runtime, format), "{}", t.id);
                    }
                }
            }
        }
        // Every file is used by some fitting.
        let used: std::collections::HashSet<String> = Task::ALL
            .iter()
            .flat_map(|&task| {
                [false, true].into_iter().flat_map(move |rt| {
                    [PromptFormat::Chat, PromptFormat::Completion].into_iter().flat_map(move |f| {
                        [FitMode::Independent, FitMode::Shared].map(move |fit| builtin_id(task, rt, f, fit))
                    })
                })
            })
            .collect();
        assert_eq!(used.len(), all.len());
    }

    #[test]
    fn shared_templates_have_one_system_text() {
        for format in [PromptFormat::Chat, PromptFormat::Completion] {
            let systems: std::collections::HashSet<Option<String>> = Task::ALL
                .iter()
                .flat_map(|&t| [false, true].map(|rt| PromptTemplate::builtin(t, rt, format, FitMode::Shared).system))
                .collect();
            assert_eq!(systems.len(), 1, "{format:?}: {systems:?}");
        }
    }

    #[test]
    fn bad_template_names_origin_and_field() {
        let e = PromptTemplate::parse(
            "id='x'\ntask='output'\nruntime=false\nformat='chat'\nuser='{% if %}'\n",
            "mine.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("mine.toml") && e.contains("`user`"), "{e}");
    }
}
