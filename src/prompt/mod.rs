//! Prompts: a template from `prompts/` rendered for one sample, put in the
//! model's chat format, then fitted to the token budget with the model's own
//! tokenizer.
//!
//! - [`template`]: template files and their variables.
//! - [`context`]: the values a template sees (history, target, runtime block).
//! - [`chat`]: chat templates and completion prompts.
//! - [`fit`]: the budget fitter and its guarantee.
//! - [`shared`]: prefix-stable fitting: one history window per step, moved in jumps.
//! - [`post`]: cleaning answers.

pub mod chat;
pub mod context;
pub mod fit;
pub mod post;
pub mod shared;
pub mod template;

use crate::data::samples::{Sample, Task};
use crate::data::{Dataset, Trajectory};
use crate::tokenizer::Tokenizer;
use chat::ChatFormatter;
use context::{ContextSource, Shape};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;
use template::PromptTemplate;

/// How a prompt's history is chosen (`--fit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FitMode {
    /// One history window per step, the same in its four prompts (both
    /// tasks, with and without runtime), moved along a trajectory in jumps
    /// (see [`shared`]); chat prompts use the v3 templates.
    #[default]
    Shared,
    /// Every prompt fitted on its own (see [`fit`]), with the v2 chat
    /// templates: the prompts of runs made before `--fit` existed.
    Independent,
}

impl FitMode {
    /// The fitting of a configuration that does not name one: runs made
    /// before `--fit` existed fitted every prompt independently.
    pub fn before_fit_option() -> FitMode {
        FitMode::Independent
    }

    /// The option value (`shared`, `independent`).
    pub fn as_str(self) -> &'static str {
        match self {
            FitMode::Shared => "shared",
            FitMode::Independent => "independent",
        }
    }
}

/// How prompts are laid out for this model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct PromptSettings {
    /// The window for prompt plus generation.
    pub context_tokens: usize,
    pub max_new_tokens: usize,
    /// Largest share of the prompt budget the runtime block may take.
    pub runtime_share: f64,
    /// Characters of each variable's repr shown in the runtime block.
    pub repr_chars: usize,
    /// How the history is chosen (`--fit`); a configuration written before
    /// the option existed reads as `independent`, the fitting it was made with.
    #[serde(default = "FitMode::before_fit_option")]
    pub fit: FitMode,
    /// The prompt format asked for (`--prompt-format`), over the model
    /// card's; `None`: the card's (chat for a raw .gguf file or `hf://` model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<PromptFormat>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// Tokens at the start of this prompt shared with another prompt of the
    /// same step (the other task or runtime variant): what a model that
    /// keeps its cache computes once per step.
    pub shared_prefix_tokens: usize,
    /// `--fit shared`: the common window of its step that the prompt shows
    /// (`None` with `--fit independent`, and for a step that has none, whose
    /// prompts are fitted one by one).
    pub window: Option<shared::Window>,
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
    /// The prompts of the last step built (the samples of a step come together).
    last_step: Mutex<Option<StepPrompts>>,
    /// `--fit shared`: the walk along each trajectory seen so far.
    walks: Mutex<HashMap<String, Walk>>,
}

/// The four prompts of one step, in [`PromptBuilder::VARIANTS`] order.
#[derive(Clone)]
struct StepPrompts {
    trajectory: Trajectory,
    step: usize,
    outcomes: Vec<FitOutcome>,
}

/// The windows chosen along one trajectory so far (`None`: no window fits).
struct Walk {
    trajectory: Trajectory,
    chosen: Vec<Option<shared::Window>>,
    floor: usize,
}

