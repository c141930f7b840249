//! Prompts: a template from `prompts/` rendered for one sample, put in the
//! model's chat format, then fitted to the token budget with the model's own
//! tokenizer.
//!
//! - [`template`]: template files and their variables.
//! - [`context`]: the values a template sees (history, target, runtime block).
//! - [`chat`]: chat templates and completion prompts.
//! - [`fit`]: the budget fitter and its guarantee.
//! - [`post`]: cleaning answers.

pub mod chat;
pub mod context;
pub mod fit;
pub mod post;
pub mod template;

use crate::data::samples::{Sample, Task};
use crate::data::Dataset;
use crate::tokenizer::Tokenizer;
use chat::ChatFormatter;
use context::{ContextSource, Shape};
use serde::{Deserialize, Serialize};
use template::PromptTemplate;

/// How prompts are laid out for this model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PromptFormat {
    /// Instruct models: messages rendered with the model's chat template.
    #[default]
    Chat,
    /// Base models: a notebook-like completion prompt.
    Completion,
}

/// Errors while building prompts.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("prompt template {origin}: {message}")]
    Template { origin: String, message: String },
    #[error("chat format: {0}")]
    Chat(String),
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
    #[error("sample {id}: trajectory {trajectory:?} has no step {step}")]
    MissingStep { id: String, trajectory: String, step: usize },
    #[error("{0}")]
    Config(String),
}

/// Budget and rendering settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PromptSettings {
    /// The window for prompt plus generation.
    pub context_tokens: usize,
    pub max_new_tokens: usize,
    /// Largest share of the prompt budget the runtime block may take.
    pub runtime_share: f64,
    /// Characters of each variable's repr shown in the runtime block.
    pub repr_chars: usize,
}

impl PromptSettings {
    /// The checks every command makes before building a prompt.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_new_tokens == 0 {
            return Err("--max-new-tokens must be at least 1".into());
        }
        if self.max_new_tokens >= self.context_tokens {
            return Err(format!(
                "--max-new-tokens {} leaves no room for a prompt in --context-tokens {}",
                self.max_new_tokens, self.context_tokens
            ));
        }
        if !(0.0..=1.0).contains(&self.runtime_share) {
            return Err(format!("--runtime-share must be between 0 and 1, got {}", self.runtime_share));
        }
        Ok(())
    }
}

/// Why a sample has no prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Even the leanest prompt does not leave room for the answer.
    OverBudget,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::OverBudget => "over_budget",
        }
    }
}

/// A prompt that fits the budget.
#[derive(Debug, Clone)]
pub struct FittedPrompt {
    pub text: String,
    pub tokens: Vec<u32>,
    pub dropped_steps: usize,
    pub steps_kept: usize,
    pub truncated_chars: usize,
    pub runtime_rows_kept: usize,
    pub template_id: String,
    pub template_sha256: String,
    pub stop: Vec<String>,
    pub post: template::PostKind,
}

/// The result of fitting one sample.
#[derive(Debug, Clone)]
pub enum FitOutcome {
    Fitted(FittedPrompt),
    Skipped { reason: SkipReason, detail: String, template_id: String },
}

/// Builds fitted prompts for one model.
pub struct PromptBuilder<'a> {
    tokenizer: &'a Tokenizer,
    formatter: ChatFormatter,
    templates: Vec<PromptTemplate>,
    settings: PromptSettings,
}

impl<'a> PromptBuilder<'a> {
    /// `custom` templates replace the built-in one of their task and variant.
    pub fn new(
        tokenizer: &'a Tokenizer,
        format: PromptFormat,
        settings: PromptSettings,
        custom: Vec<PromptTemplate>,
    ) -> Result<Self, PromptError> {
        settings.validate().map_err(PromptError::Config)?;
        for c in &custom {
            if c.format != format {
                return Err(PromptError::Config(format!(
                    "template {} is for {:?} prompts but the model uses {:?}",
                    c.id, c.format, format
                )));
            }
        }
        let mut templates = Vec::new();
        for task in Task::ALL {
            for runtime in [false, true] {
                let t = custom
                    .iter()
                    .find(|c| c.task == task && c.runtime == runtime)
                    .cloned()
                    .unwrap_or_else(|| PromptTemplate::builtin(task, runtime, format));
                templates.push(t);
            }
        }
        let template = match format {
            PromptFormat::Chat => match tokenizer.chat_template() {
                Some(t) => Some(t.to_string()),
                None if tokenizer.token_id("<|im_start|>").is_some() => Some(chat::CHATML_TEMPLATE.to_string()),
                None => None,
            },
            PromptFormat::Completion => None,
        };
        let bos = tokenizer.bos().and_then(|id| tokenizer.decode(&[id]).ok()).unwrap_or_default();
        let eos = tokenizer.eos_ids().first().and_then(|id| tokenizer.decode(&[*id]).ok()).unwrap_or_default();
        let formatter = ChatFormatter::new(format, template.as_deref(), &bos, &eos)?;
        Ok(PromptBuilder { tokenizer, formatter, templates, settings })
    }