impl<'a> PromptBuilder<'a> {
    /// Prompts in `settings.format`, else in the model card's `card_format`;
    /// `custom` templates replace the built-in one of their task and variant.
    pub fn new(
        tokenizer: &'a Tokenizer,
        card_format: PromptFormat,
        settings: PromptSettings,
        custom: Vec<PromptTemplate>,
    ) -> Result<Self, PromptError> {
        settings.validate().map_err(PromptError::Config)?;
        let format = settings.format.unwrap_or(card_format);
        for c in &custom {
            if c.format != format {
                return Err(PromptError::Config(format!(
                    "template {} is for {:?} prompts but the run uses {:?} (--prompt-format or the model card)",
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
                    .unwrap_or_else(|| PromptTemplate::builtin(task, runtime, format, settings.fit));
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
        Ok(PromptBuilder {
            tokenizer,
            formatter,
            templates,
            settings,
            last_step: Mutex::new(None),
            walks: Mutex::new(HashMap::new()),
        })
    }

    /// The four prompts of a step: both tasks, without and with runtime.
    pub const VARIANTS: [(Task, bool); 4] =
        [(Task::NextCell, false), (Task::NextCell, true), (Task::Output, false), (Task::Output, true)];

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

    /// Build the fitted prompt for a sample. The four prompts of its step are
    /// built together (and kept until another step is asked for), so that
    /// `shared_prefix_tokens` can be counted and `--fit shared` can choose
    /// their common history.
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
        let index = Self::VARIANTS.iter().position(|v| *v == (sample.task, sample.runtime)).expect("four variants");
        // The locks are held only to look and to store, never while
        // building: a builder may serve threads of different priorities
        // (see `run::ahead`), and what it builds does not depend on which
        // thread asks first.
        {
            let last = self.last_step.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(p) = last.as_ref().filter(|p| p.step == sample.step && p.trajectory == *traj) {
                return Ok(p.outcomes[index].clone());
            }
        }
        let outcomes = self.build_step(traj, sample.step)?;
        let out = outcomes[index].clone();
        *self.last_step.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(StepPrompts { trajectory: traj.clone(), step: sample.step, outcomes });
        Ok(out)
    }

    /// The four prompts of step `step` of `traj` ([`Self::VARIANTS`] order),
    /// with `shared_prefix_tokens` counted.
    fn build_step(&self, traj: &Trajectory, step: usize) -> Result<Vec<FitOutcome>, PromptError> {
        let window = match self.settings.fit {
            FitMode::Independent => None,
            FitMode::Shared => self.window_of(traj, step)?,
        };
        let mut outcomes = Vec::with_capacity(Self::VARIANTS.len());
        for (task, runtime) in Self::VARIANTS {
            let src = ContextSource::new(traj, step, task, runtime, self.settings.repr_chars);
            let tpl = self.template(task, runtime);
            let shared_fit = match window {
                Some(w) => self
                    .fit_shape(tpl, &src, &Self::window_shape(w, self.rows_within_share(&src)?))?
                    .map(|p| FittedPrompt { window: Some(w), ..p }),
                None => None,
            };
            outcomes.push(match shared_fit {
                Some(p) => FitOutcome::Fitted(p),
                None => self.fit_independent(tpl, &src)?,
            });
        }
        for i in 0..outcomes.len() {
            let shared = outcomes
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, o)| match (o, &outcomes[i]) {
                    (FitOutcome::Fitted(other), FitOutcome::Fitted(me)) => {
                        Some(me.tokens.iter().zip(&other.tokens).take_while(|(a, b)| a == b).count())
                    }
                    _ => None,
                })
                .max()
                .unwrap_or(0);
            if let FitOutcome::Fitted(p) = &mut outcomes[i] {
                p.shared_prefix_tokens = shared;
            }
        }
        Ok(outcomes)
    }

    /// The shape a window gives a prompt: its steps, the cap on every one of
    /// them (the newest too, so a step looks the same in later prompts), and
    /// `rows` runtime rows.
    fn window_shape(w: shared::Window, rows: usize) -> Shape {
        Shape {
            first_step: w.first_step,
            output_cap: w.output_cap,
            runtime_rows: rows,
            newest_output_cap: w.output_cap,
            newest_code_cap: None,
        }
    }

    /// `--fit shared`: the window of a step, walking its trajectory from
    /// the first step (each trajectory once; later steps continue the walk).
    /// The walk is copied out and extended without the lock held (see
    /// [`Self::build`]); a longer walk of the same trajectory is stored back.
    fn window_of(&self, traj: &Trajectory, step: usize) -> Result<Option<shared::Window>, PromptError> {
        let known = {
            let walks = self.walks.lock().unwrap_or_else(|e| e.into_inner());
            match walks.get(&traj.id) {
                Some(w) if w.trajectory == *traj && w.chosen.len() > step => return Ok(w.chosen[step]),
                Some(w) if w.trajectory == *traj => Some((w.chosen.clone(), w.floor)),
                _ => None,
            }
        };
        let (chosen, floor) = known.unwrap_or_default();
        let mut walk = Walk { trajectory: traj.clone(), chosen, floor };
        let budget = self.prompt_budget();
        while walk.chosen.len() <= step {
            let k = walk.chosen.len();
            // The runtime rows each variant's share allows do not depend on
            // the window: counted once for all the windows tried.
            let mut rows = [0usize; 4];
            for (r, (task, runtime)) in rows.iter_mut().zip(Self::VARIANTS) {
                *r = self.rows_within_share(&ContextSource::new(traj, k, task, runtime, self.settings.repr_chars))?;
            }
            let (choice, floor) =
                shared::next_window(k, walk.floor, budget, |w, b| self.step_fits(traj, k, w, b, &rows))?;
            walk.chosen.push(choice.map(shared::window));
            walk.floor = floor;
        }
        let window = walk.chosen[step];
        let mut walks = self.walks.lock().unwrap_or_else(|e| e.into_inner());
        let longer = match walks.get(&traj.id) {
            Some(w) => w.trajectory != *traj || w.chosen.len() < walk.chosen.len(),
            None => true,
        };
        if longer {
            walks.insert(traj.id.clone(), walk);
        }
        Ok(window)
    }

    /// Whether all four prompts of a step fit `budget` tokens with window `w`
    /// (variant `i` with `rows[i]` runtime rows, every row its share
    /// allows). The variants are tried from the last ([`Self::VARIANTS`]
    /// order), the output prompt with runtime, usually the longest: a window
    /// that does not fit is then mostly told by one prompt.
    fn step_fits(
        &self,
        traj: &Trajectory,
        step: usize,
        w: shared::Window,
        budget: usize,
        rows: &[usize; 4],
    ) -> Result<bool, PromptError> {
        for (&(task, runtime), &rows) in Self::VARIANTS.iter().zip(rows).rev() {
            let src = ContextSource::new(traj, step, task, runtime, self.settings.repr_chars);
            let shape = Self::window_shape(w, rows);
            let (text, _) = self.render(self.template(task, runtime), &src, &shape)?;
            if self.tokens_of(&text)?.len() > budget {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The prompt of one shape, if it fits the budget (counted exactly).
    fn fit_shape(
        &self,
        tpl: &PromptTemplate,
        src: &ContextSource<'_>,
        shape: &Shape,
    ) -> Result<Option<FittedPrompt>, PromptError> {
        let (text, built) = self.render(tpl, src, shape)?;
        let tokens = self.tokens_of(&text)?;
        if tokens.len() > self.prompt_budget() {
            return Ok(None);
        }
        Ok(Some(FittedPrompt {
            text,
            tokens,
            dropped_steps: built.context.dropped_steps,
            steps_kept: built.context.cells.len(),
            truncated_chars: built.truncated_chars,
            runtime_rows_kept: built.runtime_rows_kept,
            shared_prefix_tokens: 0,
            window: None,
            template_id: tpl.id.clone(),
            template_sha256: tpl.sha256.clone(),
            stop: tpl.stop.clone(),
            post: tpl.post,
        }))
    }

    /// Fit one prompt on its own (`--fit independent`, and `--fit shared`
    /// for a step where no common window fits): the walk of [`fit`].
    fn fit_independent(&self, tpl: &PromptTemplate, src: &ContextSource<'_>) -> Result<FitOutcome, PromptError> {
        let max_rows = self.rows_within_share(src)?;
        let budget = self.prompt_budget();
        let phases = fit::phases(src, max_rows);
        let hit = fit::first_fit(&phases, |shape| self.fit_shape(tpl, src, shape))?;
        Ok(match hit {
            Some(p) => FitOutcome::Fitted(p),
            None => {
                let leanest = phases.last().and_then(|p| p.last()).copied().unwrap_or_default();
                let (text, _) = self.render(tpl, src, &leanest)?;
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