    pub fn settings(&self) -> &PromptSettings {
        &self.settings
    }

    /// The template used for a task and variant.
    pub fn template(&self, task: Task, runtime: bool) -> &PromptTemplate {
        self.templates
            .iter()
            .find(|t| t.task == task && t.runtime == runtime)
            .expect("one template per task and variant")
    }

    /// Tokens budgeted for the prompt.
    pub fn prompt_budget(&self) -> usize {
        self.settings.context_tokens - self.settings.max_new_tokens
    }

    fn tokens_of(&self, text: &str) -> Result<Vec<u32>, PromptError> {
        let mut ids = Vec::new();
        if let Some(bos) = self.tokenizer.bos() {
            // Chat templates that write the BOS text themselves already have it.
            let bos_text = self.tokenizer.decode(&[bos]).unwrap_or_default();
            if bos_text.is_empty() || !text.starts_with(&bos_text) {
                ids.push(bos);
            }
        }
        ids.extend(self.tokenizer.encode(text)?);
        Ok(ids)
    }

    fn render(
        &self,
        tpl: &PromptTemplate,
        src: &ContextSource<'_>,
        shape: &Shape,
    ) -> Result<(String, context::Built), PromptError> {
        let built = src.build(shape);
        let user = tpl.render_user(&built.context)?;
        let prefix = tpl.render_prefix(&built.context)?;
        let text = self.formatter.render(tpl.system.as_deref(), &user, &prefix)?;
        Ok((text, built))
    }

    /// How many runtime rows fit in the runtime block's share of the budget.
    fn rows_within_share(&self, src: &ContextSource<'_>) -> Result<usize, PromptError> {
        let share = (self.prompt_budget() as f64 * self.settings.runtime_share).floor() as usize;
        let mut used = 0usize;
        for (i, r) in src.rows.iter().enumerate() {
            let line = format!("# {} | {} | {} | {}\n", r.name, r.type_name, r.size, r.repr);
            used += self.tokenizer.encode(&line)?.len();
            if used > share {
                return Ok(i);
            }
        }
        Ok(src.rows.len())
    }

    /// Build the fitted prompt for a sample.
    pub fn build(&self, dataset: &Dataset, sample: &Sample) -> Result<FitOutcome, PromptError> {
        let traj = dataset.trajectory(&sample.trajectory).ok_or_else(|| PromptError::MissingStep {
            id: sample.id.clone(),
            trajectory: sample.trajectory.clone(),
            step: sample.step,
        })?;
        if sample.step >= traj.steps.len() {
            return Err(PromptError::MissingStep {
                id: sample.id.clone(),
                trajectory: sample.trajectory.clone(),
                step: sample.step,
            });
        }
        let tpl = self.template(sample.task, sample.runtime);
        let src = ContextSource::new(traj, sample.step, sample.task, sample.runtime, self.settings.repr_chars);
        let max_rows = self.rows_within_share(&src)?;
        let budget = self.prompt_budget();
        let phases = fit::phases(&src, max_rows);
        let hit = fit::first_fit(&phases, |shape| -> Result<Option<FittedPrompt>, PromptError> {
            let (text, built) = self.render(tpl, &src, shape)?;
            let tokens = self.tokens_of(&text)?;
            if tokens.len() > budget {
                return Ok(None);
            }
            Ok(Some(FittedPrompt {
                text,
                tokens,
                dropped_steps: built.context.dropped_steps,
                steps_kept: built.context.cells.len(),
                truncated_chars: built.truncated_chars,
                runtime_rows_kept: built.runtime_rows_kept,
                template_id: tpl.id.clone(),
                template_sha256: tpl.sha256.clone(),
                stop: tpl.stop.clone(),
                post: tpl.post,
            }))
        })?;
        Ok(match hit {
            Some(p) => FitOutcome::Fitted(p),
            None => {
                let leanest = phases.last().and_then(|p| p.last()).copied().unwrap_or_default();
                let (text, _) = self.render(tpl, &src, &leanest)?;
                let n = self.tokens_of(&text)?.len();
                FitOutcome::Skipped {
                    reason: SkipReason::OverBudget,
                    detail: format!(
                        "the leanest prompt has {n} tokens; the budget is {budget} ({} context - {} new)",
                        self.settings.context_tokens, self.settings.max_new_tokens
                    ),
                    template_id: tpl.id.clone(),
                }
            }
        })
    }
}
